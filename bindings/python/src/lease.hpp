// The pins of a ccht.PageLease or ccht.ObjectLease (page_cache.cpp, weight_cache.cpp): the pin
// rule of docs/python.md, written once for both caches.
#pragma once

#include "common.hpp"

#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ccht::py {

/**
 * @brief The pins of one lease, owned by it and shared with its views (through `hold`).
 *
 * Every read and change happens under `mu`, and whoever holds `mu` never waits for the GIL (it
 * is taken without the GIL, or with it only around plain reads), so the two cannot deadlock.
 * publish, view and close serialise on `mu`: once the lease is closed, publish raises and never
 * reaches the cache, so a fill that close abandoned is never published by key over the fill of
 * another caller who acquired the key since.
 */
struct lease_pins {
  std::mutex mu;
  std::vector<key_type> keys;     ///< per element
  std::vector<bool> held;         ///< per element: holds a pin
  std::vector<bool> unpublished;  ///< per element: a fill not published yet
  bool closed = false;            ///< closed: no publish, no new view (views may hold the pins)
};

/// Gives back a lease's pins: fills never published are abandoned, everything else released
/// (both attempted; the first failure is rethrown after).
template <class Cache>
void release_lease(Cache& cache, lease_pins& p) {
  std::lock_guard lock(p.mu);
  p.closed = true;
  std::vector<key_type> to_release, to_abandon;
  for (std::size_t i = 0; i < p.keys.size(); ++i) {
    if (p.held[i]) { (p.unpublished[i] ? to_abandon : to_release).push_back(p.keys[i]); }
  }
  p.held.assign(p.held.size(), false);
  std::exception_ptr first;
  auto attempt = [&](auto&& call) {
    try {
      call();
    } catch (...) {
      if (!first) { first = std::current_exception(); }
    }
  };
  if (!to_abandon.empty()) { attempt([&] { cache.abandon(to_abandon); }); }
  if (!to_release.empty()) { attempt([&] { cache.release(to_release); }); }
  if (first) { std::rethrow_exception(first); }
}

/// Marks the lease closed. Waits, without the GIL, for a publish in progress.
inline void close_lease(lease_pins& p) {
  if (std::unique_lock lock(p.mu, std::try_to_lock); lock.owns_lock()) {
    p.closed = true;  // uncontended: no need to let go of the GIL
    return;
  }
  gil_released unlocked;
  std::lock_guard lock(p.mu);
  p.closed = true;
}

/// Whether a new view of element @p i may be written (an unpublished fill); nullopt when the
/// lease is closed. Views of published data are read-only: every reader shares those bytes.
inline std::optional<bool> view_writable(lease_pins& p, std::size_t i) {
  std::lock_guard lock(p.mu);  // held briefly, never across a wait for the GIL
  if (p.closed) { return std::nullopt; }
  return p.unpublished[i];
}

/// The elements @p which names (every unpublished fill when none) into @p idx, or why not:
/// each must be in range, named once, and an unpublished fill.
inline std::string chosen(lease_pins const& p,
                          std::optional<std::vector<std::int64_t>> const& which,
                          std::vector<std::size_t>& idx) {
  std::size_t const n = p.keys.size();
  if (!which) {
    for (std::size_t i = 0; i < n; ++i) {
      if (p.unpublished[i]) { idx.push_back(i); }
    }
    return {};
  }
  std::vector<bool> seen(n, false);
  for (std::int64_t const w : *which) {
    std::string const e = "element " + std::to_string(w);
    if (w < 0 || static_cast<std::uint64_t>(w) >= n) {
      return e + " is out of range (the lease has " + std::to_string(n) + ")";
    }
    auto const i = static_cast<std::size_t>(w);
    if (seen[i]) { return e + " is given twice"; }
    if (!p.unpublished[i]) { return e + " is not an unpublished fill of this lease"; }
    seen[i] = true;
    idx.push_back(i);
  }
  return {};
}

/// Publishes the elements @p which names, after checking all of them: nothing reaches the cache
/// unless the lease is open and every element is valid. @p what prefixes the ValueError.
template <class Cache>
void publish_lease(Cache& cache, lease_pins& p,
                   std::optional<std::vector<std::int64_t>> const& which, char const* what) {
  std::string bad;
  {
    gil_released unlocked;
    std::lock_guard lock(p.mu);
    std::vector<std::size_t> idx;
    bad = p.closed ? "the lease is closed" : chosen(p, which, idx);
    if (bad.empty() && !idx.empty()) {
      std::vector<key_type> k;
      for (std::size_t i : idx) { k.push_back(p.keys[i]); }
      cache.publish(k);
      for (std::size_t i : idx) { p.unpublished[i] = false; }
    }
  }
  if (!bad.empty()) { throw nb::value_error((std::string(what) + ": " + bad).c_str()); }
}

/// The ValueError of a call on a closed lease.
[[noreturn]] inline void closed_error(char const* what) {
  throw nb::value_error((std::string(what) + ": the lease is closed").c_str());
}

/// A lease's pins, per element: which hold one (hit or fill) and which are fills.
template <class Cache>
hold_ptr make_hold(std::shared_ptr<Cache> cache, std::shared_ptr<lease_pins> const& pins,
                   std::vector<key_type> keys, std::vector<bool> held,
                   std::vector<bool> fills) {
  pins->keys = std::move(keys);
  pins->held = std::move(held);
  pins->unpublished = std::move(fills);
  return std::make_shared<hold>([cache, pins] { release_lease(*cache, *pins); });
}

}  // namespace ccht::py
