/**
 * @file bucket_ops.hpp
 * @brief The CCHT algorithm for one key: find, contains, insert_or_assign (evicting, never
 *        kicking out) and erase, written once for host and device and generic over a thread tile.
 *
 * Every operation touches only the key's two candidate buckets (the global capacity layer adds a
 * sampled victim's bucket; kick-out policies, the paper's CHT baselines, add a kick chain: see
 * core/kickout.hpp, whose readers-may-miss race the CCHT policies do not have).
 *
 * Concurrency protocol (per-bucket seqlock, after MemC3/libcuckoo):
 * - Writers (insert_or_assign, erase) lock both candidate buckets in index order by moving the
 *   bucket's version from even to odd with a CAS, check both buckets for the key while holding both
 *   locks (so a key is never stored twice), modify, and release with a store of version + 1.
 * - Readers (find, contains) take no lock: load the version (acquire), scan keys and load the value
 *   with relaxed atomics, fence (acquire), reload the version, and retry if it moved or was odd.
 *   Every lane of a tile validates its own loads, so a value is never torn or another key's.
 * - A hit promotes its slot after validation, without the lock and concurrently with other hits
 *   and with the locked update of an assign (detail::promote): LRU-family scores rise with one
 *   atomic max, an LFU score with a compare-and-swap loop that re-checks the key, so no
 *   concurrent hit is lost. Only an entry a kick-out insert is moving can miss a hit.
 * All shared words are accessed through cuda::atomic_ref, so the host build is data-race free in
 * the C++ memory model (and ThreadSanitizer can check it).
 */
#pragma once

#include <ccht/core/bucket.hpp>
#include <ccht/core/config.hpp>
#include <ccht/core/hash.hpp>
#include <ccht/core/pin.hpp>
#include <ccht/core/tile.hpp>
#include <ccht/core/types.hpp>

#include <ccht/core/accounting.hpp>
#include <ccht/core/atomics.hpp>
#include <ccht/core/global.hpp>
#include <ccht/core/policy.hpp>

#include <cstdint>

namespace ccht {
namespace detail {

/// Result of one pass over a locked bucket.
struct scan_result {
  int match = -1;  ///< slot holding the key, or -1
  int empty = -1;  ///< first free slot, or -1
  int free = 0;    ///< free slots seen (all of them when there is no match)
};

/// One pass over a bucket (caller holds its lock): where the key is, and the first free slot.
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE scan_result scan_locked(Tile const& tile, bucket<B> const& b,
                                                          key_type key) noexcept {
  constexpr int T = static_cast<int>(Tile::num_threads());
  static_assert(B % T == 0, "the tile size must divide the bucket size");
  scan_result r;
  for (int base = 0; base < B; base += T) {
    key_type const k = load_relaxed(b.keys[base + static_cast<int>(tile.thread_rank())]);
    unsigned const hit = tile.ballot(k == key);
    if (hit) {
      r.match = base + lowest_lane(hit);
      return r;
    }
    unsigned const free = tile.ballot(k == empty_key);
    if (free && r.empty < 0) { r.empty = base + lowest_lane(free); }
    r.free += popcount(free);
  }
  return r;
}

/// Slot holding @p key in a bucket, or -1 (unsynchronised scan; the caller validates).
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE int find_slot(Tile const& tile, bucket<B> const& b,
                                                key_type key) noexcept {
  constexpr int T = static_cast<int>(Tile::num_threads());
  for (int base = 0; base < B; base += T) {
    key_type const k = load_relaxed(b.keys[base + static_cast<int>(tile.thread_rank())]);
    unsigned const hit = tile.ballot(k == key);
    if (hit) { return base + lowest_lane(hit); }
  }
  return -1;
}

/// Slot with the smallest score in a full, locked bucket (lowest slot on ties), and its score.
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE int min_score_slot(Tile const& tile, bucket<B> const& b,
                                                     score_type& min_score) noexcept {
  constexpr int T = static_cast<int>(Tile::num_threads());
  int slot = static_cast<int>(tile.thread_rank());
  score_type s = load_relaxed(b.scores[slot]);
  for (int i = slot + T; i < B; i += T) {
    score_type const si = load_relaxed(b.scores[i]);
    if (si < s) { s = si; slot = i; }
  }
  for (unsigned off = T / 2; off > 0; off >>= 1) {
    score_type const os = tile.shfl_xor(s, off);
    int const oslot = tile.shfl_xor(slot, off);
    if (os < s || (os == s && oslot < slot)) { s = os; slot = oslot; }
  }
  min_score = s;
  return slot;
}

/// Optimistic read of one bucket. Returns the slot of @p key (value in @p value) or -1.
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE int read_bucket(Tile const& tile, bucket<B> const& b,
                                        std::uint32_t const& version, key_type key,
                                        value_type& value) noexcept {
  unsigned spins = 0;
  while (true) {
    std::uint32_t const v1 = load_acquire(version);
    // Proceed only when every lane saw the same even version, so the tile stays converged.
    // Every lane must reach the shfl: one inside `||` would be skipped by lanes that saw an odd
    // version, and a *_sync collective that some of its lanes skip is undefined behaviour.
    std::uint32_t const v0 = tile.shfl(v1, 0);
    if (tile.ballot((v1 & 1u) != 0 || v1 != v0) != 0) {
      spin_wait(spins);
      continue;
    }
    int const slot = find_slot(tile, b, key);
    value_type v = 0;
    if (slot >= 0) { v = load_relaxed(b.values[slot]); }
    fence_acquire();
    std::uint32_t const v2 = load_relaxed(version);
    if (tile.ballot(v2 != v1) == 0) {
      value = v;
      return slot;
    }
  }
}

/**
 * @brief Applies a hit at @p tick to the score of @p key in slot @p slot of bucket @p b, without
 *        the bucket lock (called by one thread).
 *
 * Promotions race with each other: a plain load/modify/store would lose all but one of them (an
 * LFU count would undercount). A by-max policy rises with one atomic max, which is order-free. LFU
 * applies on_hit in a compare-and-swap loop; each try validates with the seqlock that the slot
 * still holds @p key, so a count is never added to the entry that replaced it.
 */
template <class Policy, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void promote(bucket<B>& b, std::uint32_t const& version,
                                               int slot, key_type key, tick_type tick) noexcept {
  score_type& s = b.scores[slot];
  if constexpr (Policy::promotes_by_max) {
    if (load_relaxed(b.keys[slot]) == key) { fetch_max_relaxed(s, Policy::on_insert(tick)); }
  } else {
    unsigned spins = 0;
    while (true) {
      std::uint32_t const v1 = load_acquire(version);
      if ((v1 & 1u) != 0) {  // a writer is in the bucket: it may be moving or replacing the key
        spin_wait(spins);
        continue;
      }
      score_type old = load_relaxed(s);
      key_type const k = load_relaxed(b.keys[slot]);
      fence_acquire();
      if (load_relaxed(version) != v1) { continue; }
      if (k != key) { return; }  // replaced or erased since the read: nothing to promote
      score_type const now = Policy::on_hit(old, tick);
      // A failed swap means another hit (or a writer) changed the score: re-read and re-apply.
      if (now == old || cas_relaxed(s, old, now)) { return; }
    }
  }
}

/// Applies a hit at @p tick to @p s while holding the bucket lock. Unlocked promotions of the
/// same slot may run meanwhile, so this is an atomic read-modify-write too.
template <class Policy>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void promote_locked(score_type& s, tick_type tick) noexcept {
  if constexpr (Policy::promotes_by_max) {
    fetch_max_relaxed(s, Policy::on_insert(tick));
  } else if constexpr (Policy::promotes_on_hit) {
    score_type old = load_relaxed(s);
    while (!cas_relaxed(s, old, Policy::on_hit(old, tick))) {}
  }
}

/// Kick-out insertion for Policy::kick_out (defined in core/kickout.hpp, included below).
template <class Policy, class Tile, int B>
CCHT_HOST_DEVICE op_status kickout_insert_or_assign(Tile const& tile,
                                                    bucket_array_view<B> const& v, key_type key,
                                                    value_type value, tick_type tick,
                                                    key_type& evicted_key,
                                                    value_type& evicted_value,
                                                    access_counts* acc) noexcept;


/**
 * @brief Where a bulk loop's prefetch stage already saw a key: its candidate buckets and the
 *        slot of its first bucket that held it (-1: not there). Only a hint: the operation checks
 *        that slot inside its own validated read, and scans as usual when the hint is wrong.
 */
struct slot_hint {
  candidate_buckets cb;  ///< the key's candidates (saves the hash)
  int first_slot = -1;   ///< slot in cb.first that held the key when peeked, or -1
};

/// Slot of @p key in @p b: @p hint_slot when that slot holds it (one compare instead of a scan
/// on one-thread tiles), else find_slot().
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE int find_slot_hinted(Tile const& tile, bucket<B> const& b,
                                                       key_type key, int hint_slot) noexcept {
  if constexpr (Tile::num_threads() == 1) {
    if (hint_slot >= 0 && load_relaxed(b.keys[hint_slot]) == key) { return hint_slot; }
  }
  return find_slot(tile, b, key);
}

/**
 * @brief Insert hook of plain upserts (bucket_ops::insert_or_assign): an existing key is
 *        assigned, a new entry stores the caller's value and an unpinned score.
 *
 * Layers above the table (the page cache) pass their own hook to bucket_ops::insert_with to
 * make the value of a new entry from what it evicts, or to refuse a free slot, inside the two
 * bucket locks. A hook's members are called by lane 0 only.
 */
struct upsert_hook {
  /// Whether an existing key is updated (true) or left alone and reported as assigned (false).
  static constexpr bool assigns_existing = true;
  /// Added to a new entry's score (pin_one: the entry starts with one pin).
  static constexpr score_type initial_pins = 0;
  /// With a global layer: an insert that went in above the capacity (every victim's bucket was
  /// busy) evicts a victim after releasing its own locks (detail::repay_overshoot) and reports
  /// it. Hooks that tie a new entry's value to its victim (the page cache) leave this out.
  static constexpr bool repays_overshoot = true;
  // Optional (absent here): `static constexpr bool supplies_victims = true;` with
  // `bool next_victim(detail::victim_candidate&)` and `bool next_in_bucket(std::uint32_t)`:
  // victims chosen for a whole batch, tried before the global search (detail::evict_supplied;
  // the CPU backend's bulk victim select).
  /// Called before a new entry takes a free slot without evicting anything; false refuses it
  /// (the insert then changes nothing and returns op_status::no_space).
  CCHT_HOST_DEVICE bool reserve() noexcept { return true; }
  /// Value stored in a new entry, given whether it evicted an entry and that entry's value.
  CCHT_HOST_DEVICE value_type value_for(value_type value, bool /*evicted*/,
                                        value_type /*victim_value*/) noexcept {
    return value;
  }
};

/**
 * A key's two candidate buckets locked by lane 0, in index order (the lower first, so that two
 * writers never wait on each other in a cycle), and the odd versions it holds.
 */
struct locked_pair {
  std::uint32_t lo;
  std::uint32_t hi;
  std::uint32_t vlo = 0;
  std::uint32_t vhi = 0;

  /// Releases both buckets: their versions become even again. Lane 0 only.
  template <int B>
  CCHT_HOST_DEVICE CCHT_FORCEINLINE void release(bucket_array_view<B> const& v) const noexcept {
    store_release(v.versions[hi], vhi + 1);
    store_release(v.versions[lo], vlo + 1);
  }
};

/// Locks @p cb's two buckets (lane 0) and makes the tile see what their last writers stored.
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE locked_pair lock_pair(Tile const& tile,
                                                        bucket_array_view<B> const& v,
                                                        candidate_buckets const& cb) noexcept {
  locked_pair p{cb.first < cb.second ? cb.first : cb.second,
                cb.first < cb.second ? cb.second : cb.first};
  if (tile.thread_rank() == 0) {
    p.vlo = lock_bucket(v.versions[p.lo]);
    p.vhi = lock_bucket(v.versions[p.hi]);
    fence_release();  // slot stores after this must not be seen before the odd versions
  }
  tile.sync();
  fence_acquire();
  return p;
}

/// Releases a pair lock_pair took (every lane calls; lane 0 stores).
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void unlock_pair(Tile const& tile, bucket_array_view<B> const& v,
                                                   locked_pair const& p) noexcept {
  if (tile.thread_rank() == 0) { p.release(v); }
}

/**
 * @brief The steps of bucket_ops::insert_with, in the order it takes them: locate the key or a
 *        free slot in the two locked buckets, else take the older of their two oldest entries;
 *        for a new entry at the capacity, make room globally (global.hpp); reserve the free
 *        slot; write and unlock; repay an overshoot and report the eviction. Each is called
 *        once per insert and forced inline, so the insert compiles as one function.
 */
template <class Policy, int B>
struct insert_steps {
  using view_type = bucket_array_view<B>;

  /// The key's two candidate buckets, in candidate order.
  struct pair_buckets {
    bucket<B>& first;
    bucket<B>& second;
    candidate_buckets cb;

    CCHT_HOST_DEVICE std::uint32_t index_of(bucket<B> const* b) const noexcept {
      return b == &first ? cb.first : cb.second;
    }
  };

  /// Where the entry goes and what the insert does there.
  struct placement {
    bucket<B>* target = nullptr;
    int slot = -1;
    op_status status = op_status::inserted_evicted;  // until a slot is found
    bool target_empty = false;                       // a new entry goes into an empty bucket
  };

  /// What making room globally left to do.
  struct room {
    bool note_tail = false;    // the new entry may be its bucket's oldest: lower the tail word
    bool owes_victim = false;  // went in above the capacity: evict once the locks are released
  };

  /// The key's slot, else a free slot (status inserted), else status inserted_evicted and no
  /// target yet.
  template <class Tile>
  CCHT_HOST_DEVICE CCHT_FORCEINLINE static placement
  locate(Tile const& tile, pair_buckets const& p, key_type key, access_counts* acc) noexcept {
    count_probe<B>(acc);
    scan_result const r1 = scan_locked(tile, p.first, key);
    if (r1.match >= 0) { return {&p.first, r1.match, op_status::assigned, false}; }
    count_probe<B>(acc);
    scan_result const r2 = scan_locked(tile, p.second, key);
    if (r2.match >= 0) { return {&p.second, r2.match, op_status::assigned, false}; }
    // Plain CCHT fills the first bucket first, so most finds end there. With a global capacity
    // layer the free slots are headroom, and balancing them keeps the buckets from filling (and
    // evicting in-bucket) while the table still has room.
    if (r1.empty >= 0 && (Policy::global == global_layer::none || r1.free >= r2.free)) {
      return {&p.first, r1.empty, op_status::inserted, r1.free == B};
    }
    if (r2.empty >= 0) { return {&p.second, r2.empty, op_status::inserted, r2.free == B}; }
    return {};  // both full: inserted_evicted, the victim still to choose
  }

  /// Both buckets full: the older of their oldest entries becomes the victim. False when every
  /// entry of both is pinned (nothing may go).
  template <class Tile>
  CCHT_HOST_DEVICE CCHT_FORCEINLINE static bool
  take_bucket_victim(Tile const& tile, view_type const& v, pair_buckets const& p, placement& at,
                     access_counts* acc) noexcept {
    count_scores<B>(acc);
    count_scores<B>(acc);
    count_value_read(acc);  // the victim's value, to report it
    while (true) {
      score_type m1, m2;
      int const s1 = min_score_slot(tile, p.first, m1);
      int const s2 = min_score_slot(tile, p.second, m2);
      if constexpr (Policy::pinnable) {
        // Pinned scores are at least pin_one, so the smaller minimum is unpinned if any is.
        if (is_pinned_score(m1) && is_pinned_score(m2)) { return false; }
      }
      bool const second_older = m2 < m1;
      at.target = second_older ? &p.second : &p.first;
      at.slot = second_older ? s2 : s1;
      // Pinnable policies claim the victim first: a lock-free pin may take it meanwhile
      // (core/pin.hpp), and then the victim is chosen again.
      if constexpr (Policy::pinnable) {
        if (v.optimistic_pins && !claim_score(tile, at.target->scores[at.slot])) { continue; }
      }
      return true;
    }
  }

  /// A hook that leaves existing keys alone: report the present value, change nothing, unlock.
  template <class Tile>
  CCHT_HOST_DEVICE CCHT_FORCEINLINE static op_status
  report_existing(Tile const& tile, view_type const& v, locked_pair const& pair,
                  placement const& at, value_type& value) noexcept {
    value_type current = 0;
    if (tile.thread_rank() == 0) { current = load_relaxed(at.target->values[at.slot]); }
    unlock_pair(tile, v, pair);
    value = tile.shfl(current, 0);
    return op_status::assigned;
  }

  /// Own-first (global.hpp): at the capacity, the older own bucket's oldest entry goes if it is
  /// old enough; then the new entry takes its slot. False to search globally instead.
  template <class Tile>
  CCHT_HOST_DEVICE CCHT_FORCEINLINE static bool
  evict_own(Tile const& tile, view_type const& v, pair_buckets const& p, placement& at,
            tick_type tick, access_counts* acc) noexcept {
    int own_slot = -1;
    int const own = own_victim(tile, v, tick, p.first, p.second, own_slot, acc);
    if (own < 0) { return false; }
    bucket<B>& ob = own == 0 ? p.first : p.second;
    if (v.optimistic_pins && !claim_score(tile, ob.scores[own_slot])) {
      return false;  // a lock-free pin won it: search globally instead
    }
    // The victim was its bucket's oldest, so the bucket's tail word stays a lower bound.
    count_value_read(acc);  // the victim's value, to report it
    at.target = &ob;
    at.slot = own_slot;
    at.status = op_status::inserted_evicted;
    return true;
  }

  /// A new entry with a global capacity layer: take its place in the live count and, at the
  /// capacity, evict a victim (own-first, one chosen for the batch, or the global search).
  template <class Tile, class Hook>
  CCHT_HOST_DEVICE CCHT_FORCEINLINE static room
  make_room(Tile const& tile, view_type const& v, locked_pair const& pair, pair_buckets const& p,
            placement& at, tick_type tick, Hook& hook, key_type& evicted_key,
            value_type& evicted_value, access_counts* acc) noexcept {
    room r;
    r.note_tail = v.tails != nullptr && at.target_empty;
    std::uint64_t before = 0;
    bool swapped = false;  // at the capacity: the count stays, a victim goes for the entry
    if (tile.thread_rank() == 0) { before = reserve_live(v.live, v.capacity, swapped); }
    before = tile.shfl(before, 0);
    bool own = false;
    if constexpr (Policy::global == global_layer::entry_lru) {
      if (before >= v.capacity && v.victim_age != nullptr) {
        own = evict_own(tile, v, p, at, tick, acc);
      }
    }
    if (own) {
      r.note_tail = false;  // the new entry took the old oldest's slot in place
    } else if (before >= v.capacity) {
      std::uint32_t victim_bucket = ~std::uint32_t{0};
      bool supplied = false;  // a victim chosen for the whole batch (bulk victim select)
      if constexpr (supplies_victims_v<Hook>) {
        supplied = evict_supplied(tile, v, hook, tick, pair.lo, pair.hi, evicted_key,
                                  evicted_value, victim_bucket, acc);
      }
      if (supplied || evict_global<Policy::global>(tile, v, tick, pair.lo, pair.hi, evicted_key,
                                                   evicted_value, victim_bucket, acc)) {
        at.status = op_status::inserted_evicted;
        r.note_tail = r.note_tail || (v.tails != nullptr && victim_bucket == p.index_of(at.target));
      } else {
        r.owes_victim = true;  // repaid once the two locks are released
      }
    }
    if (tile.thread_rank() == 0) {
      settle_live(v.live, swapped, at.status == op_status::inserted_evicted);
    }
    return r;
  }

  /// A free slot and no victim: whether the hook lets the entry take it (a refusal gives the
  /// live count back).
  template <class Tile, class Hook>
  CCHT_HOST_DEVICE CCHT_FORCEINLINE static bool
  reserve_free_slot(Tile const& tile, view_type const& v, Hook& hook) noexcept {
    int ok = 1;
    if (tile.thread_rank() == 0) { ok = hook.reserve() ? 1 : 0; }
    if (tile.shfl(ok, 0) != 0) { return true; }
    if constexpr (Policy::global != global_layer::none) {
      if (tile.thread_rank() == 0) { add_live(v.live, -1); }
    }
    return false;
  }

  /// Lane 0 writes the entry (an assignment promotes; a new entry reports what its slot held)
  /// and releases both buckets.
  template <class Tile, class Hook>
  CCHT_HOST_DEVICE CCHT_FORCEINLINE static void
  write_and_unlock(Tile const& tile, view_type const& v, locked_pair const& pair,
                   pair_buckets const& p, placement const& at, key_type key, value_type& value,
                   tick_type tick, Hook& hook, bool note_tail, key_type& evicted_key,
                   value_type& evicted_value, access_counts* acc) noexcept {
    count_slot_write(acc);
    if (tile.thread_rank() != 0) { return; }
    bucket<B>& b = *at.target;
    if (at.status == op_status::assigned) {
      store_relaxed(b.values[at.slot], value);
      promote_locked<Policy>(b.scores[at.slot], tick);
    } else {
      bool const evicts = at.status == op_status::inserted_evicted;
      if (evicts && load_relaxed(b.keys[at.slot]) != empty_key) {
        evicted_key = load_relaxed(b.keys[at.slot]);
        evicted_value = load_relaxed(b.values[at.slot]);
      }
      value = hook.value_for(value, evicts, evicted_value);
      store_relaxed(b.values[at.slot], value);
      store_relaxed(b.scores[at.slot], Policy::on_insert(tick) + Hook::initial_pins);
      store_relaxed(b.keys[at.slot], key);
      if (note_tail) { lower_tail(v, p.index_of(at.target), Policy::on_insert(tick), acc); }
    }
    pair.release(v);
  }

  /// After the unlock: an insert above the capacity evicts its debt (when the hook allows),
  /// and the evicted pair and the stored value reach every lane.
  template <class Hook, class Tile>
  CCHT_HOST_DEVICE CCHT_FORCEINLINE static op_status
  repay_and_report(Tile const& tile, view_type const& v, op_status status, bool owes_victim,
                   key_type key, tick_type tick, value_type& value, key_type& evicted_key,
                   value_type& evicted_value, access_counts* acc) noexcept {
    if constexpr (Policy::global != global_layer::none && repays_overshoot_v<Hook>) {
      if (owes_victim && status == op_status::inserted &&
          repay_overshoot<Policy::global>(tile, v, tick, key, evicted_key, evicted_value, acc)) {
        status = op_status::inserted_evicted;
      }
    }
    if (status == op_status::inserted_evicted) {
      evicted_key = tile.shfl(evicted_key, 0);
      evicted_value = tile.shfl(evicted_value, 0);
    }
    if constexpr (!Hook::assigns_existing) { value = tile.shfl(value, 0); }
    return status;
  }
};

}  // namespace detail

/**
 * @brief The per-key CCHT operations over a bucket array, for in-bucket policy @p Policy.
 *
 * All functions must be called by every thread of @p tile with the same arguments; results are
 * returned to every thread. They never allocate and never touch more than the key's two
 * candidate buckets. @p tick orders operations: use a larger tick for a later operation.
 */
template <class Policy, int BucketSize>
struct bucket_ops {
  /// View type operated on.
  using view_type = bucket_array_view<BucketSize>;

  /**
   * @brief Looks @p key up; on a hit writes its value to @p value and promotes it.
   * @param acc if not null, the buckets and bytes touched are added to it
   * @return true on a hit
   */
  template <class Tile>
  CCHT_HOST_DEVICE static bool find(Tile const& tile, view_type const& v, key_type key,
                                    tick_type tick, value_type& value,
                                    access_counts* acc = nullptr) noexcept {
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    std::uint32_t bi = cb.first;
    detail::count_probe<BucketSize>(acc);
    int slot = detail::read_bucket(tile, v.buckets[bi], v.versions[bi], key, value);
    if (slot < 0) {
      bi = cb.second;
      detail::count_probe<BucketSize>(acc);
      slot = detail::read_bucket(tile, v.buckets[bi], v.versions[bi], key, value);
      if (slot < 0) { return false; }
    }
    detail::count_value_read(acc);
    if constexpr (Policy::promotes_on_hit) {
      detail::count_promote(acc);
      if (tile.thread_rank() == 0) {
        detail::promote<Policy>(v.buckets[bi], v.versions[bi], slot, key, tick);
      }
    }
    return true;
  }

  /// Whether @p key is present. Does not promote.
  template <class Tile>
  CCHT_HOST_DEVICE static bool contains(Tile const& tile, view_type const& v, key_type key,
                                        access_counts* acc = nullptr) noexcept {
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    value_type ignored;
    detail::count_probe<BucketSize>(acc);
    if (detail::read_bucket(tile, v.buckets[cb.first], v.versions[cb.first], key, ignored) >= 0) {
      return true;
    }
    detail::count_probe<BucketSize>(acc);
    return detail::read_bucket(tile, v.buckets[cb.second], v.versions[cb.second], key, ignored) >=
           0;
  }

  /**
   * @brief Inserts @p key or assigns @p value to it.
   *
   * An existing key is updated and promoted. Otherwise a free slot is taken, in the first
   * candidate bucket if it has one, else in the second. Otherwise the tail (smallest score) of
   * whichever bucket has the older tail (the first on a tie) is evicted, written to
   * @p evicted_key / @p evicted_value, and replaced.
   *
   * With a global capacity layer (Policy::global), taking a free slot when the table already
   * holds `capacity` entries first evicts the global layer's victim (see core/global.hpp); that
   * victim is the one reported. Either way an insert evicts at most one entry.
   *
   * Kick-out policies (Policy::kick_out: lru_cht, random_cht) displace residents to their other
   * bucket instead of evicting from the two candidates; see core/kickout.hpp.
   */
  template <class Tile>
  CCHT_HOST_DEVICE static op_status insert_or_assign(Tile const& tile, view_type const& v,
                                                     key_type key, value_type value,
                                                     tick_type tick, key_type& evicted_key,
                                                     value_type& evicted_value,
                                                     access_counts* acc = nullptr) noexcept {
    if constexpr (Policy::kick_out) {  // LRU-CHT / Random-CHT baselines: core/kickout.hpp
      return detail::kickout_insert_or_assign<Policy>(tile, v, key, value, tick, evicted_key,
                                                      evicted_value, acc);
    } else {
      detail::upsert_hook hook;
      return insert_with(tile, v, key, value, tick, evicted_key, evicted_value, hook, acc);
    }
  }

  /**
   * @brief insert_or_assign() with a hook (see detail::upsert_hook) deciding, under the two
   *        bucket locks, what an existing key gets, what a new entry stores, and whether it may
   *        take a free slot. Not for kick-out policies.
   *
   * With a hook whose assigns_existing is false, an existing key is left unchanged: the result
   * is op_status::assigned and its value goes to @p value. A refused reserve() returns
   * op_status::no_space and changes nothing.
   */
  template <class Tile, class Hook>
  CCHT_HOST_DEVICE static op_status insert_with(Tile const& tile, view_type const& v,
                                                key_type key, value_type& value, tick_type tick,
                                                key_type& evicted_key, value_type& evicted_value,
                                                Hook& hook, access_counts* acc = nullptr) noexcept {
    static_assert(!Policy::kick_out, "kick-out policies insert through core/kickout.hpp");
    static_assert(Hook::initial_pins == 0 || Policy::pinnable, "this policy has no pins");
    using steps = detail::insert_steps<Policy, BucketSize>;
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    detail::locked_pair const pair = detail::lock_pair(tile, v, cb);
    typename steps::pair_buckets const buckets{v.buckets[cb.first], v.buckets[cb.second], cb};
    typename steps::placement at = steps::locate(tile, buckets, key, acc);
    if (at.status == op_status::inserted_evicted &&
        !steps::take_bucket_victim(tile, v, buckets, at, acc)) {
      detail::unlock_pair(tile, v, pair);  // both candidates full of pinned entries
      return op_status::no_space;
    }
    if constexpr (!Hook::assigns_existing) {
      if (at.status == op_status::assigned) {
        return steps::report_existing(tile, v, pair, at, value);
      }
    }
    typename steps::room room{};
    if constexpr (Policy::global != global_layer::none) {
      if (at.status == op_status::inserted) {
        room = steps::make_room(tile, v, pair, buckets, at, tick, hook, evicted_key, evicted_value,
                                acc);
      }
    }
    if (at.status == op_status::inserted && !steps::reserve_free_slot(tile, v, hook)) {
      detail::unlock_pair(tile, v, pair);
      return op_status::no_space;
    }
    steps::write_and_unlock(tile, v, pair, buckets, at, key, value, tick, hook, room.note_tail,
                            evicted_key, evicted_value, acc);
    return steps::template repay_and_report<Hook>(tile, v, at.status, room.owes_victim, key, tick,
                                                  value, evicted_key, evicted_value, acc);
  }

  /// Removes @p key if present. @return true when it was removed
  template <class Tile>
  CCHT_HOST_DEVICE static bool erase(Tile const& tile, view_type const& v, key_type key,
                                     access_counts* acc = nullptr) noexcept {
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    detail::locked_pair const pair = detail::lock_pair(tile, v, cb);
    bucket<BucketSize>* target = &v.buckets[cb.first];
    detail::count_probe<BucketSize>(acc);
    int slot = detail::find_slot(tile, *target, key);
    if (slot < 0) {
      target = &v.buckets[cb.second];
      detail::count_probe<BucketSize>(acc);
      slot = detail::find_slot(tile, *target, key);
    }
    if (slot >= 0) { detail::count_slot_write(acc); }
    if (tile.thread_rank() == 0) {
      if (slot >= 0) {
        detail::store_relaxed(target->keys[slot], empty_key);
        if (v.live != nullptr) { detail::add_live(v.live, -1); }  // any policy may erase
      }
      pair.release(v);
    }
    return slot >= 0;
  }

  /**
   * @brief Adds a pin to @p key's entry (core/pin.hpp): until as many unpin() calls, no insert
   *        or global eviction chooses it as a victim. Writes its value to @p value.
   *
   * Finds the key without a lock, then locks only the bucket that holds it and checks again, so
   * it never waits while holding a lock (no deadlock with the two-bucket writers). Promotions do
   * not change a pinned score; the entry's recency is set by its last unpin().
   * @return pin_status::done, absent, or saturated (max_pins held; nothing changed)
   */
  template <class Tile>
  CCHT_HOST_DEVICE static pin_status pin(Tile const& tile, view_type const& v, key_type key,
                                         value_type& value, access_counts* acc = nullptr) noexcept {
    static_assert(Policy::pinnable, "this policy's scores have no room for pins");
    pin_status st = pin_status::absent;
    with_key_locked(tile, v, key, acc, [&](bucket<BucketSize>& b, std::uint32_t, int slot) {
      st = pin_locked_slot(b, slot) == pin_outcome::saturated ? pin_status::saturated
                                                               : pin_status::done;
      value = detail::load_relaxed(b.values[slot]);
    });
    value = tile.shfl(value, 0);
    return static_cast<pin_status>(tile.shfl(static_cast<int>(st), 0));
  }

  /**
   * @brief Releases one pin of @p key's entry. The last one counts as a use at @p tick (its score
   *        becomes on_hit(score, tick)), and lowers the bucket's tail-index word if needed, as
   *        the entry can be a victim again.
   * @return pin_status::done, absent, or not_pinned (nothing changed)
   */
  template <class Tile>
  CCHT_HOST_DEVICE static pin_status unpin(Tile const& tile, view_type const& v, key_type key,
                                           tick_type tick, access_counts* acc = nullptr) noexcept {
    static_assert(Policy::pinnable, "this policy's scores have no room for pins");
    pin_status st = pin_status::absent;
    with_key_locked(tile, v, key, acc, [&](bucket<BucketSize>& b, std::uint32_t bi, int slot) {
      st = unpin_locked_slot(v, b, bi, slot, tick, acc) == pin_outcome::not_pinned
               ? pin_status::not_pinned
               : pin_status::done;
    });
    return static_cast<pin_status>(tile.shfl(static_cast<int>(st), 0));
  }

  /**
   * @brief Runs @p f(bucket, bucket index, slot) on lane 0 while holding the lock of the bucket
   *        that holds @p key, if it is present (found without a lock, then checked again under
   *        it). Only that bucket is locked, and nothing is waited for while it is held.
   *
   * For layers above the table (the page cache) that need a read-check-modify of one entry:
   * @p f may change the slot's value and score with atomic stores (unlocked promotions may race
   * on the score), and may remove the entry with erase_locked_slot().
   * @return whether the key was found (on every lane)
   */
  template <class Tile, class F>
  CCHT_HOST_DEVICE static bool update_locked(Tile const& tile, view_type const& v, key_type key,
                                             F&& f, access_counts* acc = nullptr) noexcept {
    int found = 0;
    with_key_locked(tile, v, key, acc, [&](bucket<BucketSize>& b, std::uint32_t bi, int slot) {
      found = 1;
      f(b, bi, slot);
    });
    return tile.shfl(found, 0) != 0;
  }

  /**
   * @brief update_locked() for keys that are expected to be present: locks the first candidate
   *        bucket at once and scans it, then the second, with no optimistic read first. Saves a
   *        validated read per hit; costs two lock round trips for an absent key (use it where a
   *        miss is followed by a write anyway, as in the page cache's acquire).
   * @return whether the key was found (on every lane)
   */
  template <class Tile, class F>
  CCHT_HOST_DEVICE static bool update_locked_direct(Tile const& tile, view_type const& v,
                                                    key_type key, F&& f,
                                                    access_counts* acc = nullptr) noexcept {
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    for (int which = 0; which < 2; ++which) {
      std::uint32_t const bi = which == 0 ? cb.first : cb.second;
      std::uint32_t held = 0;
      if (tile.thread_rank() == 0) {
        held = detail::lock_bucket(v.versions[bi]);
        detail::fence_release();
      }
      tile.sync();
      detail::fence_acquire();
      detail::count_probe<BucketSize>(acc);
      int const slot = detail::find_slot(tile, v.buckets[bi], key);
      if (slot >= 0) {
        detail::count_slot_write(acc);
        if (tile.thread_rank() == 0) { f(v.buckets[bi], bi, slot); }
      }
      if (tile.thread_rank() == 0) { detail::store_release(v.versions[bi], held + 1); }
      if (slot >= 0) { return true; }
    }
    return false;
  }

  /// Removes the entry in @p slot of bucket @p b, whose lock the caller holds (update_locked).
  CCHT_HOST_DEVICE static void erase_locked_slot(view_type const& v, bucket<BucketSize>& b,
                                                 int slot) noexcept {
    detail::store_relaxed(b.keys[slot], empty_key);
    // Removing an entry only raises its bucket's oldest score: its tail word stays a bound.
    if (v.live != nullptr) { detail::add_live(v.live, -1); }
  }

  /**
   * @brief Releases one pin of the entry in @p slot (caller holds the bucket's lock), as unpin()
   *        does. @return released_last, released, or not_pinned when it held none (nothing
   *        changed)
   */
  CCHT_HOST_DEVICE static pin_outcome unpin_locked_slot(view_type const& v, bucket<BucketSize>& b,
                                                        std::uint32_t bi, int slot, tick_type tick,
                                                        access_counts* acc = nullptr) noexcept {
    score_type& s = b.scores[slot];
    if (pins_of(detail::load_relaxed(s)) == 0) { return pin_outcome::not_pinned; }
    score_type const left =
        detail::atomic_ref_t<score_type>(s).fetch_sub(pin_one, cuda::std::memory_order_relaxed) -
        pin_one;
    if (is_pinned_score(left)) { return pin_outcome::released; }
    detail::promote_locked<Policy>(s, tick);
    // The bucket's oldest evictable score may just have dropped: keep its word a lower bound.
    if (v.tails != nullptr) {
      detail::lower_tail(v, bi, detail::load_relaxed(s) & pin_score_mask, acc);
    }
    return pin_outcome::released_last;
  }

  /**
   * @brief Adds one pin to the entry in @p slot (caller holds the bucket's lock), as pin() does.
   * @return pinned_first, pinned_again, or saturated when it already holds max_pins (nothing
   *         changed)
   */
  CCHT_HOST_DEVICE static pin_outcome pin_locked_slot(bucket<BucketSize>& b, int slot) noexcept {
    score_type& s = b.scores[slot];
    std::uint32_t const held = pins_of(detail::load_relaxed(s));
    if (held >= max_pins) { return pin_outcome::saturated; }
    // An atomic add: unlocked promotions (an atomic max) may hit the same word meanwhile.
    detail::atomic_ref_t<score_type>(s).fetch_add(pin_one, cuda::std::memory_order_relaxed);
    return held == 0 ? pin_outcome::pinned_first : pin_outcome::pinned_again;
  }

  /**
   * @brief Adds a pin to @p key without taking a lock: a compare-and-swap on its score from a
   *        snapshot of (key, value, score) validated by the bucket's seqlock.
   *
   * Safe because a writer claims an unpinned entry's score word (claim_score) before removing
   * or replacing it: if the claim comes first, the swap fails and the snapshot is taken again
   * (the key is then gone); if the pin comes first, the claim fails and the writer chooses
   * another victim. A pinned entry's score only changes by pins and unpins, and a replaced
   * entry's score holds a later tick, so a swap that succeeds pinned the key of the snapshot.
   * The validated snapshot (an acquire of the version) orders the caller's later reads of what
   * the entry guards after the writes that preceded its last locked update (a publish).
   * @param accept called on lane 0 with the entry's value; false refuses (nothing changes)
   * @return pinned_first or pinned_again (a pin was added), saturated (max_pins held already),
   *         absent or refused, on every lane; the entry's value in @p value (when present)
   */
  template <class Tile, class Accept>
  CCHT_HOST_DEVICE static pin_outcome pin_optimistic(
      Tile const& tile, view_type const& v, key_type key, value_type& value, Accept&& accept,
      access_counts* acc = nullptr, detail::slot_hint const* hint = nullptr) noexcept {
    static_assert(Policy::pinnable, "this policy's scores have no room for pins");
    if (!v.optimistic_pins) {  // writers do not claim victims here: pin under the lock
      pin_outcome held = pin_outcome::absent;
      with_key_locked(tile, v, key, acc, [&](bucket<BucketSize>& b, std::uint32_t, int slot) {
        value = detail::load_relaxed(b.values[slot]);
        held = !accept(value) ? pin_outcome::refused : pin_locked_slot(b, slot);
      });
      value = tile.shfl(value, 0);
      return shfl_outcome(tile, held);
    }
    return snapshot_swap(tile, v, key, value, acc, hint,
                         [&](bucket<BucketSize>& b, std::uint32_t, int slot, value_type val,
                             score_type old, pin_outcome& result) {
                           if (!accept(val)) {
                             result = pin_outcome::refused;
                           } else if (pins_of(old) >= max_pins) {
                             result = pin_outcome::saturated;
                           } else if (detail::cas_relaxed(b.scores[slot], old, old + pin_one)) {
                             result = pins_of(old) == 0 ? pin_outcome::pinned_first
                                                        : pin_outcome::pinned_again;
                             detail::count_slot_write(acc);
                           } else {
                             return false;  // a claim, a pin or a promotion moved the word
                           }
                           return true;
                         });
  }

  /**
   * @brief Releases one pin of @p key without taking a lock: a compare-and-swap on its score,
   *        from a snapshot of (key, value, score) validated by the bucket's seqlock.
   *
   * Why no lock is needed: lowering a pin count cannot make a victim choice wrong (a writer that
   * saw the entry pinned skips it; one that sees it unpinned may evict it, which is allowed). The
   * swap succeeds only if the score word is unchanged since a validated read that found the key
   * pinned, and a pinned entry is never replaced, so the pin taken off is the key's own, even
   * when a caller releases a key it no longer holds (that case reads pins == 0 and changes
   * nothing). The last release counts as a use at @p tick, as in unpin(), and lowers the
   * bucket's tail word with an atomic minimum (a racing refresh under the lock may raise it
   * again: that only delays the bucket's next global eviction).
   * @param accept called on lane 0 with the entry's value; false refuses (nothing changes)
   * @return released_last or released (a pin was taken off), not_pinned (none was held), absent
   *         or refused, on every lane; the entry's value in @p value (when present)
   */
  template <class Tile, class Accept>
  CCHT_HOST_DEVICE static pin_outcome unpin_optimistic(
      Tile const& tile, view_type const& v, key_type key, tick_type tick, value_type& value,
      Accept&& accept, access_counts* acc = nullptr,
      detail::slot_hint const* hint = nullptr) noexcept {
    static_assert(Policy::pinnable && Policy::promotes_by_max,
                  "optimistic unpins need a pinnable by-max policy");
    if (!v.optimistic_pins) {  // no claims on this table: unpin under the lock
      pin_outcome left = pin_outcome::absent;
      with_key_locked(tile, v, key, acc, [&](bucket<BucketSize>& b, std::uint32_t bi, int slot) {
        value = detail::load_relaxed(b.values[slot]);
        left = !accept(value) ? pin_outcome::refused : unpin_locked_slot(v, b, bi, slot, tick, acc);
      });
      value = tile.shfl(value, 0);
      return shfl_outcome(tile, left);
    }
    return snapshot_swap(
        tile, v, key, value, acc, hint,
        [&](bucket<BucketSize>& b, std::uint32_t bi, int slot, value_type val, score_type old,
            pin_outcome& result) {
          if (!accept(val)) {
            result = pin_outcome::refused;
            return true;
          }
          if (pins_of(old) == 0) {
            result = pin_outcome::not_pinned;
            return true;
          }
          score_type const bare = old - pin_one;
          bool const last = !is_pinned_score(bare);
          score_type const now =
              last && Policy::on_insert(tick) > bare ? Policy::on_insert(tick) : bare;
          // Release: the holder's reads of what the entry guards happen before a writer's claim
          // of it (which acquires). Fails when a pin or an unpin moved the word: re-read.
          if (!detail::cas_release(b.scores[slot], old, now)) { return false; }
          result = last ? pin_outcome::released_last : pin_outcome::released;
          if (last && v.tails != nullptr) {
            detail::count_slot_write(acc);
            if (detail::lower_word(v.tails[bi], now)) { detail::lower_upper(v, bi, now, acc); }
          }
          return true;
        });
  }

  /// Prefetches what a find of @p key reads first (host only; a no-op on the device).
  /// Force-inlined: a function whose only effect is __builtin_prefetch is "pure" to GCC's IPA,
  /// so an out-of-line call to it is deleted as dead code and nothing is prefetched.
  CCHT_HOST_DEVICE CCHT_FORCEINLINE static void prefetch(view_type const& v,
                                                         key_type key) noexcept {
#if !CCHT_DEVICE_CODE
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    __builtin_prefetch(&v.versions[cb.first]);
    __builtin_prefetch(&v.buckets[cb.first].keys[0]);
    if constexpr (BucketSize * sizeof(key_type) > 64) {
      __builtin_prefetch(&v.buckets[cb.first].keys[64 / sizeof(key_type)]);
    }
#else
    (void)v;
    (void)key;
#endif
  }

  /// Prefetches, for writing, what an upsert or erase of @p key may touch in both buckets.
  /// Force-inlined for the same reason as prefetch().
  CCHT_HOST_DEVICE CCHT_FORCEINLINE static void prefetch_for_update(view_type const& v,
                                                                    key_type key) noexcept {
#if !CCHT_DEVICE_CODE
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    for (std::uint32_t bi : {cb.first, cb.second}) {
      __builtin_prefetch(&v.versions[bi], 1);
      auto const* p = reinterpret_cast<char const*>(&v.buckets[bi]);
      for (std::size_t off = 0; off < sizeof(bucket<BucketSize>); off += 64) {
        __builtin_prefetch(p + off, 1);
      }
    }
#else
    (void)v;
    (void)key;
#endif
  }

 private:
  /// @p o as lane 0 holds it, on every lane.
  template <class Tile>
  CCHT_HOST_DEVICE static pin_outcome shfl_outcome(Tile const& tile, pin_outcome o) noexcept {
    return static_cast<pin_outcome>(tile.shfl(static_cast<int>(o), 0));
  }

  /**
   * The lock-free loop of pin_optimistic and unpin_optimistic: for each candidate bucket, one
   * pass reads the key's slot, value and score as of an even, unchanged version; then lane 0
   * calls step(bucket, bucket index, slot, value, score, result), which either finishes (true,
   * result set) or reports that its compare-and-swap lost a race (false: read again).
   * @return result, or absent when the key is in neither bucket; the value read goes to @p value
   */
  template <class Tile, class Step>
  CCHT_HOST_DEVICE static pin_outcome snapshot_swap(Tile const& tile, view_type const& v,
                                                    key_type key, value_type& value,
                                                    access_counts* acc,
                                                    detail::slot_hint const* hint,
                                                    Step&& step) noexcept {
    candidate_buckets const cb = hint ? hint->cb : candidates(key, v.seed, v.num_buckets);
    pin_outcome result = pin_outcome::absent;
    for (int which = 0; which < 2; ++which) {
      std::uint32_t const bi = which == 0 ? cb.first : cb.second;
      bucket<BucketSize>& b = v.buckets[bi];
      detail::count_probe<BucketSize>(acc);
      unsigned spins = 0;
      int outcome = 0;  // 0: read again, 1: not in this bucket, 2: done
      while (outcome == 0) {
        std::uint32_t const v1 = detail::load_acquire(v.versions[bi]);
        // Every lane must reach the shfl: one inside `||` would be skipped by lanes that saw an odd
        // version, and a *_sync collective that some of its lanes skip is undefined behaviour.
        std::uint32_t const v0 = tile.shfl(v1, 0);
        if (tile.ballot((v1 & 1u) != 0 || v1 != v0) != 0) {
          detail::spin_wait(spins);
          continue;
        }
        int const slot = detail::find_slot_hinted(
            tile, b, key, which == 0 && hint != nullptr ? hint->first_slot : -1);
        value_type val = 0;
        score_type old = 0;
        if (slot >= 0 && tile.thread_rank() == 0) {
          val = detail::load_relaxed(b.values[slot]);
          old = detail::load_relaxed(b.scores[slot]);
        }
        detail::fence_acquire();
        if (tile.ballot(detail::load_relaxed(v.versions[bi]) != v1) != 0) { continue; }
        if (slot < 0) {
          outcome = 1;
          break;
        }
        if (tile.thread_rank() == 0) {
          value = val;
          outcome = step(b, bi, slot, val, old, result) ? 2 : 0;
        }
        outcome = tile.shfl(outcome, 0);
      }
      if (outcome == 2) { break; }
    }
    value = tile.shfl(value, 0);
    return shfl_outcome(tile, result);
  }

  /**
   * Runs f(bucket, bucket index, slot) on lane 0 with the bucket holding @p key locked, if the
   * key is present (found optimistically, then checked again under the lock). Locks one bucket
   * at a time and never waits while holding one.
   */
  template <class Tile, class F>
  CCHT_HOST_DEVICE static void with_key_locked(Tile const& tile, view_type const& v, key_type key,
                                               access_counts* acc, F&& f) noexcept {
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    for (int attempt = 0;; ++attempt) {
      value_type ignored;
      std::uint32_t bi = cb.first;
      detail::count_probe<BucketSize>(acc);
      if (detail::read_bucket(tile, v.buckets[bi], v.versions[bi], key, ignored) < 0) {
        bi = cb.second;
        detail::count_probe<BucketSize>(acc);
        if (detail::read_bucket(tile, v.buckets[bi], v.versions[bi], key, ignored) < 0) { return; }
      }
      std::uint32_t held = 0;
      if (tile.thread_rank() == 0) {
        held = detail::lock_bucket(v.versions[bi]);
        detail::fence_release();  // the slot's stores must not be seen before the odd version
      }
      tile.sync();
      detail::fence_acquire();
      int const slot = detail::find_slot(tile, v.buckets[bi], key);
      if (slot >= 0) {
        detail::count_slot_write(acc);
        if (tile.thread_rank() == 0) { f(v.buckets[bi], bi, slot); }
      }
      if (tile.thread_rank() == 0) { detail::store_release(v.versions[bi], held + 1); }
      // Gone between the read and the lock (erased or evicted, perhaps moved by a re-insert):
      // look again; a key that is really absent ends the loop in the reads above.
      if (slot >= 0 || attempt > 0) { return; }
    }
  }
};

}  // namespace ccht

#include <ccht/core/kickout.hpp>  // defines detail::kickout_insert_or_assign
