/**
 * @file policy.hpp
 * @brief In-bucket replacement policies as types: lru (the CCHT default), fifo and lfu; with a
 *        global layer double_lru and coarse_lru; the paper's kick-out baselines lru_cht and
 *        random_cht.
 *
 * A policy only maps events to a per-slot score. The victim of a full bucket is always the slot
 * with the smallest score, and of two full candidate buckets the one whose smallest score is
 * smaller (the first bucket on a tie). Ticks are unique per operation, so under serial execution
 * there are no ties and each policy is exact:
 * - lru:  score = tick of the last insert, update or hit.
 * - fifo: score = tick of the insert; hits and updates leave it alone.
 * - lfu:  score = (use count << 48) | (tick of last use & 2^48-1). Smallest count loses, ties go
 *         to the least recently used. A new entry has count 1; a hit or update adds 1. The count
 *         saturates at 2^16-1 and ticks are taken modulo 2^48 (2.8e14 operations).
 *
 * Promotions run without the bucket lock, concurrently with each other (bucket_ops.hpp,
 * detail::promote): a policy whose on_hit is max(score, on_insert(tick)) sets promotes_by_max and
 * is promoted with one atomic max; any other promoting policy (lfu) with a compare-and-swap loop
 * that applies on_hit to the score it replaces, so no concurrent hit is lost.
 */
#pragma once

#include <ccht/core/config.hpp>
#include <ccht/core/types.hpp>

#include <cstdint>

namespace ccht {

/**
 * @brief The global capacity layer a policy carries on top of its in-bucket order.
 *
 * With a layer, the table holds at most `capacity` entries (which may be fewer than its slots),
 * and an insert of a new key that would exceed it first evicts a global victim elsewhere in the
 * table (see core/global.hpp).
 */
enum class global_layer {
  none,        ///< the slots are the capacity
  entry_lru,   ///< double LRU: the globally least recently used entry (approximated by sampling)
  bucket_lru,  ///< coarse-grained LRU: the tail of the least recently used bucket
  random,      ///< a uniformly random entry of a sampled non-empty bucket (Random-CHT)
};

/// Least recently used inside each bucket (the CCHT default).
struct lru {
  /// Global capacity layer.
  static constexpr global_layer global = global_layer::none;
  /// Name used by tools and test output.
  static constexpr char const* name = "lru";
  /// Whether a new key that finds both buckets full kicks a resident out (cuckoo displacement,
  /// core/kickout.hpp) instead of evicting (CCHT).
  static constexpr bool kick_out = false;
  /// Whether a hit changes the score (fifo: no, so finds write nothing).
  static constexpr bool promotes_on_hit = true;
  /// Whether on_hit(s, t) == max(s, on_insert(t)): promotion is then one atomic max.
  static constexpr bool promotes_by_max = true;
  /// Whether entries can be pinned (core/pin.hpp): scores are ticks below ccht::pin_one.
  static constexpr bool pinnable = true;
  /// Score of a freshly inserted entry.
  CCHT_HOST_DEVICE static constexpr score_type on_insert(tick_type t) noexcept { return t; }
  /// Score after a hit or an update of an entry whose score was @p s.
  CCHT_HOST_DEVICE static constexpr score_type on_hit(score_type s, tick_type t) noexcept {
    return t > s ? t : s;  // never move an entry back in time when ticks race
  }
};

/// First in, first out inside each bucket: hits do not promote.
struct fifo {
  /// Global capacity layer.
  static constexpr global_layer global = global_layer::none;
  /// Name used by tools and test output.
  static constexpr char const* name = "fifo";
  /// Whether a new key that finds both buckets full kicks a resident out (see lru).
  static constexpr bool kick_out = false;
  /// Whether a hit changes the score.
  static constexpr bool promotes_on_hit = false;
  /// Whether promotion is an atomic max (nothing to promote here).
  static constexpr bool promotes_by_max = false;
  /// Whether entries can be pinned (core/pin.hpp): scores are ticks below ccht::pin_one.
  static constexpr bool pinnable = true;
  /// Score of a freshly inserted entry.
  CCHT_HOST_DEVICE static constexpr score_type on_insert(tick_type t) noexcept { return t; }
  /// Score after a hit or an update: unchanged.
  CCHT_HOST_DEVICE static constexpr score_type on_hit(score_type s, tick_type) noexcept { return s; }
};

/// Least frequently used inside each bucket, ties to the least recently used.
struct lfu {
  /// Global capacity layer.
  static constexpr global_layer global = global_layer::none;
  /// Name used by tools and test output.
  static constexpr char const* name = "lfu";
  /// Whether a new key that finds both buckets full kicks a resident out (see lru).
  static constexpr bool kick_out = false;
  /// Whether a hit changes the score.
  static constexpr bool promotes_on_hit = true;
  /// Whether promotion is an atomic max: no, a count is incremented (a CAS loop).
  static constexpr bool promotes_by_max = false;
  /// Whether entries can be pinned: no, the use count occupies the pin bits.
  static constexpr bool pinnable = false;
  /// Bits of the score holding the tick of the last use.
  static constexpr int tick_bits = 48;
  /// Largest count kept; further uses leave it there.
  static constexpr score_type max_count = (score_type{1} << (64 - tick_bits)) - 1;
  /// Mask of the tick bits.
  static constexpr score_type tick_mask = (score_type{1} << tick_bits) - 1;

  /// Use count held in a score.
  CCHT_HOST_DEVICE static constexpr score_type count(score_type s) noexcept { return s >> tick_bits; }
  /// Score of a freshly inserted entry (count 1).
  CCHT_HOST_DEVICE static constexpr score_type on_insert(tick_type t) noexcept {
    return (score_type{1} << tick_bits) | (t & tick_mask);
  }
  /// Score after a hit or an update: count + 1 (saturating), last use = @p t.
  CCHT_HOST_DEVICE static constexpr score_type on_hit(score_type s, tick_type t) noexcept {
    score_type c = count(s);
    if (c < max_count) { ++c; }
    return (c << tick_bits) | (t & tick_mask);
  }
};

/**
 * @brief Double LRU (the paper's CCHT): in-bucket LRU plus a global LRU over all entries that
 *        picks the victim when the capacity is reached. A hit promotes in both, since both read
 *        the same per-slot tick.
 */
struct double_lru : lru {
  /// Name used by tools and test output.
  static constexpr char const* name = "double-lru";
  /// Global capacity layer.
  static constexpr global_layer global = global_layer::entry_lru;
};

/**
 * @brief Coarse-grained LRU: in-bucket LRU plus a bucket-level LRU; at capacity the tail of the
 *        least recently used bucket (the bucket whose newest tick is oldest) is evicted.
 */
struct coarse_lru : lru {
  /// Name used by tools and test output.
  static constexpr char const* name = "coarse-lru";
  /// Global capacity layer.
  static constexpr global_layer global = global_layer::bucket_lru;
};

/**
 * @brief LRU-CHT, the paper's first baseline: a plain cuckoo table (a new key that finds both
 *        buckets full kicks a resident to its other bucket, up to kick_threshold displacements;
 *        see core/kickout.hpp) plus a global LRU that picks the victim when the capacity is
 *        reached (the same entry_lru layer as double_lru, tail index included, so hit ratios
 *        compare). A kick that moves an entry lowers its new bucket's tail word.
 *        Scores are lru's. Readers may miss a key while a kick chain moves it.
 */
struct lru_cht : lru {
  /// Name used by tools and test output.
  static constexpr char const* name = "cht-lru";
  /// Global capacity layer.
  static constexpr global_layer global = global_layer::entry_lru;
  /// Kick-out insertion (core/kickout.hpp).
  static constexpr bool kick_out = true;
  /// No pins: a kick chain ends by evicting whichever entry is homeless.
  static constexpr bool pinnable = false;
};

/**
 * @brief Random-CHT, the paper's second baseline: kick-out cuckoo insertion as lru_cht, and a
 *        random victim (a uniformly random entry of a sampled non-empty bucket) when the capacity
 *        is reached. Scores are lru's (they decide nothing here).
 */
struct random_cht : lru {
  /// Name used by tools and test output.
  static constexpr char const* name = "cht-random";
  /// Global capacity layer.
  static constexpr global_layer global = global_layer::random;
  /// Kick-out insertion (core/kickout.hpp).
  static constexpr bool kick_out = true;
  /// No pins: a kick chain ends by evicting whichever entry is homeless.
  static constexpr bool pinnable = false;
};

}  // namespace ccht
