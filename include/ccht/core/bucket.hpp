/**
 * @file bucket.hpp
 * @brief Bucket layout and the non-owning view of a bucket array that the core operates on.
 *
 * Layout (B = 16, the default): per bucket, three 128-byte lines in structure-of-arrays order,
 *   keys[16] | values[16] | scores[16],
 * plus a 32-bit version word per bucket in a separate array (32 buckets' versions per line).
 * Why: a probe compares all B keys, so the keys of one bucket fill exactly one 128-byte line: one
 * coalesced load by a 16-lane tile, two host cache lines. A positive find then reads one 32-byte
 * sector of values and writes one sector of scores; a negative find reads only versions and keys.
 * Bytes read per find, counted in 32-byte GPU sectors:
 *   hit in the first bucket:  version 32 + keys 128 + value 32            = 192 B (+32 B score write)
 *   miss (both buckets):      2 x (version 32 + keys 128)                 = 320 B
 * An insert reads both buckets' keys and, when both are full, both score lines (2 x 288 B).
 * B = 16 also gives each key 32 candidate slots, which keeps the per-bucket LRU close to a global
 * LRU (see docs/design.md). B = 8 would halve key bytes per probe at the cost of associativity.
 */
#pragma once

#include <ccht/core/config.hpp>
#include <ccht/core/types.hpp>

#include <cstddef>
#include <cstdint>

namespace ccht {

/// Slots per bucket used by ccht::table.
inline constexpr int default_bucket_size = 16;

/**
 * @brief One bucket of @p BucketSize slots (structure of arrays, 128-byte aligned).
 * @tparam BucketSize slots per bucket, a power of two from 1 to 32.
 */
template <int BucketSize>
struct alignas(128) bucket {
  static_assert(BucketSize >= 1 && BucketSize <= 32 && (BucketSize & (BucketSize - 1)) == 0,
                "bucket size must be a power of two in [1, 32]");
  /// Number of slots.
  static constexpr int size = BucketSize;
  key_type keys[BucketSize];      ///< empty_key marks a free slot
  value_type values[BucketSize];  ///< payloads, meaningful where the key is not empty
  score_type scores[BucketSize];  ///< policy score (recency/frequency), smallest is evicted first
};

/**
 * @brief Non-owning, trivially copyable view of a bucket array and its version words.
 *
 * Version word protocol (a per-bucket seqlock): even = unlocked, odd = a writer holds it. Writers
 * lock their two buckets in index order; readers validate by re-reading the version.
 */
template <int BucketSize>
struct bucket_array_view {
  bucket<BucketSize>* buckets = nullptr;  ///< num_buckets buckets
  std::uint32_t* versions = nullptr;      ///< num_buckets version words
  std::uint32_t num_buckets = 0;          ///< at least 2
  std::uint64_t seed = 0;                 ///< hash seed
  /// Global capacity layer only: live-entry count word (backend memory), else null.
  std::uint64_t* live = nullptr;
  /// Global capacity layer only: most entries held (at most the slots).
  std::uint64_t capacity = 0;
  /// Global capacity layer only: buckets ranked per global eviction.
  std::uint32_t samples = 8;
  /// Double LRU / LRU-CHT only, null otherwise: the tail index, one word per bucket holding a
  /// lower bound of its oldest score (core/global.hpp); null means sampled buckets.
  score_type* tails = nullptr;
  /// Two-level tail index only, null otherwise: one word per line of `tails` (16 buckets) holding
  /// a lower bound of that line's words (core/global.hpp).
  score_type* upper = nullptr;
  /// Kick-out policies only: most residents one insert displaces before the homeless one is
  /// evicted (ccht::kick_threshold, the paper's 2000; 0 counts as 1).
  std::uint32_t max_kicks = 2000;
  /// Pinnable policies: writers claim a victim's score before removing it (core/pin.hpp), which
  /// makes lock-free pins (bucket_ops::pin_optimistic) safe. Off for plain tables, which then save
  /// a compare-and-swap per eviction; the page cache sets it on its view of its index.
  bool optimistic_pins = false;
  /// Own-first search only (victim_search::own_first), null otherwise: the age in ticks of the
  /// last global victim (core/global.hpp, own_victim), backend memory.
  score_type* victim_age = nullptr;
  /// Own-first search only: how much younger than *victim_age an own bucket's oldest entry may
  /// be and still be evicted in place, in 256ths of it (0 to 255).
  std::uint32_t own_slack = 0;
};

}  // namespace ccht
