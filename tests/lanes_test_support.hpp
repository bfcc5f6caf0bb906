// What tests/test_lanes.cpp and tests/test_lanes_grid.cpp share.
#pragma once

#include <ccht/lanes/lockstep_tile.hpp>

#include <optional>
#include <string>

namespace ccht::test {

/// The hazard @p f throws, if any (its report in @p report).
template <class F>
std::optional<lanes::hazard_kind> hazard_of(F&& f, std::string* report = nullptr) {
  try {
    f();
  } catch (lanes::hazard const& h) {
    if (report != nullptr) { *report = h.what(); }
    return h.kind();
  }
  return std::nullopt;
}

}  // namespace ccht::test
