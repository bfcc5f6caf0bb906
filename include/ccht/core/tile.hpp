/**
 * @file tile.hpp
 * @brief The thread-tile interface the core algorithm is written against, and its one-thread case.
 *
 * The core probes a bucket with a tile of T threads, each lane owning slots lane, lane+T, ...
 * On the GPU a tile is `cooperative_groups::thread_block_tile<T>`; on the host (and in scalar
 * device code) it is ccht::scalar_tile below. Only the members used here are required:
 * `num_threads()`, `thread_rank()`, `ballot()`, `shfl()`, `shfl_xor()` and `sync()`.
 */
#pragma once

#include <ccht/core/config.hpp>

#include <cstdint>

namespace ccht {

/// A tile of one thread: the scalar path, run by the CPU backend.
struct scalar_tile {
  /// Number of threads in the tile.
  CCHT_HOST_DEVICE static constexpr unsigned num_threads() noexcept { return 1; }
  /// Rank of the calling thread in the tile.
  CCHT_HOST_DEVICE static constexpr unsigned thread_rank() noexcept { return 0; }
  /// Bit i set when lane i's predicate holds.
  CCHT_HOST_DEVICE static constexpr unsigned ballot(bool p) noexcept { return p ? 1u : 0u; }
  /// Value of @p v held by lane @p src.
  template <class T>
  CCHT_HOST_DEVICE static constexpr T shfl(T v, unsigned) noexcept { return v; }
  /// Value of @p v held by lane (rank ^ mask).
  template <class T>
  CCHT_HOST_DEVICE static constexpr T shfl_xor(T v, unsigned) noexcept { return v; }
  /// Barrier across the tile.
  CCHT_HOST_DEVICE static constexpr void sync() noexcept {}
};

namespace detail {

/// Index of the lowest set bit of a non-zero mask.
CCHT_HOST_DEVICE CCHT_FORCEINLINE int lowest_lane(unsigned mask) noexcept {
#if CCHT_DEVICE_CODE
  return __ffs(static_cast<int>(mask)) - 1;
#else
  return __builtin_ctz(mask);
#endif
}

/// Number of set bits.
CCHT_HOST_DEVICE CCHT_FORCEINLINE int popcount(unsigned mask) noexcept {
#if CCHT_DEVICE_CODE
  return __popc(mask);
#else
  return __builtin_popcount(mask);
#endif
}

}  // namespace detail
}  // namespace ccht
