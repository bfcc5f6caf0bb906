/**
 * @file kickout.hpp
 * @brief Kick-out (cuckoo displacement) insertion: the paper's LRU-CHT and Random-CHT baselines,
 *        run by bucket_ops<Policy, B>::insert_or_assign when Policy::kick_out is set.
 *
 * An insert of a new key, with both candidate buckets locked:
 * 1. At capacity (live count, view.live / view.capacity) the global layer's victim is chosen and
 *    its bucket locked (core/global.hpp); its slot counts as free from then on.
 * 2. A free slot of the first candidate bucket, else of the second, takes the key.
 * 3. Otherwise a kick chain: the key takes a resident's slot in one of its buckets (chosen from
 *    the tick); the displaced resident moves to its other candidate bucket, taking a free slot
 *    there or displacing another resident in turn, and so on. Moved entries keep their scores.
 *    The slot to displace is drawn from a hash of the tick and the step, and never holds the new
 *    key (with B >= 2), so the inserted key itself is never kicked out.
 * 4. After view.max_kicks displacements (kick_threshold = 2000 by default, as in the paper), or
 *    when the next bucket is locked by another writer, the chain stops: the homeless entry is
 *    evicted and reported (status inserted_evicted). The global victim of step 1 is then left in
 *    place (the live count is already back to where it was), so an insert evicts at most one
 *    entry and never loses one silently. If the chain succeeds and a global victim was chosen
 *    but not overwritten, it is evicted and reported.
 *
 * Memory accesses (access_counts): each kick reads the displaced entry's value and score sectors
 * and writes its slot (a bucket write), and probes the next bucket of the chain (a bucket read);
 * `kicks` counts displacements. A global eviction adds its sampled bucket reads (global.hpp).
 *
 * Concurrency. A chain touches buckets beyond the key's two, so the lock order (bucket index)
 * cannot be kept. The writer holds its two candidate buckets (taken in index order, as every
 * writer does) and the global victim's bucket for the whole insert, and walks the chain hand
 * over hand with try-locks only: it locks the next bucket while holding the current one, then
 * releases the current one. It never waits while holding a lock, so there is no deadlock; a failed
 * try-lock ends the chain as in step 4. The homeless entry always has one of its two candidate
 * buckets locked by the chain, so no other writer can insert it meanwhile (no duplicates) and an
 * erase of it waits until it is placed (or evicted and reported). Readers stay lock-free, and
 * validate each bucket separately, so a find or contains that reads the homeless entry's two
 * buckets while a chain moves it between them may miss a key that is in the table: the race the
 * paper describes for CHT. A value read is still never torn nor another key's.
 */
#pragma once

#include <ccht/core/accounting.hpp>
#include <ccht/core/atomics.hpp>
#include <ccht/core/bucket.hpp>
#include <ccht/core/bucket_ops.hpp>
#include <ccht/core/config.hpp>
#include <ccht/core/global.hpp>
#include <ccht/core/hash.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/core/types.hpp>

#include <cstdint>

namespace ccht {

/// Default most residents one kick-out insert displaces (the paper's threshold);
/// bucket_array_view::max_kicks overrides it per table.
inline constexpr std::uint32_t kick_threshold = 2000;
static_assert(bucket_array_view<default_bucket_size>{}.max_kicks == kick_threshold,
              "bucket_array_view::max_kicks must default to kick_threshold");

namespace detail {

/// No bucket.
inline constexpr std::uint32_t no_bucket = ~std::uint32_t{0};

/// Slot a kick displaces: drawn from the tick and the step, skipping slot @p keep (or -1).
template <int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE int kick_slot(std::uint64_t seed, tick_type tick,
                                                std::uint32_t step, int keep) noexcept {
  std::uint64_t const h = hash64(tick * 0xD6E8FEB86659FD93ull + step, seed ^ 0xa5a5a5a5a5a5a5a5ull);
  int s = static_cast<int>(h & static_cast<std::uint64_t>(B - 1));
  if (B > 1 && s == keep) { s = (s + 1) & (B - 1); }
  return s;
}

/// Free slot of held bucket @p bi whose first empty slot is @p empty: a chosen global victim
/// in it counts as free (and is preferred: overwriting it saves a second slot write).
CCHT_HOST_DEVICE CCHT_FORCEINLINE int free_slot(std::uint32_t bi, int empty, bool victim,
                                                global_victim const& gv) noexcept {
  return victim && gv.bucket == bi ? gv.slot : empty;
}

/**
 * @brief insert_or_assign of a kick-out policy (see the file comment). Same contract as
 *        bucket_ops<Policy, B>::insert_or_assign; when the status is inserted_evicted, the
 *        evicted pair is the global victim or the entry a failed kick chain left homeless.
 */
template <class Policy, class Tile, int B>
CCHT_HOST_DEVICE op_status kickout_insert_or_assign(Tile const& tile,
                                                    bucket_array_view<B> const& v, key_type key,
                                                    value_type value, tick_type tick,
                                                    key_type& evicted_key,
                                                    value_type& evicted_value,
                                                    access_counts* acc) noexcept {
  static_assert(Policy::kick_out, "kick-out insertion needs a kick-out policy");
  candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
  locked_pair const pair = lock_pair(tile, v, cb);
  std::uint32_t const lo = pair.lo;
  std::uint32_t const hi = pair.hi;

  // 0. An existing key (in either bucket) is updated and promoted in place.
  bucket<B>& b1 = v.buckets[cb.first];
  bucket<B>& b2 = v.buckets[cb.second];
  count_probe<B>(acc);
  scan_result const r1 = scan_locked(tile, b1, key);
  scan_result r2;
  bucket<B>* found = nullptr;
  int found_slot = -1;
  if (r1.match >= 0) {
    found = &b1;
    found_slot = r1.match;
  } else {
    count_probe<B>(acc);
    r2 = scan_locked(tile, b2, key);
    if (r2.match >= 0) {
      found = &b2;
      found_slot = r2.match;
    }
  }
  if (found != nullptr) {
    count_slot_write(acc);
    if (tile.thread_rank() == 0) {
      score_type& score = found->scores[found_slot];
      store_relaxed(found->values[found_slot], value);
      promote_locked<Policy>(score, tick);
      pair.release(v);
    }
    return op_status::assigned;
  }

  // 1. A new key: reserve its place in the live count; at capacity choose the global victim.
  constexpr bool layered = Policy::global != global_layer::none;
  bool const counted = layered && v.live != nullptr;
  global_victim gv;
  bool victim = false;
  bool swapped = false;  // lane 0: at the capacity, nothing added (reserve_live)
  if constexpr (layered) {
    if (counted) {
      std::uint64_t before = 0;
      if (tile.thread_rank() == 0) { before = reserve_live(v.live, v.capacity, swapped); }
      before = tile.shfl(before, 0);
      if (before >= v.capacity) {
        victim = lock_global_victim<Policy::global>(tile, v, tick, lo, hi, gv, acc);
      }
    }
  }

  // The entry to place: first the new key, then whichever resident the last kick displaced.
  key_type hk = key;
  value_type hv = value;
  score_type hs = Policy::on_insert(tick);
  bool used_victim = false;  // the victim's slot was overwritten (its pair read by lane 0)
  bool dropped = false;      // the chain failed: hk / hv is homeless and evicted
  std::uint32_t kicks = 0;

  // Writes the homeless entry into slot @p f of held bucket @p bi. A moved resident, or any entry
  // in an empty bucket, may be older than the bucket's tail word (see global.hpp): lower it.
  auto const place = [&](std::uint32_t bi, int f, bool was_empty) {
    bucket<B>& t = v.buckets[bi];
    count_slot_write(acc);
    bool const lower = v.tails != nullptr && (hk != key || was_empty);
    if (tile.thread_rank() == 0) {
      if (victim && bi == gv.bucket && f == gv.slot) {
        evicted_key = load_relaxed(t.keys[f]);
        evicted_value = load_relaxed(t.values[f]);
      }
      store_relaxed(t.values[f], hv);
      store_relaxed(t.scores[f], hs);
      store_relaxed(t.keys[f], hk);
      if (lower) { lower_tail(v, bi, hs, acc); }
    }
    if (victim && bi == gv.bucket && f == gv.slot) { used_victim = true; }
  };

  // 2. A free slot of the first bucket, else of the second.
  int const f1 = free_slot(cb.first, r1.empty, victim, gv);
  int const f2 = free_slot(cb.second, r2.empty, victim, gv);
  std::uint32_t extra = no_bucket;  // chain bucket held beyond the two and the victim's
  std::uint32_t extra_held = 0;
  if (f1 >= 0) {
    place(cb.first, f1, r1.free == B);
  } else if (f2 >= 0) {
    place(cb.second, f2, r2.free == B);
  } else {
    // 3. The kick chain. dst is held and full; the new key's slot, once placed, is (kb, ks).
    std::uint32_t const max_kicks = v.max_kicks == 0 ? 1 : v.max_kicks;
    std::uint32_t dst =
        (hash64(tick, v.seed ^ 0x6c6c6c6c6c6c6c6cull) >> 63) != 0 ? cb.second : cb.first;
    std::uint32_t kb = no_bucket;
    int ks = -1;
    while (true) {
      if (kicks == max_kicks) {  // 4. threshold reached: hk stays homeless
        dropped = true;
        break;
      }
      int const s = kick_slot<B>(v.seed, tick, kicks, dst == kb ? ks : -1);
      bucket<B>& d = v.buckets[dst];
      key_type ok = 0;
      value_type ov = 0;
      score_type os = 0;
      if (tile.thread_rank() == 0) {
        ok = load_relaxed(d.keys[s]);
        ov = load_relaxed(d.values[s]);
        os = load_relaxed(d.scores[s]);
        store_relaxed(d.values[s], hv);
        store_relaxed(d.scores[s], hs);
        store_relaxed(d.keys[s], hk);
        // A displaced resident keeps its (older) score: it may undercut dst's tail word.
        if (v.tails != nullptr && hk != key) { lower_tail(v, dst, hs, acc); }
      }
      tile.sync();  // lane 0's stores are seen by the lanes that scan this bucket again
      count_value_read(acc);
      count_value_read(acc);  // the displaced entry's score sector
      count_slot_write(acc);
      if (hk == key) {
        kb = dst;
        ks = s;
      }
      ++kicks;
      hk = tile.shfl(ok, 0);
      hv = tile.shfl(ov, 0);
      hs = tile.shfl(os, 0);

      // The displaced entry's other bucket: held already, or try-locked (never waited for).
      candidate_buckets const c = candidates(hk, v.seed, v.num_buckets);
      std::uint32_t const nxt = c.first == dst ? c.second : c.first;
      bool const own = nxt == cb.first || nxt == cb.second || (victim && nxt == gv.bucket);
      std::uint32_t held = 0;
      if (!own) {
        held = try_hold(tile, v.versions[nxt]);
        if (held == 0) {  // 4. contended: hk stays homeless
          dropped = true;
          break;
        }
      }
      // Hand over hand: hk now has nxt locked, so the previous chain bucket can go.
      if (extra != no_bucket && tile.thread_rank() == 0) {
        store_release(v.versions[extra], extra_held + 1);
      }
      extra = own ? no_bucket : nxt;
      extra_held = held;

      count_probe<B>(acc);
      int const f = free_slot(nxt, scan_locked(tile, v.buckets[nxt], hk).empty, victim, gv);
      if (f >= 0) {
        place(nxt, f, false);
        break;
      }
      dst = nxt;
    }
  }

  // Settle the eviction: at most one entry leaves.
  if (victim && !used_victim && !dropped) {
    take_victim(tile, v, gv, tick, evicted_key, evicted_value, acc);  // lane 0's copy suffices below
    used_victim = true;
  }
  if (dropped) {
    evicted_key = hk;
    evicted_value = hv;
  }
  bool const evicts = used_victim || dropped;
  if (acc) { acc->kicks += kicks; }
  if (tile.thread_rank() == 0) {
    if (counted) { settle_live(v.live, swapped, evicts); }
    if (extra != no_bucket) { store_release(v.versions[extra], extra_held + 1); }
    if (victim) { release_victim(tile, v, gv); }
    pair.release(v);
  }
  if (!evicts) { return op_status::inserted; }
  evicted_key = tile.shfl(evicted_key, 0);
  evicted_value = tile.shfl(evicted_value, 0);
  return op_status::inserted_evicted;
}

}  // namespace detail
}  // namespace ccht
