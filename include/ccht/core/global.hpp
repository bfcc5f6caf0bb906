/**
 * @file global.hpp
 * @brief The global capacity layer: choosing and evicting a victim anywhere in the table when an
 *        insert would exceed the capacity (double LRU, coarse-grained LRU, and the random victim
 *        of Random-CHT).
 *
 * Design: sampled tails (as Redis approximates LRU). An eviction reads `samples` buckets chosen
 * by hashing the operation's tick, ranks each (entry_lru: its oldest entry; bucket_lru: its
 * newest entry, i.e. the bucket's last use), and evicts the tail of the best-ranked bucket. The
 * victim is thus the oldest of about samples x B entries (entry_lru): never younger than the
 * (samples x B)-th oldest of those it saw. Cost: `samples` bucket reads and one write per
 * eviction, O(1) and independent of the table size; no global list, no lock but the victim's.
 * global_layer::random (Random-CHT) stops at the first non-empty sample and evicts a uniformly
 * random entry of it: one bucket read unless the table is nearly empty.
 *
 * Tail index (entry_lru only, when view.tails is set; the default of ccht::table). One 8-byte word
 * per bucket, 16 buckets per 128-byte line, holds a lower bound of the bucket's oldest score. A
 * global eviction reads ceil(samples / 16) random lines of it (at most 4) instead of `samples`
 * buckets, then locks the bucket with the smallest word and reads its true oldest score. If that
 * is no larger than the next smallest word of the lines, it is the oldest entry of all the lines'
 * buckets (the others' words are lower bounds), and it is the victim. Otherwise the word was stale:
 * it is corrected and the search goes on. So, run serially, the victim is the oldest entry of the
 * 16 x lines buckets drawn: two lines rank 32 buckets for the price of about four bucket reads.
 * The bound holds because scores only grow (promotions, lru ticks) and removals only raise a
 * bucket's oldest score; the writers that can lower it (a new entry in an empty bucket, an entry
 * that a kick moves in) lower the word too, under the bucket's lock. Under concurrency a slightly
 * older tick taken by a racing insert can undercut a word by the skew of concurrent ticks; that
 * only blurs the victim choice, as the victim is always verified under its lock.
 *
 * Two-level index (the default, when view.upper is set as well): one more word per line of the
 * tail index, a lower bound of the line's 16 words, so that one 128-byte read ranks 256 buckets.
 * An eviction reads a window of 16 such words and descends into the line with the smallest
 * (lock_two_level_victim). A stale upper word is raised with a compare-and-swap, so that an
 * insert lowering it meanwhile wins; every writer that lowers a tail word lowers its upper word.
 *
 * The inserting operation already holds its two candidate buckets' locks. To stay deadlock-free
 * it only *tries* to lock a third bucket; on failure it samples again. After every attempt fails
 * (possible only under contention) it walks the table from a sampled bucket, still with
 * try-locks, and gives up after one lap: it goes in above the capacity. A plain upsert then
 * repays that itself once its own locks are released (repay_overshoot): it searches again and
 * evicts one victim, which it reports as its own. Only if that finds nothing evictable either
 * does the overshoot stay until an erase lowers the count. Run serially, the capacity is never
 * exceeded.
 */
#pragma once

#include <ccht/core/accounting.hpp>
#include <ccht/core/atomics.hpp>
#include <ccht/core/bucket.hpp>
#include <ccht/core/config.hpp>
#include <ccht/core/hash.hpp>
#include <ccht/core/pin.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/core/tile.hpp>
#include <ccht/core/types.hpp>

#include <cuda/atomic>

#include <cstdint>

namespace ccht::detail {

/// Sentinel rank of an empty bucket.
inline constexpr score_type no_rank = ~score_type{0};

/// Bucket index of sample @p i for the operation with tick @p tick (deterministic).
template <int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE std::uint32_t sample_bucket(bucket_array_view<B> const& v,
                                                              tick_type tick,
                                                              std::uint32_t i) noexcept {
  std::uint64_t const h = hash64(tick * 0x9E3779B97F4A7C15ull + i, v.seed ^ 0x5a5a5a5a5a5a5a5aull);
  return static_cast<std::uint32_t>((std::uint64_t{static_cast<std::uint32_t>(h)} * v.num_buckets) >> 32);
}

/**
 * @brief Global rank of a bucket (smaller is evicted first) and its victim slot, read with
 *        relaxed loads (a hint when unlocked, exact when the caller holds the lock).
 *
 * Pinned entries (core/pin.hpp) are neither victims nor ranked: a bucket of only pinned entries
 * ranks as an empty one. (Scores of the policies with a global layer are ticks, below pin_one
 * unless pinned.)
 * @param occupied if not null, set to whether the bucket holds any entry, pinned or not
 * @return no_rank for a bucket without an unpinned entry
 */
template <global_layer G, class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE score_type bucket_rank(Tile const& tile, bucket<B> const& b,
                                                         int& victim,
                                                         bool* occupied = nullptr) noexcept {
  constexpr int T = static_cast<int>(Tile::num_threads());
  score_type lo = no_rank, hi = 0;
  int lo_slot = B;
  bool any = false;
  for (int i = static_cast<int>(tile.thread_rank()); i < B; i += T) {
    if (load_relaxed(b.keys[i]) == empty_key) { continue; }
    any = true;
    score_type const s = load_relaxed(b.scores[i]);
    if (is_pinned_score(s)) { continue; }
    if (s < lo || (s == lo && i < lo_slot)) {
      lo = s;
      lo_slot = i;
    }
    if (s > hi) { hi = s; }
  }
  for (unsigned off = T / 2; off > 0; off >>= 1) {
    score_type const olo = tile.shfl_xor(lo, off);
    int const oslot = tile.shfl_xor(lo_slot, off);
    score_type const ohi = tile.shfl_xor(hi, off);
    if (olo < lo || (olo == lo && oslot < lo_slot)) {
      lo = olo;
      lo_slot = oslot;
    }
    if (ohi > hi) { hi = ohi; }
  }
  if (occupied != nullptr) { *occupied = tile.ballot(any) != 0; }
  victim = lo_slot;
  if (lo_slot == B) { return no_rank; }
  return G == global_layer::bucket_lru ? hi : lo;
}

/// One attempt to lock a bucket without waiting. @return the odd version held, or 0
CCHT_HOST_DEVICE CCHT_FORCEINLINE std::uint32_t try_lock_bucket(std::uint32_t& version) noexcept {
  atomic_ref_t<std::uint32_t> ref(version);
  std::uint32_t v = ref.load(cuda::std::memory_order_relaxed);
  if ((v & 1u) != 0) { return 0; }
  return ref.compare_exchange_strong(v, v + 1, cuda::std::memory_order_acquire,
                                     cuda::std::memory_order_relaxed)
             ? v + 1
             : 0;
}

/// Random draw of the victim slot for sample @p draw (global_layer::random; deterministic).
template <int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE std::uint64_t victim_salt(bucket_array_view<B> const& v,
                                                            tick_type tick,
                                                            std::uint64_t draw) noexcept {
  return hash64(tick * 0x9E3779B97F4A7C15ull + draw, v.seed ^ 0x3c3c3c3c3c3c3c3cull);
}

/**
 * @brief global_layer::random: a uniformly random non-empty slot of a bucket, drawn from
 *        @p salt, read with relaxed loads (a hint when unlocked, exact when locked).
 * @return 0 with the slot in @p victim, or no_rank (victim = B) for an empty bucket
 */
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE score_type random_rank(Tile const& tile, bucket<B> const& b,
                                                         std::uint64_t salt, int& victim) noexcept {
  constexpr int T = static_cast<int>(Tile::num_threads());
  constexpr int chunks = B / T;
  unsigned masks[chunks];
  int count = 0;
  for (int c = 0; c < chunks; ++c) {  // ballots are uniform across the tile, so is the choice
    masks[c] = tile.ballot(load_relaxed(b.keys[c * T + static_cast<int>(tile.thread_rank())]) !=
                           empty_key);
    count += popcount(masks[c]);
  }
  victim = B;
  if (count == 0) { return no_rank; }
  int r = static_cast<int>(salt % static_cast<std::uint64_t>(count));
  for (int c = 0; c < chunks; ++c) {
    int const n = popcount(masks[c]);
    if (r < n) {
      unsigned m = masks[c];
      for (int i = 0; i < r; ++i) { m &= m - 1; }
      victim = c * T + lowest_lane(m);
      return 0;
    }
    r -= n;
  }
  return no_rank;  // unreachable
}

/// Rank (smaller is evicted first) and victim slot of bucket @p b under layer @p G; @p salt
/// draws the slot for global_layer::random.
template <global_layer G, class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE score_type layer_rank(Tile const& tile, bucket<B> const& b,
                                                        std::uint64_t salt, int& victim) noexcept {
  if constexpr (G == global_layer::random) {
    return random_rank(tile, b, salt, victim);
  } else {
    (void)salt;
    return bucket_rank<G>(tile, b, victim);
  }
}

/// Counts reading one candidate bucket of a global eviction (random needs no scores).
template <global_layer G, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void count_rank(access_counts* acc) noexcept {
  count_probe<B>(acc);
  if constexpr (G != global_layer::random) { count_scores<B>(acc); }
}

/// One attempt (lane 0) to lock a bucket; on success the tile may access it. @return odd
/// version held, or 0, on every lane
template <class Tile>
CCHT_HOST_DEVICE CCHT_FORCEINLINE std::uint32_t try_hold(Tile const& tile,
                                                         std::uint32_t& version) noexcept {
  std::uint32_t held = 0;
  if (tile.thread_rank() == 0) {
    held = try_lock_bucket(version);
    if (held) { fence_release(); }  // slot stores must not be seen before the odd version
  }
  held = tile.shfl(held, 0);
  if (held) { fence_acquire(); }
  return held;
}

// ---- tail index ---------------------------------------------------------------------------------

/// Buckets per line of the tail index (a 128-byte line of 8-byte words).
inline constexpr std::uint32_t tail_line_buckets = 16;
/// Most tail-index lines one global eviction reads.
inline constexpr std::uint32_t max_tail_lines = 4;

/// Lines of the tail index one global eviction reads to rank @p samples buckets.
CCHT_HOST_DEVICE constexpr std::uint32_t tail_lines_for(std::uint32_t samples) noexcept {
  std::uint32_t const l = (samples + tail_line_buckets - 1) / tail_line_buckets;
  return l == 0 ? 1 : (l > max_tail_lines ? max_tail_lines : l);
}

/// First bucket of tail-index line draw @p i for the operation with tick @p tick (deterministic).
template <int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE std::uint32_t tail_line(bucket_array_view<B> const& v,
                                                          tick_type tick, std::uint32_t i) noexcept {
  std::uint32_t const lines = (v.num_buckets + tail_line_buckets - 1) / tail_line_buckets;
  std::uint64_t const h = hash64(tick * 0xC2B2AE3D27D4EB4Full + i, v.seed ^ 0x7e7e7e7e7e7e7e7eull);
  return static_cast<std::uint32_t>((std::uint64_t{static_cast<std::uint32_t>(h)} * lines) >> 32) *
         tail_line_buckets;
}

/// Lowers @p word to at most @p s with a compare-and-swap loop (words without a lock: the upper
/// level of the two-level index, a lock-free unpin's tail word). @return whether it was written
CCHT_HOST_DEVICE CCHT_FORCEINLINE bool lower_word(score_type& word, score_type s) noexcept {
  atomic_ref_t<score_type> t(word);
  score_type cur = t.load(cuda::std::memory_order_relaxed);
  while (s < cur) {
    if (t.compare_exchange_weak(cur, s, cuda::std::memory_order_relaxed)) { return true; }
  }
  return false;
}

/// Lowers the upper-level word over bucket @p b (two-level index only) to at most @p s, counting
/// the write.
template <int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void lower_upper(bucket_array_view<B> const& v, std::uint32_t b,
                                                   score_type s, access_counts* acc) noexcept {
  if (v.upper != nullptr && lower_word(v.upper[b / tail_line_buckets], s)) { count_tail_write(acc); }
}

/// Lowers bucket @p b's tail word to @p s (lane 0; the caller holds the bucket), and the upper
/// word over it, counting each word written.
template <int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void lower_tail(bucket_array_view<B> const& v, std::uint32_t b,
                                                  score_type s, access_counts* acc) noexcept {
  score_type& t = v.tails[b];
  if (s >= load_relaxed(t)) { return; }
  store_relaxed(t, s);
  count_tail_write(acc);
  lower_upper(v, b, s, acc);
}

/**
 * @brief The tail word of a held bucket whose oldest unpinned score is @p rank: the rank itself;
 *        no_rank only when the bucket is empty; @p now for a bucket of pinned entries only.
 *
 * Why not no_rank for a pinned-only bucket: an insert lowers a word only when its bucket was
 * empty, so a later entry there must find a word no larger than its tick; @p now (the current
 * operation's tick) is, and unpin() lowers the word when an entry becomes evictable again.
 */
CCHT_HOST_DEVICE CCHT_FORCEINLINE score_type tail_word(score_type rank, bool occupied,
                                                       tick_type now) noexcept {
  return rank != no_rank || !occupied ? rank : now;
}

/// Sets held bucket @p b's tail word to its true oldest unpinned score (see tail_word).
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void refresh_tail(Tile const& tile, bucket_array_view<B> const& v,
                                                    std::uint32_t b, tick_type now,
                                                    access_counts* acc) noexcept {
  int slot;
  bool occupied = false;
  score_type const r = bucket_rank<global_layer::entry_lru>(tile, v.buckets[b], slot, &occupied);
  if (tile.thread_rank() == 0) { store_relaxed(v.tails[b], tail_word(r, occupied, now)); }
  count_tail_write(acc);
}

/// A global victim whose bucket the caller now holds.
struct global_victim {
  std::uint32_t bucket = 0;  ///< bucket index
  int slot = -1;             ///< slot of the victim (a non-empty slot)
  std::uint32_t held = 0;    ///< odd version taken by the try-lock; 0 when it is an own bucket
};

/// The smallest of @p n per-lane words (ties to the smaller id) and the next smallest, over the
/// tile.
template <class Tile, int N>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void tile_min2(Tile const& tile, score_type const (&word)[N],
                                                 std::uint32_t const (&id)[N], int n,
                                                 score_type& m1, std::uint32_t& i1,
                                                 score_type& m2) noexcept {
  constexpr int T = static_cast<int>(Tile::num_threads());
  m1 = no_rank;
  m2 = no_rank;
  i1 = ~std::uint32_t{0};
  for (int i = 0; i < n; ++i) {
    if (word[i] < m1 || (word[i] == m1 && id[i] < i1)) {
      m2 = m1 < m2 ? m1 : m2;
      m1 = word[i];
      i1 = id[i];
    } else if (word[i] < m2) {
      m2 = word[i];
    }
  }
  for (unsigned off = T / 2; off > 0; off >>= 1) {
    score_type const om1 = tile.shfl_xor(m1, off);
    std::uint32_t const oi1 = tile.shfl_xor(i1, off);
    score_type const om2 = tile.shfl_xor(m2, off);
    if (om1 < m1 || (om1 == m1 && oi1 < i1)) {
      m2 = m1 < om2 ? m1 : om2;
      m1 = om1;
      i1 = oi1;
    } else if (om1 < m2) {
      m2 = om1;
    }
  }
}

/**
 * @brief The tail-index search (see the file comment): locks the oldest entry of the buckets of
 *        tail_lines_for(v.samples) random lines, correcting stale words on the way.
 * @return true with @p out set; false when two rounds of lines found only empty or busy buckets
 */
template <class Tile, int B>
CCHT_HOST_DEVICE bool lock_tail_victim(Tile const& tile, bucket_array_view<B> const& v,
                                       tick_type tick, std::uint32_t own_a, std::uint32_t own_b,
                                       global_victim& out, access_counts* acc) noexcept {
  constexpr int T = static_cast<int>(Tile::num_threads());
  constexpr int W = static_cast<int>(tail_line_buckets);
  static_assert(W % T == 0 || T % W == 0, "a tile and a tail-index line must divide one another");
  // A tile wider than a line (32 lanes) leaves its upper lanes without words: they hold no_rank.
  constexpr int per_lane = static_cast<int>(max_tail_lines) * ((W + T - 1) / T);
  std::uint32_t const lines = tail_lines_for(v.samples);
  // Each word is corrected at most once per round, then accepted: 2 checks per bucket suffice.
  std::uint32_t const max_checks = 2 * lines * tail_line_buckets;
  int const lane = static_cast<int>(tile.thread_rank());
  for (std::uint32_t round = 0; round < 2; ++round) {
    score_type word[per_lane];
    std::uint32_t bucket_of[per_lane];
    int n = 0;
    for (std::uint32_t l = 0; l < lines; ++l) {
      std::uint32_t const first = tail_line(v, tick, round * max_tail_lines + l);
      count_tail_read(acc);
      for (int j = lane; j < W; j += T, ++n) {
        std::uint32_t const b = first + static_cast<std::uint32_t>(j);
        bucket_of[n] = b;
        word[n] = b < v.num_buckets ? load_relaxed(v.tails[b]) : no_rank;
      }
    }
    auto const correct = [&](std::uint32_t b, score_type w) {
      for (int i = 0; i < n; ++i) {
        if (bucket_of[i] == b) { word[i] = w; }
      }
    };
    for (std::uint32_t check = 0; check < max_checks; ++check) {
      // The smallest word (ties to the lower bucket) and the next smallest, over the tile.
      score_type m1, m2;
      std::uint32_t b1;
      tile_min2(tile, word, bucket_of, n, m1, b1, m2);
      if (m1 == no_rank) { break; }  // every bucket of the lines is empty or busy
      bool const own = b1 == own_a || b1 == own_b;
      std::uint32_t const held = own ? 0 : try_hold(tile, v.versions[b1]);
      if (!own && held == 0) {  // busy: leave it to its writer
        correct(b1, no_rank);
        continue;
      }
      int slot;
      bool occupied = false;
      score_type const r =
          bucket_rank<global_layer::entry_lru>(tile, v.buckets[b1], slot, &occupied);
      count_rank<global_layer::entry_lru, B>(acc);
      if (r != no_rank && (r <= m2 || check + 1 == max_checks)) {
        out.bucket = b1;
        out.slot = slot;
        out.held = held;
        return true;
      }
      // A stale word: correct it (exact now, under the lock) and look again.
      score_type const w = tail_word(r, occupied, tick);
      if (tile.thread_rank() == 0) {
        store_relaxed(v.tails[b1], w);
        if (!own) { store_release(v.versions[b1], held + 1); }
      }
      count_tail_write(acc);
      correct(b1, r == no_rank ? no_rank : w);  // a pinned-only bucket is not ranked again here
    }
  }
  return false;
}

// ---- two-level tail index -----------------------------------------------------------------------

/// Tail-index lines one upper line bounds (a 128-byte line of 8-byte upper words).
inline constexpr std::uint32_t upper_line_lines = 16;
/// Buckets one upper line ranks.
inline constexpr std::uint32_t upper_line_buckets = upper_line_lines * tail_line_buckets;
/// Most upper lines one global eviction reads.
inline constexpr std::uint32_t max_upper_lines = 4;

/// Upper lines of the two-level index one global eviction reads to rank @p samples buckets.
CCHT_HOST_DEVICE constexpr std::uint32_t upper_lines_for(std::uint32_t samples) noexcept {
  std::uint32_t const l = (samples + upper_line_buckets - 1) / upper_line_buckets;
  return l == 0 ? 1 : (l > max_upper_lines ? max_upper_lines : l);
}

/// Lines of the tail index (one upper word each) of a table of @p num_buckets buckets.
CCHT_HOST_DEVICE constexpr std::uint32_t tail_index_lines(std::uint32_t num_buckets) noexcept {
  return (num_buckets + tail_line_buckets - 1) / tail_line_buckets;
}

/// Lines one two-level search ranks: 16 per upper line read, at most every line of the table.
template <int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE std::uint32_t upper_window_lines(bucket_array_view<B> const& v) noexcept {
  std::uint32_t const lines = tail_index_lines(v.num_buckets);
  std::uint32_t const w = upper_lines_for(v.samples) * upper_line_lines;
  return w < lines ? w : lines;
}

/// (start + j) mod lines for start < lines and j <= lines: one compare instead of a division,
/// which cost 16 integer divides per search (one per upper word).
CCHT_HOST_DEVICE CCHT_FORCEINLINE std::uint32_t wrap_line(std::uint32_t start, std::uint32_t j,
                                                          std::uint32_t lines) noexcept {
  std::uint32_t const l = start + j;
  return l >= lines ? l - lines : l;
}

/// Line alignment of a two-level window's start: 8 words, 64 bytes (a CPU cache line, two GPU
/// sectors), so that a window of 16 words costs what an aligned 128-byte line does.
inline constexpr std::uint32_t upper_window_align = 8;

/**
 * @brief First line of the two-level search's window in round @p round of the operation with
 *        tick @p tick: a uniform multiple of upper_window_align below the line count. The window
 *        is upper_window_lines() consecutive lines from there, wrapping at the end, so every
 *        line is ranked about equally often (whole upper lines would favour a partial last one).
 */
template <int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE std::uint32_t upper_window(bucket_array_view<B> const& v,
                                                             tick_type tick,
                                                             std::uint32_t round) noexcept {
  std::uint32_t const lines = tail_index_lines(v.num_buckets);
  std::uint32_t const starts = (lines + upper_window_align - 1) / upper_window_align;
  std::uint64_t const h =
      hash64(tick * 0xD6E8FEB86659FD93ull + round, v.seed ^ 0x1d1d1d1d1d1d1d1dull);
  return static_cast<std::uint32_t>((std::uint64_t{static_cast<std::uint32_t>(h)} * starts) >> 32) *
         upper_window_align;
}

/**
 * @brief The two-level search: one upper word per tail-index line (a lower bound of its 16
 *        words), 16 per upper line, so one read ranks 256 buckets. Reads a window of
 *        upper_window_lines() lines' upper words at a random start (upper_window), descends into
 *        the line with the smallest upper word, and there runs the tail index's check: the bucket with the smallest word is
 *        locked and its true oldest score read; it is the victim when no larger than the line's
 *        next word and every other line's upper word (all lower bounds). A stale upper word
 *        (below its line's smallest word) is raised with a compare-and-swap, so that an insert
 *        lowering it meanwhile wins; a stale tail word is corrected under its lock.
 *
 * Run serially the victim is the oldest entry of the buckets of the window's lines.
 * @return true with @p out set; false when two rounds found only empty or busy buckets
 */
template <class Tile, int B>
CCHT_HOST_DEVICE bool lock_two_level_victim(Tile const& tile, bucket_array_view<B> const& v,
                                            tick_type tick, std::uint32_t own_a,
                                            std::uint32_t own_b, global_victim& out,
                                            access_counts* acc) noexcept {
  constexpr int T = static_cast<int>(Tile::num_threads());
  constexpr int W = static_cast<int>(upper_line_lines);
  constexpr int L = static_cast<int>(tail_line_buckets);
  static_assert((W % T == 0 || T % W == 0) && (L % T == 0 || T % L == 0),
                "a tile and an index line must divide one another");
  // A tile wider than a line (32 lanes) leaves its upper lanes without words: they hold no_rank.
  constexpr int per_lane_hi = static_cast<int>(max_upper_lines) * ((W + T - 1) / T);
  constexpr int per_lane = (L + T - 1) / T;
  std::uint32_t const uppers = upper_lines_for(v.samples);
  std::uint32_t const num_lines = tail_index_lines(v.num_buckets);
  (void)W;
  // Every iteration corrects a word (each at most once per round) or moves to another line.
  std::uint32_t const max_checks = 4 * uppers * (upper_line_lines + upper_line_buckets);
  int const lane = static_cast<int>(tile.thread_rank());
  for (std::uint32_t round = 0; round < 2; ++round) {
    score_type hw[per_lane_hi];
    std::uint32_t line_of[per_lane_hi];
    int nh = 0;
    std::uint32_t const start = upper_window(v, tick, round);
    std::uint32_t const window = upper_window_lines(v);
    for (std::uint32_t u = 0; u < uppers; ++u) { count_tail_read(acc); }
    if (start + window > num_lines) { count_tail_read(acc); }  // it wraps: one more read
    for (int j = lane; j < W * static_cast<int>(uppers); j += T, ++nh) {
      bool const in = static_cast<std::uint32_t>(j) < window;  // then start + j < 2 * num_lines
      std::uint32_t const l = wrap_line(start, static_cast<std::uint32_t>(j), num_lines);
      line_of[nh] = in ? l : ~std::uint32_t{0};
      hw[nh] = in ? load_relaxed(v.upper[l]) : no_rank;
    }
    auto const set_hw = [&](std::uint32_t l, score_type w) {
      for (int i = 0; i < nh; ++i) {
        if (line_of[i] == l) { hw[i] = w; }
      }
    };
    score_type w[per_lane];
    std::uint32_t bucket_of[per_lane];
    for (int i = 0; i < per_lane; ++i) {  // filled when the first line is read; set for gcc
      w[i] = no_rank;
      bucket_of[i] = ~std::uint32_t{0};
    }
    std::uint32_t cur_line = ~std::uint32_t{0};  // the line whose words w holds
    for (std::uint32_t check = 0; check < max_checks; ++check) {
      score_type M1, M2;
      std::uint32_t L1;
      tile_min2(tile, hw, line_of, nh, M1, L1, M2);
      if (M1 == no_rank) { break; }  // every line drawn is empty or busy
      if (L1 != cur_line) {
        cur_line = L1;
        count_tail_read(acc);
        for (int i = 0; i < per_lane; ++i) {
          int const j = lane + i * T;
          std::uint32_t const b = L1 * tail_line_buckets + static_cast<std::uint32_t>(j);
          bool const in = j < L && b < v.num_buckets;
          bucket_of[i] = in ? b : ~std::uint32_t{0};
          w[i] = in ? load_relaxed(v.tails[b]) : no_rank;
        }
        score_type lm, unused;
        std::uint32_t ub;
        tile_min2(tile, w, bucket_of, per_lane, lm, ub, unused);
        if (lm > M1) {  // a stale upper word: raise it to its line's smallest word
          if (lane == 0) {
            score_type seen = M1;
            (void)cas_relaxed(v.upper[L1], seen, lm);
          }
          count_tail_write(acc);
          set_hw(L1, lm);
          continue;
        }
      }
      score_type m1, m2;
      std::uint32_t b1;
      tile_min2(tile, w, bucket_of, per_lane, m1, b1, m2);
      if (m1 == no_rank || m1 > M2) {  // all busy here, or another line may hold older entries
        set_hw(L1, m1);
        continue;
      }
      auto const set_w = [&](score_type x) {
        for (int i = 0; i < per_lane; ++i) {
          if (bucket_of[i] == b1) { w[i] = x; }
        }
      };
      bool const own = b1 == own_a || b1 == own_b;
      std::uint32_t const held = own ? 0 : try_hold(tile, v.versions[b1]);
      if (!own && held == 0) {  // busy: leave it to its writer
        set_w(no_rank);
        continue;
      }
      int slot;
      bool occupied = false;
      score_type const r =
          bucket_rank<global_layer::entry_lru>(tile, v.buckets[b1], slot, &occupied);
      count_rank<global_layer::entry_lru, B>(acc);
      score_type const bound = m2 < M2 ? m2 : M2;
      if (r != no_rank && (r <= bound || check + 1 == max_checks)) {
        out.bucket = b1;
        out.slot = slot;
        out.held = held;
        return true;
      }
      // A stale tail word: correct it (exact now, under the lock) and look again.
      score_type const x = tail_word(r, occupied, tick);
      if (lane == 0) {
        store_relaxed(v.tails[b1], x);
        if (!own) { store_release(v.versions[b1], held + 1); }
      }
      count_tail_write(acc);
      set_w(r == no_rank ? no_rank : x);  // a pinned-only bucket is not ranked again here
    }
  }
  return false;
}

/**
 * @brief Chooses the victim of global layer @p G and locks its bucket (try-lock, unless it is
 *        @p own_a or @p own_b, whose locks the caller's tile already holds), without evicting.
 *
 * The caller then evicts it (or, for a kick-out insert whose chain failed, releases it intact)
 * and releases the bucket with release_victim(). entry_lru with a tail index searches it first
 * (lock_tail_victim); otherwise, or when that fails, entry_lru / bucket_lru rank @p samples
 * buckets per round and take the best; random takes the first non-empty sample of a round and a
 * uniformly random entry in it.
 * @return true with @p out set; false when every attempt failed (see the file comment)
 */
template <global_layer G, class Tile, int B>
CCHT_HOST_DEVICE bool lock_global_victim(Tile const& tile, bucket_array_view<B> const& v,
                                         tick_type tick, std::uint32_t own_a, std::uint32_t own_b,
                                         global_victim& out, access_counts* acc) noexcept {
  static_assert(G != global_layer::none, "no global layer");
  if constexpr (G == global_layer::entry_lru) {
    if (v.upper != nullptr) {
      if (lock_two_level_victim(tile, v, tick, own_a, own_b, out, acc)) { return true; }
    } else if (v.tails != nullptr && lock_tail_victim(tile, v, tick, own_a, own_b, out, acc)) {
      return true;
    }
  }
  constexpr int attempts = 4;
  // After an index search failed, `samples` is the index's window (512 for the two-level one):
  // as a count of sampled buckets it only rereads a small table's, so it is capped there, and a
  // search that finds only pinned entries costs rounds of the table, not of 512 buckets.
  std::uint32_t k = v.samples == 0 ? 1 : v.samples;
  if (v.tails != nullptr && k > v.num_buckets) { k = v.num_buckets; }
  // Sampled rounds, then one lap of the table from a sampled bucket.
  std::uint64_t const lap_start = attempts * std::uint64_t{k};
  std::uint64_t const last = lap_start + v.num_buckets;
  std::uint64_t draw = 0;
  while (draw < last) {
    std::uint32_t best = 0;
    score_type best_rank = no_rank;
    std::uint64_t best_salt = 0;
    if (draw < lap_start) {  // a round of k samples
      for (std::uint32_t s = 0; s < k; ++s) {
        std::uint32_t const bi = sample_bucket(v, tick, static_cast<std::uint32_t>(draw));
        std::uint64_t const salt = victim_salt(v, tick, draw);
        ++draw;
        int slot;
        score_type const r = layer_rank<G>(tile, v.buckets[bi], salt, slot);
        count_rank<G, B>(acc);
        if (r < best_rank) {
          best_rank = r;
          best = bi;
          best_salt = salt;
          if constexpr (G == global_layer::random) { break; }  // any non-empty bucket will do
        }
      }
    } else {  // the lap: the next bucket in order
      std::uint32_t const start = sample_bucket(v, tick, static_cast<std::uint32_t>(lap_start));
      best = static_cast<std::uint32_t>((start + (draw - lap_start)) % v.num_buckets);
      best_salt = victim_salt(v, tick, draw);
      ++draw;
      int slot;
      best_rank = layer_rank<G>(tile, v.buckets[best], best_salt, slot);
      count_rank<G, B>(acc);
    }
    if (best_rank == no_rank) { continue; }

    bool const own = best == own_a || best == own_b;
    std::uint32_t held = 0;
    if (!own) {
      if (tile.thread_rank() == 0) {
        held = try_lock_bucket(v.versions[best]);
        if (held) { fence_release(); }
      }
      held = tile.shfl(held, 0);
      if (held == 0) { continue; }
      fence_acquire();
    }
    int slot;
    // exact now: we hold the lock
    if (layer_rank<G>(tile, v.buckets[best], best_salt, slot) != no_rank) {
      out.bucket = best;
      out.slot = slot;
      out.held = held;
      return true;
    }
    if (!own && tile.thread_rank() == 0) { store_release(v.versions[best], held + 1); }
  }
  return false;
}

/// Releases the victim's bucket taken by lock_global_victim() (nothing for an own bucket).
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void release_victim(Tile const& tile,
                                                      bucket_array_view<B> const& v,
                                                      global_victim const& gv) noexcept {
  if (gv.held != 0 && tile.thread_rank() == 0) {
    store_release(v.versions[gv.bucket], gv.held + 1);
  }
}

/// Frees the victim's slot (its bucket held); its pair goes to @p ek / @p ev on every lane.
/// Without @p refresh the bucket's tail word is left as it is: still a lower bound, only lower
/// than it could be (the bulk select leaves it to the bucket's last chosen victim).
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void take_victim(Tile const& tile, bucket_array_view<B> const& v,
                                                   global_victim const& gv, tick_type now,
                                                   key_type& ek, value_type& ev,
                                                   access_counts* acc, bool refresh = true) noexcept {
  bucket<B>& b = v.buckets[gv.bucket];
  if (tile.thread_rank() == 0) {
    ek = load_relaxed(b.keys[gv.slot]);
    ev = load_relaxed(b.values[gv.slot]);
    store_relaxed(b.keys[gv.slot], empty_key);
  }
  count_value_read(acc);  // the victim's value, to report it
  count_slot_write(acc);
  ek = tile.shfl(ek, 0);
  ev = tile.shfl(ev, 0);
  if (v.tails != nullptr && refresh) {  // the bucket's oldest entry left: its word is exact again
    tile.sync();             // lane 0's store of the empty key, for the other lanes' scan
    refresh_tail(tile, v, gv.bucket, now, acc);
  }
}

/**
 * @brief Claims an entry for removal (lane 0; the caller holds its bucket): swaps its score word,
 *        if unpinned, for claimed_score. Fails when it is pinned, or when a lock-free pin (or a
 *        promotion) changed the word since it was read: the caller chooses again.
 * @return whether the claim succeeded (on every lane)
 */
template <class Tile>
CCHT_HOST_DEVICE CCHT_FORCEINLINE bool claim_score(Tile const& tile, score_type& s) noexcept {
  int ok = 0;
  if (tile.thread_rank() == 0) {
    score_type seen = load_relaxed(s);
    ok = !is_pinned_score(seen) && cas_acquire(s, seen, claimed_score) ? 1 : 0;
  }
  return tile.shfl(ok, 0) != 0;
}

// ---- own-first ----------------------------------------------------------------------------------

/// Own-first: one tick in own_first_period searches globally even when an own victim is old
/// enough, so that the victim age keeps following the table.
inline constexpr tick_type own_first_period = 16;
/// Folds a global victim of score @p score, evicted at @p tick, into the victim age: the age of
/// the last global victim (lane 0; relaxed: it is a hint, a lost store only delays it). A
/// running mean was measured too and followed LRU worse (docs/global-layer.md).
template <int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void note_victim_age(bucket_array_view<B> const& v,
                                                       tick_type tick, score_type score) noexcept {
  score_type const age = tick > score ? static_cast<score_type>(tick - score) : 1;
  store_relaxed(*v.victim_age, age);
}

/// The age an own victim needs at @p tick: (1 - own_slack / 256) x the last global victim's age,
/// or
/// 0 when the insert must search globally (no global victim yet, or a periodic tick).
template <int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE score_type own_age_needed(bucket_array_view<B> const& v,
                                                            tick_type tick) noexcept {
  if (tick % own_first_period == 0) { return 0; }
  score_type const mean = load_relaxed(*v.victim_age);
  return mean - (mean * v.own_slack >> 8);
}

/**
 * @brief Own-first (victim_search::own_first): the oldest unpinned entry of an insert's two held
 *        buckets, when it may be evicted in place of a global victim: it is at least
 *        own_age_needed() old. Otherwise the insert searches the two-level index.
 *
 * Why: the insert has already read both buckets, so evicting there costs no further bucket; an
 * entry about as old as recent global victims is about as good a victim as the search would
 * find. The age comes from global victims only (note_victim_age), so own victims cannot drag
 * it down.
 * @return 0 or 1 (the bucket, @p a or @p b) with the slot in @p slot, or -1 (every lane)
 */
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE int own_victim(Tile const& tile, bucket_array_view<B> const& v,
                                                 tick_type tick, bucket<B> const& a,
                                                 bucket<B> const& b, int& slot,
                                                 access_counts* acc) noexcept {
  // One lane reads the shared age and the tile takes its value: other tiles write it meanwhile,
  // so lanes reading it each could disagree on the branch below, which leads to collectives.
  score_type needed = 0;
  if (tile.thread_rank() == 0) { needed = own_age_needed(v, tick); }
  needed = tile.shfl(needed, 0);
  if (needed == 0) { return -1; }
  count_scores<B>(acc);  // both score lines; the probes already counted the buckets
  count_scores<B>(acc);
  int sa, sb;
  score_type const ra = bucket_rank<global_layer::entry_lru>(tile, a, sa);
  score_type const rb = bucket_rank<global_layer::entry_lru>(tile, b, sb);
  bool const second = rb < ra;
  score_type const r = second ? rb : ra;
  if (r == no_rank || r > tick || tick - r < needed) { return -1; }
  slot = second ? sb : sa;
  return second ? 1 : 0;
}

/**
 * @brief Evicts one entry chosen by the global layer @p G. The caller's tile holds the locks of
 *        buckets @p own_a and @p own_b (which may also hold the victim).
 * @return true when an entry was evicted (written to @p ek / @p ev, its bucket to
 *         @p victim_bucket, on every lane)
 */
template <global_layer G, class Tile, int B>
CCHT_HOST_DEVICE bool evict_global(Tile const& tile, bucket_array_view<B> const& v, tick_type tick,
                                   std::uint32_t own_a, std::uint32_t own_b, key_type& ek,
                                   value_type& ev, std::uint32_t& victim_bucket,
                                   access_counts* acc) noexcept {
  // The victim is claimed before it is taken (claim_score): a lock-free pin that won the race
  // for its score word makes it unevictable, and the search runs again (it now skips that entry).
  for (int attempt = 0; attempt < 4; ++attempt) {
    global_victim gv;
    if (!lock_global_victim<G>(tile, v, tick, own_a, own_b, gv, acc)) { return false; }
    score_type const score = load_relaxed(v.buckets[gv.bucket].scores[gv.slot]);  // before a claim
    if (!v.optimistic_pins || claim_score(tile, v.buckets[gv.bucket].scores[gv.slot])) {
      if (v.victim_age != nullptr && tile.thread_rank() == 0) { note_victim_age(v, tick, score); }
      take_victim(tile, v, gv, tick, ek, ev, acc);
      release_victim(tile, v, gv);
      victim_bucket = gv.bucket;
      return true;
    }
    release_victim(tile, v, gv);
  }
  return false;
}

// ---- victims chosen for a whole batch (bulk victim select) -------------------------------------

/**
 * @brief A victim chosen before the insert that takes it (bulk victim select, see
 *        docs/global-layer.md): an entry's place and the score it had when chosen.
 *
 * Why: a bulk insert of n new keys into a full table needs n victims; choosing the n oldest in
 * one pass over the table, in bucket order, replaces n searches and lets consecutive victims
 * share a bucket. A candidate is only a hint: evict_supplied() verifies it under the lock.
 */
struct victim_candidate {
  std::uint32_t bucket;  ///< bucket index
  std::uint32_t slot;    ///< slot in the bucket
  score_type score;      ///< the entry's score when chosen (a tick: unique to that entry)
};

/// Whether insert hook @p Hook hands out chosen victims (`bool next_victim(victim_candidate&)`
/// and `bool next_in_bucket(std::uint32_t bucket)`, whether the next one is in @p bucket; lane
/// 0), which an insert at the capacity tries before it searches.
template <class Hook>
inline constexpr bool supplies_victims_v = requires { requires Hook::supplies_victims; };

/// Most chosen victims one insert tries (each may be stale) before it searches instead.
inline constexpr int max_supplied_tries = 16;

/**
 * @brief Evicts the next still-valid victim @p hook supplies. The caller holds @p own_a and
 *        @p own_b. A candidate is taken only if its slot still holds an entry with the score it
 *        was chosen with: scores are ticks, so a promoted, replaced or pinned entry has another
 *        score and is skipped. A busy bucket is skipped too (try-lock, as in the search).
 * @return true with the pair in @p ek / @p ev and its bucket in @p victim_bucket (every lane);
 *         false when max_supplied_tries candidates failed or the hook has none left
 */
template <class Tile, int B, class Hook>
CCHT_HOST_DEVICE bool evict_supplied(Tile const& tile, bucket_array_view<B> const& v, Hook& hook,
                                     tick_type tick, std::uint32_t own_a, std::uint32_t own_b,
                                     key_type& ek, value_type& ev, std::uint32_t& victim_bucket,
                                     access_counts* acc) noexcept {
  for (int attempt = 0; attempt < max_supplied_tries; ++attempt) {
    victim_candidate c{0, 0, 0};
    int ok = 0;
    // more: the hook's next victim is in the same bucket, whose tail word it will refresh
    int more = 0;
    if (tile.thread_rank() == 0) {
      ok = hook.next_victim(c) ? 1 : 0;
      more = ok && hook.next_in_bucket(c.bucket) ? 1 : 0;
    }
    if (tile.shfl(ok, 0) == 0) { return false; }
    more = tile.shfl(more, 0);
    c.bucket = tile.shfl(c.bucket, 0);
    c.slot = tile.shfl(c.slot, 0);
    c.score = tile.shfl(c.score, 0);
    std::uint32_t held = 0;
    if (c.bucket != own_a && c.bucket != own_b) {
      if (tile.thread_rank() == 0) {
        held = try_lock_bucket(v.versions[c.bucket]);
        if (held) { fence_release(); }
      }
      held = tile.shfl(held, 0);
      if (held == 0) { continue; }
      fence_acquire();
    }
    global_victim const gv{c.bucket, static_cast<int>(c.slot), held};
    bucket<B>& b = v.buckets[c.bucket];
    count_probe<B>(acc);  // the slot's key and score, to verify
    int same = 0;
    if (tile.thread_rank() == 0) {
      same = load_relaxed(b.keys[c.slot]) != empty_key && load_relaxed(b.scores[c.slot]) == c.score;
    }
    if (tile.shfl(same, 0) != 0 &&
        (!v.optimistic_pins || claim_score(tile, b.scores[c.slot]))) {
      if (v.victim_age != nullptr && tile.thread_rank() == 0) { note_victim_age(v, tick, c.score); }
      take_victim(tile, v, gv, tick, ek, ev, acc, more == 0);
      release_victim(tile, v, gv);
      if (acc != nullptr) { acc->chosen_victims += 1; }
      victim_bucket = c.bucket;
      return true;
    }
    release_victim(tile, v, gv);
  }
  return false;
}

/// Adds @p delta to the live-entry count (lane 0 only); returns the count before.
CCHT_HOST_DEVICE CCHT_FORCEINLINE std::uint64_t add_live(std::uint64_t* live,
                                                         std::int64_t delta) noexcept {
  return atomic_ref_t<std::uint64_t>(*live).fetch_add(static_cast<std::uint64_t>(delta),
                                                      cuda::std::memory_order_relaxed);
}

/**
 * @brief Reserves a new entry's place in the live count (lane 0 only). Below the capacity it
 *        adds one. At or above it (seen by a relaxed load) it leaves the count alone: the insert
 *        owes a victim and swaps it for the new entry, so the count would only go up and down
 *        again. That keeps a full cache's inserts, all of which evict, off the one shared word's
 *        read-modify-write (two atomics per insert on one line, which measured a third of the
 *        insert's time with 2 CPU threads). settle_live() adds the one an insert that then
 *        finds no victim owes.
 * @return the count before; @p swapped tells whether nothing was added
 */
CCHT_HOST_DEVICE CCHT_FORCEINLINE std::uint64_t reserve_live(std::uint64_t* live,
                                                             std::uint64_t capacity,
                                                             bool& swapped) noexcept {
  std::uint64_t const seen = load_relaxed(*live);
  swapped = seen >= capacity;
  return swapped ? seen : add_live(live, 1);
}

/// Settles a new entry's place in the live count once its insert knows whether it evicted
/// (lane 0): net +1 for the entry, -1 for the victim, less what reserve_live() already added.
CCHT_HOST_DEVICE CCHT_FORCEINLINE void settle_live(std::uint64_t* live, bool swapped,
                                                   bool evicted) noexcept {
  if (evicted && !swapped) { (void)add_live(live, -1); }
  if (!evicted && swapped) { (void)add_live(live, 1); }
}

/// Whether insert hook @p Hook lets an insert repay its overshoot (see upsert_hook).
template <class Hook>
inline constexpr bool repays_overshoot_v = requires { requires Hook::repays_overshoot; };

/// Most victim searches repay_overshoot() makes before it leaves the overshoot to erases.
inline constexpr int max_repay_attempts = 16;

/**
 * @brief Repays an insert's overshoot: the insert went in above the capacity because every
 *        victim's bucket was busy while it held its own two. Holding no lock now, it searches
 *        again (try-locks still, so it never waits on a bucket) and evicts one victim, until the
 *        live count is within the capacity, another writer repaid it, or max_repay_attempts
 *        searches found nothing. The victim is never @p self, the key just inserted.
 * @return true with the evicted pair in @p ek / @p ev (every lane)
 */
template <global_layer G, class Tile, int B>
CCHT_HOST_DEVICE bool repay_overshoot(Tile const& tile, bucket_array_view<B> const& v,
                                      tick_type tick, key_type self, key_type& ek,
                                      value_type& ev, access_counts* acc) noexcept {
  constexpr std::uint32_t none = ~std::uint32_t{0};
  for (int attempt = 0; attempt < max_repay_attempts; ++attempt) {
    std::uint64_t live = 0;
    if (tile.thread_rank() == 0) { live = load_relaxed(*v.live); }
    if (tile.shfl(live, 0) <= v.capacity) { return false; }
    global_victim gv;
    if (!lock_global_victim<G>(tile, v, tick, none, none, gv, acc)) { continue; }
    bool const is_self = load_relaxed(v.buckets[gv.bucket].keys[gv.slot]) == self;
    if (is_self ||
        (v.optimistic_pins && !claim_score(tile, v.buckets[gv.bucket].scores[gv.slot]))) {
      release_victim(tile, v, gv);
      if (is_self) { return false; }  // the only evictable entry in reach: leave it
      continue;
    }
    take_victim(tile, v, gv, tick, ek, ev, acc);
    release_victim(tile, v, gv);
    if (tile.thread_rank() == 0) { add_live(v.live, -1); }
    return true;
  }
  return false;
}

}  // namespace ccht::detail
