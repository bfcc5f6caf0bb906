/**
 * @file hash.hpp
 * @brief Seeded 64-bit key hash and the two candidate buckets of a key.
 */
#pragma once

#include <ccht/core/config.hpp>
#include <ccht/core/types.hpp>

#include <cstdint>

namespace ccht {

/// Seed used when the caller gives none.
inline constexpr std::uint64_t default_seed = 0x9e3779b97f4a7c15ull;

/**
 * @brief Seeded 64-bit mixer (xor-shift-multiply finaliser).
 *
 * Every output bit depends on every input bit, so the low and high halves can pick the two
 * candidate buckets independently.
 */
CCHT_HOST_DEVICE constexpr std::uint64_t hash64(key_type key, std::uint64_t seed) noexcept {
  std::uint64_t x = key ^ seed;
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  x ^= x >> 33;
  return x;
}

/// The two distinct candidate buckets of a key. `first` is probed first and filled first.
struct candidate_buckets {
  std::uint32_t first;   ///< h1(k)
  std::uint32_t second;  ///< h2(k), never equal to first
};

/**
 * @brief Maps a key to its two distinct candidate buckets among @p num_buckets (>= 2).
 *
 * Uses multiply-shift range reduction (no division): the low 32 hash bits pick the first bucket,
 * the high 32 bits pick the second among the remaining num_buckets - 1.
 */
CCHT_HOST_DEVICE constexpr candidate_buckets candidates(key_type key, std::uint64_t seed,
                                                        std::uint32_t num_buckets) noexcept {
  std::uint64_t const h = hash64(key, seed);
  auto const lo = static_cast<std::uint32_t>(h);
  auto const hi = static_cast<std::uint32_t>(h >> 32);
  auto const b1 = static_cast<std::uint32_t>((std::uint64_t{lo} * num_buckets) >> 32);
  auto b2 = static_cast<std::uint32_t>((std::uint64_t{hi} * (num_buckets - 1)) >> 32);
  if (b2 >= b1) { ++b2; }
  return {b1, b2};
}

}  // namespace ccht
