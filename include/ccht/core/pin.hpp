/**
 * @file pin.hpp
 * @brief Pins: a per-entry reference count that keeps an entry from being evicted, held in the
 *        high bits of its score word (the base of the page cache's "pinned page").
 *
 * Score layout of a pinnable policy (Policy::pinnable: lru, fifo, double_lru, coarse_lru):
 *   bits 0-51  the policy's score (a tick; ticks must stay below 2^52, 4.5e15 operations)
 *   bits 52-62 the pin count (at most max_pins)
 * So a pinned entry's score is at least pin_one and an unpinned one's is below it: every victim
 * choice, which already reads the scores to find the smallest, skips pinned entries for free: no
 * extra memory access per candidate, no separate pin array to consult. A promotion is an atomic
 * max with a tick (< pin_one), which leaves a pinned score alone; the entry's recency is set when
 * its last pin is released (a release is a use).
 *
 * Pins and unpins either take the lock of the key's bucket (core/bucket_ops.hpp: pin, unpin), so
 * that a writer choosing a victim under the same lock never races with them, or run lock-free
 * (pin_optimistic, unpin_optimistic: a compare-and-swap on the score from a seqlock-validated
 * snapshot). Lock-free pins are safe because, on a view with optimistic_pins set, every writer
 * that removes an unpinned entry first claims its score word with a compare-and-swap (claimed_score): a pin and
 * a removal of the same entry race on one word, and one of them fails and retries. Entries of a bucket whose entries are all pinned are never evicted: an insert whose two
 * buckets are full of pinned entries fails with op_status::no_space and changes nothing, and the
 * global layer (core/global.hpp) ranks such a bucket as if it held no entry. When every entry
 * the global layer looks at is pinned, an insert at capacity takes its free slot anyway (the
 * overshoot of core/global.hpp); a layer that must not exceed its capacity (the page cache)
 * refuses the slot through the insert hook of bucket_ops::insert_with. erase() removes an entry whatever its pins: the layer above
 * decides whether that is allowed.
 */
#pragma once

#include <ccht/core/config.hpp>
#include <ccht/core/types.hpp>

#include <cstdint>

namespace ccht {

/// Bit of the score word where the pin count starts.
inline constexpr int pin_shift = 52;
/// One pin, as added to a score word.
inline constexpr score_type pin_one = score_type{1} << pin_shift;
/// Most pins one entry can hold.
inline constexpr std::uint32_t max_pins = (1u << 11) - 1;
/// Mask of a pinnable policy's own score bits.
inline constexpr score_type pin_score_mask = pin_one - 1;

/**
 * @brief Score word of an entry a writer is about to remove (all bits set: it reads as pinned,
 *        so no other victim search takes it). A writer that removes or replaces an unpinned
 *        entry first swaps its observed score for this value (detail::claim_score); a lock-free
 *        pin (bucket_ops::pin_optimistic) swaps the same word, so exactly one of the two wins and
 *        a pinned entry is never removed.
 */
inline constexpr score_type claimed_score = ~score_type{0};

/// Pins held in score word @p s of a pinnable policy.
CCHT_HOST_DEVICE constexpr std::uint32_t pins_of(score_type s) noexcept {
  return static_cast<std::uint32_t>((s >> pin_shift) & max_pins);
}
/// Whether score word @p s of a pinnable policy is pinned.
CCHT_HOST_DEVICE constexpr bool is_pinned_score(score_type s) noexcept { return s >= pin_one; }

/// Outcome of a pin or an unpin of one key.
enum class pin_status : std::uint8_t {
  done = 0,        ///< the pin was taken or released
  absent = 1,      ///< the key is not in the table
  saturated = 2,   ///< pin: the entry already holds max_pins pins; nothing changed
  not_pinned = 3,  ///< unpin: the entry holds no pin; nothing changed
};

/**
 * @brief What a pin or an unpin of one entry did, in the detail the layers above need: whether
 *        it was the entry's first pin or its last release, which is when the entry stops or
 *        starts being a possible victim (the page cache counts pinned pages by it). Returned by
 *        bucket_ops::pin_optimistic and unpin_optimistic, and by the locked-slot helpers under
 *        bucket_ops::pin and unpin.
 */
enum class pin_outcome : std::uint8_t {
  pinned_first,   ///< pin: the entry held no pin and now holds one (it can no longer be evicted)
  pinned_again,   ///< pin: the entry was pinned already and holds one pin more
  released_last,  ///< unpin: the last pin was released (evictable again; the release is a use)
  released,       ///< unpin: one pin was released and others remain
  saturated,      ///< pin: the entry already holds max_pins pins; nothing changed
  not_pinned,     ///< unpin: the entry holds no pin; nothing changed
  absent,         ///< the key is in neither of its buckets; nothing changed
  refused,        ///< the caller's accept() returned false for the entry's value; nothing changed
};

/// Whether @p o took or released a pin (the entry's value was read and its pin count changed).
CCHT_HOST_DEVICE constexpr bool pin_changed(pin_outcome o) noexcept {
  return o == pin_outcome::pinned_first || o == pin_outcome::pinned_again ||
         o == pin_outcome::released_last || o == pin_outcome::released;
}

}  // namespace ccht
