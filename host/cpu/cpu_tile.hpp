// The tile the CPU backend runs the core on: ccht::scalar_tile (one lane: the product), or, in
// builds with CCHT_CPU_LANES > 1 (preset `lanes`), a lockstep_tile of that many lanes emulated
// on the calling thread (include/ccht/lanes/lockstep_tile.hpp), so that every table and page-cache
// test runs the lane logic of the CUDA kernels.
#pragma once

#include <ccht/core/accounting.hpp>
#include <ccht/core/config.hpp>
#include <ccht/core/tile.hpp>

#ifndef CCHT_CPU_LANES
#define CCHT_CPU_LANES 1
#endif
#if CCHT_CPU_LANES > 1
#include <ccht/lanes/lockstep_tile.hpp>
#endif

namespace ccht::detail {

/// Lanes of the CPU backend's tile.
inline constexpr unsigned cpu_tile_lanes = CCHT_CPU_LANES;

/**
 * Runs one element's core call f(tile, acc) and returns its result (the same on every lane).
 * Only lane 0 counts accesses: the core's count events are the same on every lane, as the
 * kernels, where lane 0 adds them up, assume. f must return its outputs by value.
 */
template <class F>
CCHT_FORCEINLINE decltype(auto) on_cpu_tile(access_counts* acc, F&& f) {
#if CCHT_CPU_LANES > 1
  return lanes::run<CCHT_CPU_LANES>(
      [&](auto const& tile) { return f(tile, tile.thread_rank() == 0 ? acc : nullptr); });
#else
  return f(scalar_tile{}, acc);
#endif
}

}  // namespace ccht::detail
