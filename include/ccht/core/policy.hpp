/**
 * @file policy.hpp
 * @brief In-bucket replacement policies as types: lru (the CCHT default), fifo and lfu.
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
 */
#pragma once

#include <ccht/core/config.hpp>
#include <ccht/core/types.hpp>

#include <cstdint>

namespace ccht {

/// Least recently used inside each bucket (the CCHT default).
struct lru {
  /// Name used by tools and test output.
  static constexpr char const* name = "lru";
  /// Whether a hit changes the score (fifo: no, so finds write nothing).
  static constexpr bool promotes_on_hit = true;
  /// Score of a freshly inserted entry.
  CCHT_HOST_DEVICE static constexpr score_type on_insert(tick_type t) noexcept { return t; }
  /// Score after a hit or an update of an entry whose score was @p s.
  CCHT_HOST_DEVICE static constexpr score_type on_hit(score_type s, tick_type t) noexcept {
    return t > s ? t : s;  // never move an entry back in time when ticks race
  }
};

/// First in, first out inside each bucket: hits do not promote.
struct fifo {
  /// Name used by tools and test output.
  static constexpr char const* name = "fifo";
  /// Whether a hit changes the score.
  static constexpr bool promotes_on_hit = false;
  /// Score of a freshly inserted entry.
  CCHT_HOST_DEVICE static constexpr score_type on_insert(tick_type t) noexcept { return t; }
  /// Score after a hit or an update: unchanged.
  CCHT_HOST_DEVICE static constexpr score_type on_hit(score_type s, tick_type) noexcept { return s; }
};

/// Least frequently used inside each bucket, ties to the least recently used.
struct lfu {
  /// Name used by tools and test output.
  static constexpr char const* name = "lfu";
  /// Whether a hit changes the score.
  static constexpr bool promotes_on_hit = true;
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

}  // namespace ccht
