// CPU backend of ccht::table: the core's one-thread path over batches, on OpenMP threads.
//
// Batches are cut into chunks. Each chunk runs in index order on one thread with a software
// prefetch pipeline: that memory-level parallelism is what a one-key-at-a-time map cannot have.
// While element i runs, stages for elements i + 3 * lead, i + 2 * lead and i + lead prefetch what
// each will read, as soon as it is known:
//   lookups: stage 1 hashes the key and requests its first bucket's version and keys; stage 2
//     peeks at those keys (relaxed loads, no lock, only a hint) and requests the hit's value and
//     score lines, or on a miss the second bucket's version and keys; stage 3 does the same peek
//     in the second bucket when the first had no match.
//   upserts and erases: stage 2 requests both versions, both buckets' keys and (upserts) both
//     buckets' scores; stage 3 (upserts) both buckets' value lines.
// The core then runs on lines already in cache. Peeks change nothing in the table.
// Evictions are buffered per chunk and appended with one atomic add per chunk, so a full table
// (every insert evicts) has no shared counter on its hot path.
// On Linux the bucket array is backed by transparent huge pages where the system allows it
// (madvise): random probes over a table larger than the TLB's reach otherwise pay a page walk
// (a two-dimensional one under virtualisation) on almost every access.
#include <ccht/core/bucket_ops.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/detail/launcher.hpp>
#include <ccht/detail/validate.hpp>
#include <ccht/policy_list.hpp>

#include "cpu_tile.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <utility>
#include <vector>

#if CCHT_WITH_OPENMP
#include <omp.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace ccht::detail {
namespace {

using cpu_launcher = launcher<cpu_backend>;
constexpr int B = default_bucket_size;
constexpr std::size_t chunk = 2048;
/// Elements between pipeline stages (see the top of the file). A stage peeks at lines requested
/// `lead` elements earlier, so lead x (time per element) must cover a DRAM miss; 8 does on the
/// development machines (4, 12 and 16 measured no better), with up to 14 lines requested per
/// upsert and 8 per lookup.
constexpr std::size_t lead = 8;
/// Ring of per-element pipeline state (at least 3 * lead + 1 entries).
constexpr std::size_t ring_size = 32;
static_assert(ring_size > 3 * lead && (ring_size & (ring_size - 1)) == 0);

using bucket_t = bucket<B>;

/// Marks a lambda always-inline (see pipelined()).
#define CCHT_FORCEINLINE_LAMBDA __attribute__((always_inline))

// Prefetches go to L2 (locality 2: prefetcht1 on x86), not L1. A prefetch into L1 holds one of the
// core's few L1 miss buffers for the whole DRAM round trip, and the pipeline keeps 30-110 lines in
// flight; into L2 it does not, and the core's later load then hits L2. Measured on the
// development machines (AMD EPYC, 2 threads, 2^22 slots): lru find +15-20%, upsert +5-10%.
CCHT_FORCEINLINE void prefetch_read(void const* p) { __builtin_prefetch(p, 0, 2); }
CCHT_FORCEINLINE void prefetch_write(void const* p) { __builtin_prefetch(p, 1, 2); }

/// Prefetches a 128-byte array of a bucket (keys, values or scores): two host cache lines.
template <class T>
CCHT_FORCEINLINE void prefetch_line_pair(T const* first, bool write) {
  static_assert(B * sizeof(T) == 128, "a bucket's array is one 128-byte line");
  auto const* p = reinterpret_cast<char const*>(first);
  if (write) {
    prefetch_write(p);
    prefetch_write(p + 64);
  } else {
    prefetch_read(p);
    prefetch_read(p + 64);
  }
}

/**
 * Runs body(i) for i in [b, e) in order, with stage1(i + 3 * lead), stage2(i + 2 * lead) and
 * stage3(i + lead) issued before body(i). Every stage function must be always-inline: GCC's IPA
 * treats a function whose only effects are prefetches as pure and deletes calls to it.
 */
template <class Stage1, class Stage2, class Stage3, class Body>
CCHT_FORCEINLINE void pipelined(std::size_t b, std::size_t e, Stage1&& stage1, Stage2&& stage2,
                                Stage3&& stage3, Body&& body) {
  if (e - b == 1) {  // nothing to overlap with: the stages would only repeat the body's reads
    body(b);
    return;
  }
  for (std::size_t i = b; i < std::min(e, b + 3 * lead); ++i) { stage1(i); }
  for (std::size_t i = b; i < std::min(e, b + 2 * lead); ++i) { stage2(i); }
  for (std::size_t i = b; i < std::min(e, b + lead); ++i) { stage3(i); }
  for (std::size_t i = b; i < e; ++i) {
    if (i + 3 * lead < e) { stage1(i + 3 * lead); }
    if (i + 2 * lead < e) { stage2(i + 2 * lead); }
    if (i + lead < e) { stage3(i + lead); }
    body(i);
  }
}

/// What the stages of one element pass on to the next (one ring entry per element in flight).
struct stage_state {
  candidate_buckets cb;
  bool probe_second;  ///< a lookup's key was not in the first bucket when stage 2 peeked
  std::uint32_t tail_first[max_tail_lines];  ///< an upsert's tail-index lines (first buckets)
};

/// Per-chunk prefetch pipeline over the elements' keys; stage_* are called with the index of the
/// element they prepare.
template <bool Promotes>
struct prefetcher {
  bucket_array_view<B> v;
  key_type const* keys;
  tick_type base = 0;  ///< tick of element 0 (the tail index's draws depend on it)
  /// Left uninitialised: every stage writes an element's entry before a later one reads it, and
  /// zeroing 1 KiB per call measured 1.4% of a batch-1 upsert.
  stage_state ring[ring_size];
  /// Whether this chunk's upserts evict through the tail index: the table was at capacity when
  /// the chunk started (read once; it only decides which hints to issue).
  bool evicting = v.tails != nullptr && load_relaxed(*v.live) >= v.capacity;

  prefetcher(bucket_array_view<B> const& view, key_type const* k, tick_type b)
      : v(view), keys(k), base(b) {}

  CCHT_FORCEINLINE stage_state& at(std::size_t i) { return ring[i % ring_size]; }

  /// Peeks at bucket @p bi for key i (relaxed loads, a hint only); on a hit prefetches the
  /// slot's value line and, when hits promote, its score line.
  CCHT_FORCEINLINE bool peek(std::uint32_t bi, std::size_t i) {
    bucket_t const& bk = v.buckets[bi];
    int const slot = find_slot(scalar_tile{}, bk, keys[i]);
    if (slot < 0) { return false; }
    prefetch_read(&bk.values[slot]);
    if constexpr (Promotes) { prefetch_write(&bk.scores[slot]); }
    return true;
  }

  // ---- lookups (find, contains): stages 1, 2, 3
  /// The candidates, and the first bucket's version and keys.
  CCHT_FORCEINLINE void lookup1(std::size_t i) {
    candidate_buckets const cb = candidates(keys[i], v.seed, v.num_buckets);
    at(i).cb = cb;
    prefetch_read(&v.versions[cb.first]);
    prefetch_line_pair(v.buckets[cb.first].keys, false);
  }
  /// A hit in the first bucket: its value (and score); else the second bucket's version and keys.
  CCHT_FORCEINLINE void lookup2(std::size_t i) {
    stage_state& st = at(i);
    st.probe_second = !peek(st.cb.first, i);
    if (st.probe_second) {
      prefetch_read(&v.versions[st.cb.second]);
      prefetch_line_pair(v.buckets[st.cb.second].keys, false);
    }
  }
  /// A hit in the second bucket: its value (and score). Half the hits of a full table are there.
  CCHT_FORCEINLINE void lookup3(std::size_t i) {
    if (at(i).probe_second) { (void)peek(at(i).cb.second, i); }
  }

  // ---- updates (upsert, erase): stages 2 and 3 only, so their lines are not held longer
  /// The candidates; both versions and both buckets' keys, and for an upsert both buckets' scores
  /// (read when both buckets are full, which is a full cache's steady state).
  CCHT_FORCEINLINE void update2(std::size_t i, bool upsert) {
    candidate_buckets const cb = candidates(keys[i], v.seed, v.num_buckets);
    at(i).cb = cb;
    for (std::uint32_t bi : {cb.first, cb.second}) {
      prefetch_write(&v.versions[bi]);
      prefetch_line_pair(v.buckets[bi].keys, true);
      if (upsert) { prefetch_line_pair(v.buckets[bi].scores, true); }
    }
  }
  /// An upsert: both buckets' value lines. It writes one value (and reads it back when it evicts)
  /// in a slot known only after the keys and scores are compared; predicting that slot here would
  /// repeat most of the upsert's own work, which measured slower than two extra lines.
  CCHT_FORCEINLINE void upsert3(std::size_t i) {
    prefetch_line_pair(v.buckets[at(i).cb.first].values, true);
    prefetch_line_pair(v.buckets[at(i).cb.second].values, true);
  }

  // ---- the tail index (double LRU, LRU-CHT) at capacity: an upsert of a new key searches it
  /// Stage 1: the tail-index lines element i's eviction would read first.
  CCHT_FORCEINLINE void tails1(std::size_t i) {
    if (!evicting) { return; }
    if (v.upper != nullptr) {  // two-level: the window's upper words
      std::uint32_t const start = upper_window(v, base + i, 0);
      std::uint32_t const lines = tail_index_lines(v.num_buckets);
      at(i).tail_first[0] = start;
      for (std::uint32_t j = 0; j < upper_window_lines(v); j += 8) {
        prefetch_read(&v.upper[wrap_line(start, j, lines)]);
      }
      return;
    }
    for (std::uint32_t l = 0; l < tail_lines_for(v.samples); ++l) {
      std::uint32_t const first = tail_line(v, base + i, l);
      at(i).tail_first[l] = first;
      prefetch_read(&v.tails[first]);
      prefetch_read(&v.tails[first] + 8);
    }
  }
  /// Stage 2: the likely victim, the bucket with the smallest word on the lines of stage 1 (a
  /// hint: the search itself verifies under the lock).
  CCHT_FORCEINLINE void tails2(std::size_t i) {
    if (!evicting) { return; }
    if (v.upper != nullptr) {  // two-level: the line the search will descend into
      std::uint32_t const lines = tail_index_lines(v.num_buckets);
      std::uint32_t const start = at(i).tail_first[0];
      score_type best = no_rank;
      std::uint32_t line = 0;
      for (std::uint32_t j = 0; j < upper_window_lines(v); ++j) {
        std::uint32_t const l = wrap_line(start, j, lines);
        score_type const w = load_relaxed(v.upper[l]);
        if (w < best) {
          best = w;
          line = l;
        }
      }
      if (best == no_rank) { return; }
      prefetch_read(&v.tails[line * tail_line_buckets]);
      prefetch_read(&v.tails[line * tail_line_buckets] + 8);
      return;
    }
    score_type best = no_rank;
    std::uint32_t victim = 0;
    for (std::uint32_t l = 0; l < tail_lines_for(v.samples); ++l) {
      std::uint32_t const first = at(i).tail_first[l];
      for (std::uint32_t b = first; b < first + tail_line_buckets && b < v.num_buckets; ++b) {
        score_type const w = load_relaxed(v.tails[b]);
        if (w < best) {
          best = w;
          victim = b;
        }
      }
    }
    if (best == no_rank) { return; }
    prefetch_write(&v.versions[victim]);
    prefetch_line_pair(v.buckets[victim].keys, true);
    prefetch_line_pair(v.buckets[victim].scores, false);
  }
};

/// Runs f(begin, end) over [0, n) in chunks; in parallel when there is more than one chunk.
template <class F>
void for_each_chunk(std::size_t n, int threads, F&& f) {
#if CCHT_WITH_OPENMP
  std::size_t const nchunks = (n + chunk - 1) / chunk;
  int const nt = threads > 0 ? threads : omp_get_max_threads();
  if (nchunks > 1 && nt > 1) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (std::size_t c = 0; c < nchunks; ++c) { f(c * chunk, std::min(n, (c + 1) * chunk)); }
    return;
  }
#else
  (void)threads;
#endif
  for (std::size_t b = 0; b < n; b += chunk) { f(b, std::min(n, b + chunk)); }
}

/// Per-chunk eviction buffer, flushed into the caller's output with one atomic add.
struct eviction_buffer {
  key_type keys[chunk];
  value_type values[chunk];
  std::size_t n = 0;  // the arrays are left uninitialised (make_unique_for_overwrite)

  void push(key_type k, value_type v) {
    keys[n] = k;
    values[n] = v;
    ++n;
  }
  void flush(key_type* out_keys, value_type* out_values, std::size_t* counter) {
    if (n == 0) { return; }
    std::size_t const at = std::atomic_ref<std::size_t>(*counter).fetch_add(n);
    std::memcpy(out_keys + at, keys, n * sizeof(key_type));
    std::memcpy(out_values + at, values, n * sizeof(value_type));
    n = 0;
  }
};

tick_type reserve_ticks(tick_type* clock, std::size_t n) {
  return std::atomic_ref<tick_type>(*clock).fetch_add(n, std::memory_order_relaxed) + 1;
}

template <class Policy>
using ops_t = bucket_ops<Policy, B>;


/// Asks for transparent huge pages on the 2 MiB-aligned part of [p, p + bytes), before the pages
/// are first touched. Only a hint: it is skipped for small tables, and failure is harmless.
void advise_huge_pages(void* p, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t huge = std::uintptr_t{2} << 20;
  auto const begin = (reinterpret_cast<std::uintptr_t>(p) + huge - 1) & ~(huge - 1);
  auto const end = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~(huge - 1);
  if (end >= begin + 2 * huge) { (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE); }
#else
  (void)p;
  (void)bytes;
#endif
}

/// Adds a chunk's access counts to the table's counters.
void add_counts(access_counts* total, access_counts const& c) {
  if (total == nullptr) { return; }
  std::atomic_ref<std::uint64_t>(total->bucket_reads).fetch_add(c.bucket_reads, std::memory_order_relaxed);
  std::atomic_ref<std::uint64_t>(total->bucket_writes).fetch_add(c.bucket_writes, std::memory_order_relaxed);
  std::atomic_ref<std::uint64_t>(total->bytes_read).fetch_add(c.bytes_read, std::memory_order_relaxed);
  std::atomic_ref<std::uint64_t>(total->bytes_written).fetch_add(c.bytes_written, std::memory_order_relaxed);
  std::atomic_ref<std::uint64_t>(total->kicks).fetch_add(c.kicks, std::memory_order_relaxed);
  std::atomic_ref<std::uint64_t>(total->chosen_victims).fetch_add(c.chosen_victims, std::memory_order_relaxed);
}

// ---- bulk victim select (table_options::bulk_victim_select) ------------------------------------
// A bulk insert whose new keys need `need` victims, at least one per bucket, chooses the `need`
// oldest evictable entries in two passes over the table instead of `need` global searches:
// pass 1 builds a histogram of their scores (select_bins bins over [lowest tail word, base)),
// from every bucket of a small table and from a sample of a large one; pass 2 collects, in
// bucket order, every entry up to the bin where the count reaches `need`, and a small table
// keeps the `need` oldest of them (exact), a large one all (about 3% more than `need`). Both
// passes read the buckets in order (streamed, not missed), and the victims of one bucket are
// taken one after another while its lines are still cached.

/// Victims per bucket from which a bulk insert chooses them in one pass: below it the two
/// passes (two reads of every bucket) would cost more than the searches they replace.
constexpr std::size_t select_min_victims_per_bucket = 1;
constexpr int select_bin_bits = 16;
constexpr std::size_t select_bins = std::size_t{1} << select_bin_bits;
/// Buckets pass 1 reads at most (every stride-th): its histogram only places the cut, and
/// 2^14 buckets (2^18 slots) place it within about a percent.
constexpr std::uint32_t select_sampled_buckets = 1u << 14;

/// Victims chosen before a batch's inserts need them, ready for the chunk's hook.
using victim_list = std::vector<victim_candidate>;

/// Whether the bucket's slot holds an entry the global layer may evict: present, unpinned and
/// not being removed (relaxed loads: the choice is a hint, verified under the lock).
CCHT_FORCEINLINE bool evictable(bucket_t const& bk, int slot, score_type& score) {
  if (load_relaxed(bk.keys[slot]) == empty_key) { return false; }
  score = load_relaxed(bk.scores[slot]);
  return !is_pinned_score(score);  // claimed_score is pinned too
}

/// Runs f(thread, first bucket, end bucket) over contiguous ranges of the buckets, one per
/// thread, so that concatenating per-thread results in thread order keeps bucket order.
template <class F>
void for_each_bucket_range(std::uint32_t num_buckets, int nt, F&& f) {
  auto range = [&](int t) {
    auto const lo = static_cast<std::uint32_t>(std::uint64_t{num_buckets} * t / nt);
    auto const hi = static_cast<std::uint32_t>(std::uint64_t{num_buckets} * (t + 1) / nt);
    f(t, lo, hi);
  };
#if CCHT_WITH_OPENMP
  if (nt > 1) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < nt; ++t) { range(t); }
    return;
  }
#endif
  range(0);
}

/**
 * Chooses the @p need oldest evictable entries of the table (fewer if it holds fewer, or if the
 * sampled histogram underestimated them), in bucket order. Scores at or above @p base
 * (concurrent inserts) fall in the last bin.
 */
victim_list select_victims(table_state const& s, std::size_t need, tick_type base) {
  auto const& v = s.view;
  // Every evictable score is at least its bucket's tail word (a lower bound): bins start there.
  score_type lo = 0;
  if (v.tails != nullptr) {
    score_type m = no_rank;
    if (v.upper != nullptr) {
      for (std::uint32_t l = 0; l < tail_index_lines(v.num_buckets); ++l) {
        m = std::min(m, load_relaxed(v.upper[l]));
      }
    } else {
      for (std::uint32_t b = 0; b < v.num_buckets; ++b) { m = std::min(m, load_relaxed(v.tails[b])); }
    }
    lo = m < base ? m : 0;
  }
  score_type const span = base > lo ? base - lo : 1;
  int const width = std::bit_width(span);
  int const shift = width > select_bin_bits ? width - select_bin_bits : 0;
  auto bin = [&](score_type sc) -> std::size_t {
    std::size_t const k = sc < lo ? 0 : static_cast<std::size_t>((sc - lo) >> shift);
    return k < select_bins ? k : select_bins - 1;
  };
#if CCHT_WITH_OPENMP
  int const nt = std::max(1, std::min(s.cpu_threads > 0 ? s.cpu_threads : omp_get_max_threads(),
                                       static_cast<int>(v.num_buckets / 1024) + 1));
#else
  int const nt = 1;
#endif
  access_counts* const counts = s.counts;
  // Pass 1: the histogram of every stride-th bucket (every bucket of a small table, so that
  // the choice is exact there).
  std::uint32_t const stride = std::max<std::uint32_t>(1, v.num_buckets / select_sampled_buckets);
  std::vector<std::uint64_t> hist(select_bins, 0);
  access_counts sampled;  // the table's counters are shared: added atomically below
  for (std::uint32_t b = 0; b < v.num_buckets; b += stride) {
    bucket_t const& bk = v.buckets[b];
    count_probe<B>(&sampled);
    count_scores<B>(&sampled);
    for (int i = 0; i < B; ++i) {
      score_type sc;
      if (evictable(bk, i, sc)) { ++hist[bin(sc)]; }
    }
  }
  add_counts(counts, sampled);
  // The cut: the first bin where the estimated count reaches `need` (with a margin when
  // sampled); pass 2 takes every entry up to it, then keeps the `need` oldest.
  std::uint64_t const want = stride == 1 ? need : need + need / 32 + 64 * std::uint64_t{stride};
  std::size_t cut = 0;
  for (std::uint64_t seen = 0; cut < select_bins - 1; ++cut) {
    seen += hist[cut] * stride;
    if (seen >= want) { break; }
  }
  // bin(sc) <= cut, for an evictable score: one compare (pinned scores are at least pin_one).
  score_type const limit =
      cut == select_bins - 1 ? pin_one
                             : std::min<score_type>(pin_one, lo + (score_type{cut + 1} << shift));
  // Pass 2: collect, per thread and in bucket order, what is at or below the cut.
  std::vector<victim_list> found(nt);
  for_each_bucket_range(v.num_buckets, nt, [&](int t, std::uint32_t b0, std::uint32_t b1) {
    access_counts c;
    victim_list& out = found[t];
    out.reserve(want / nt + want / (8 * nt) + 16);
    for (std::uint32_t b = b0; b < b1; ++b) {
      bucket_t const& bk = v.buckets[b];
      if (counts != nullptr) {
        count_probe<B>(&c);
        count_scores<B>(&c);
      }
      for (int i = 0; i < B; ++i) {
        score_type const sc = load_relaxed(bk.scores[i]);
        if (sc < limit && load_relaxed(bk.keys[i]) != empty_key) {
          out.push_back({b, static_cast<std::uint32_t>(i), sc});
        }
      }
    }
    add_counts(counts, c);
  });
  victim_list all;
  if (nt == 1) {
    all = std::move(found[0]);
  } else {
    std::size_t total = 0;
    for (auto const& l : found) { total += l.size(); }
    all.reserve(total);
    for (auto& l : found) {
      all.insert(all.end(), l.begin(), l.end());
      victim_list{}.swap(l);
    }
  }
  // Exact (stride 1): the `need` oldest (scores are unique ticks), still in bucket order. Sampled:
  // all of them, about `want` (a full sort of a million scores measured a third of the choice).
  if (stride == 1 && all.size() > need) {
    std::vector<score_type> sc(all.size());
    for (std::size_t i = 0; i < all.size(); ++i) { sc[i] = all[i].score; }
    std::nth_element(sc.begin(), sc.begin() + static_cast<std::ptrdiff_t>(need - 1), sc.end());
    score_type const limit = sc[need - 1];
    std::erase_if(all, [&](victim_candidate const& c) { return c.score > limit; });
  }
  return all;
}

/// Keys of a batch looked up to estimate how many of its upserts insert new keys.
constexpr std::size_t select_probe_keys = 256;

/**
 * The upserts of a batch of @p n (all of them, or those whose @p ops entry is an upsert) that
 * insert a key absent from the table, estimated from up to select_probe_keys evenly spaced
 * upserts (relaxed peeks, no lock, nothing changed). Assignments need no victim: a batch of
 * them must not pay for a choice.
 */
std::size_t estimate_new_keys(table_state const& s, key_type const* keys, op_code const* ops,
                              std::size_t n) {
  auto const& v = s.view;
  std::size_t const upserts =
      ops == nullptr ? n : static_cast<std::size_t>(std::count(ops, ops + n, op_code::insert_or_assign));
  if (upserts == 0) { return 0; }
  std::size_t const step = std::max<std::size_t>(1, n / select_probe_keys);
  std::size_t probed = 0, absent = 0;
  for (std::size_t i = 0; i < n; i += step) {
    if (ops != nullptr && ops[i] != op_code::insert_or_assign) { continue; }
    candidate_buckets const cb = candidates(keys[i], v.seed, v.num_buckets);
    ++probed;
    absent += find_slot(scalar_tile{}, v.buckets[cb.first], keys[i]) < 0 &&
              find_slot(scalar_tile{}, v.buckets[cb.second], keys[i]) < 0;
  }
  if (probed == 0) { return upserts; }  // none sampled: assume every upsert inserts
  return static_cast<std::size_t>((static_cast<unsigned __int128>(upserts) * absent + probed - 1) / probed);
}

/// Chooses a batch's victims when its new keys (estimate_new_keys) need at least
/// select_min_victims_per_bucket per bucket (the live count read once: a hint, the inserts
/// settle the count exactly). @p ops is null for insert_or_assign().
victim_list victims_for_batch(table_state const& s, key_type const* keys, op_code const* ops,
                              std::size_t n, tick_type base) {
  if (!s.bulk_select || n < s.view.num_buckets * select_min_victims_per_bucket) { return {}; }
  std::uint64_t const live = load_relaxed(*s.view.live);
  std::size_t const new_keys = estimate_new_keys(s, keys, ops, n);
  if (live + new_keys <= s.view.capacity) { return {}; }
  std::size_t const need =
      std::min<std::uint64_t>(new_keys, live + new_keys - s.view.capacity);
  if (need < select_min_victims_per_bucket * s.view.num_buckets) { return {}; }
  try {  // about 16 bytes per victim: without them the inserts search, as they would anyway
    return select_victims(s, need, base);
  } catch (std::bad_alloc const&) {
    return {};
  }
}

/**
 * Insert hook of a chunk whose batch chose its victims: the plain upsert, plus the chunk's
 * share of the chosen victims, in bucket order (detail::evict_supplied takes them).
 */
struct chosen_victims_hook : upsert_hook {
  static constexpr bool supplies_victims = true;
  bucket_array_view<B> const* v = nullptr;
  victim_candidate const* next = nullptr;
  victim_candidate const* end = nullptr;

  /// Victims ahead of the one handed out whose lines are requested (an insert's time covers
  /// a DRAM round trip).
  static constexpr std::ptrdiff_t ahead = 4;

  bool next_victim(victim_candidate& c) {
    if (next == end) { return false; }
    c = *next++;
    if (end - next > ahead) {
      victim_candidate const& p = next[ahead];
      bucket_t const& bk = v->buckets[p.bucket];
      prefetch_write(&v->versions[p.bucket]);
      prefetch_line_pair(bk.keys, true);
      prefetch_line_pair(bk.scores, true);
      prefetch_read(&bk.values[p.slot]);
    }
    return true;
  }
  bool next_in_bucket(std::uint32_t bucket) const { return next != end && next->bucket == bucket; }
};

/// The hook of elements [b, e) of a batch of @p n: their share of @p chosen, proportional to
/// their number (empty when the batch chose nothing: its inserts then search).
chosen_victims_hook hook_for(bucket_array_view<B> const& v, victim_list const& chosen,
                             std::size_t b, std::size_t e, std::size_t n) {
  auto const at = [&](std::size_t i) {
    return chosen.data() + static_cast<std::ptrdiff_t>(
                               static_cast<unsigned __int128>(chosen.size()) * i / n);
  };
  chosen_victims_hook hook;
  hook.v = &v;
  hook.next = at(b);
  hook.end = at(e);
  return hook;
}

/// What one upsert returns on every lane of its tile.
struct upsert_result {
  op_status status;
  key_type evicted_key;
  value_type evicted_value;
  bool operator==(upsert_result const&) const = default;
};

/// One upsert of a bulk call: double LRU through @p hook (whose victims it tries before any
/// search), other policies the plain insert_or_assign.
template <class Policy>
CCHT_FORCEINLINE upsert_result upsert(bucket_array_view<B> const& v, key_type key,
                                      value_type value, tick_type tick,
                                      chosen_victims_hook& hook, access_counts* acc) {
  return on_cpu_tile(acc, [&](auto const& tile, access_counts* a) CCHT_FORCEINLINE_LAMBDA {
    upsert_result r{op_status::inserted, 0, 0};
    value_type val = value;  // in-out for insert_with: each lane has its own
    if constexpr (Policy::global == global_layer::entry_lru && !Policy::kick_out) {
      r.status = ops_t<Policy>::insert_with(tile, v, key, val, tick, r.evicted_key,
                                            r.evicted_value, hook, a);
    } else {
      r.status = ops_t<Policy>::insert_or_assign(tile, v, key, val, tick, r.evicted_key,
                                                 r.evicted_value, a);
    }
    return r;
  });
}

/// One find on the backend's tile: whether it hit, and the value (0 on a miss).
template <class Policy>
CCHT_FORCEINLINE std::pair<bool, value_type> find_one(bucket_array_view<B> const& v, key_type key,
                                                      tick_type tick, access_counts* acc) {
  return on_cpu_tile(acc, [&](auto const& tile, access_counts* a) CCHT_FORCEINLINE_LAMBDA {
    value_type val = 0;
    bool const hit = ops_t<Policy>::find(tile, v, key, tick, val, a);
    return std::pair<bool, value_type>{hit, hit ? val : 0};
  });
}

/// One contains on the backend's tile.
CCHT_FORCEINLINE bool contains_one(bucket_array_view<B> const& v, key_type key, access_counts* acc) {
  return on_cpu_tile(acc, [&](auto const& tile, access_counts* a) CCHT_FORCEINLINE_LAMBDA {
    return ops_t<lru>::contains(tile, v, key, a);
  });
}

/// One erase on the backend's tile.
CCHT_FORCEINLINE bool erase_one(bucket_array_view<B> const& v, key_type key, access_counts* acc) {
  return on_cpu_tile(acc, [&](auto const& tile, access_counts* a) CCHT_FORCEINLINE_LAMBDA {
    return ops_t<lru>::erase(tile, v, key, a);
  });
}

}  // namespace

void cpu_launcher::create(table_state& s, std::uint32_t num_buckets, std::uint64_t seed,
                          bool count_accesses) {
  s.view.num_buckets = num_buckets;
  s.view.seed = seed;
  try {
    s.view.buckets = static_cast<bucket<B>*>(
        cpu_backend::allocate(std::size_t{num_buckets} * sizeof(bucket<B>)));
    s.view.versions = static_cast<std::uint32_t*>(
        cpu_backend::allocate(std::size_t{num_buckets} * sizeof(std::uint32_t)));
    s.clock = static_cast<tick_type*>(cpu_backend::allocate(sizeof(tick_type)));
    if (s.view.capacity != 0) {
      // The own-first search's victim age is on the next 128-byte line: it is written on every
      // global victim, and the live word, read by every insert, is written only below the
      // capacity (reserve_live), so sharing a line would make each of those reads miss.
      constexpr std::size_t line_words = 128 / sizeof(std::uint64_t);
      s.view.live = static_cast<std::uint64_t*>(
          cpu_backend::allocate(2 * line_words * sizeof(std::uint64_t)));
      std::fill(s.view.live, s.view.live + 2 * line_words, std::uint64_t{0});
      if (s.own_first) { s.view.victim_age = s.view.live + line_words; }
    }
    if (s.tail_index) {  // the upper level (two-level index) follows the tails
      std::size_t const words =
          std::size_t{num_buckets} + (s.upper_index ? tail_index_lines(num_buckets) : 0);
      s.view.tails = static_cast<score_type*>(cpu_backend::allocate(words * sizeof(score_type)));
      std::fill(s.view.tails, s.view.tails + words, no_rank);
      if (s.upper_index) { s.view.upper = s.view.tails + num_buckets; }
    }
    if (count_accesses) {
      s.counts = static_cast<access_counts*>(cpu_backend::allocate(sizeof(access_counts)));
      *s.counts = {};
    }
  } catch (...) {
    destroy(s);
    throw;
  }
  advise_huge_pages(s.view.buckets, std::size_t{num_buckets} * sizeof(bucket<B>));
  for (std::uint32_t b = 0; b < num_buckets; ++b) {
    auto& bk = s.view.buckets[b];
    std::fill(std::begin(bk.keys), std::end(bk.keys), empty_key);
    std::fill(std::begin(bk.values), std::end(bk.values), value_type{0});
    std::fill(std::begin(bk.scores), std::end(bk.scores), score_type{0});
  }
  std::memset(s.view.versions, 0, std::size_t{num_buckets} * sizeof(std::uint32_t));
  *s.clock = 0;
}

void cpu_launcher::destroy(table_state& s) noexcept {
  cpu_backend::deallocate(s.view.buckets);
  cpu_backend::deallocate(s.view.versions);
  cpu_backend::deallocate(s.clock);
  cpu_backend::deallocate(s.view.live);
  cpu_backend::deallocate(s.view.tails);
  cpu_backend::deallocate(s.counts);
  s = {};
}

access_counts cpu_launcher::read_counts(table_state const& s) {
  return s.counts != nullptr ? *s.counts : access_counts{};
}

void cpu_launcher::reset_counts(table_state const& s) {
  if (s.counts != nullptr) { *s.counts = {}; }
}

std::size_t cpu_launcher::size(table_state const& s, stream_type) {
  std::size_t n = 0;
  for (std::uint32_t b = 0; b < s.view.num_buckets; ++b) {
    for (key_type const& k : s.view.buckets[b].keys) { n += load_relaxed(k) != empty_key; }
  }
  return n;
}

void cpu_launcher::clear(table_state const& s, stream_type) {
  for (std::uint32_t b = 0; b < s.view.num_buckets; ++b) {
    std::uint32_t const v = lock_bucket(s.view.versions[b]);
    fence_release();
    std::int64_t removed = 0;
    for (key_type& k : s.view.buckets[b].keys) {
      removed += load_relaxed(k) != empty_key;
      store_relaxed(k, empty_key);
    }
    if (s.view.live != nullptr && removed != 0) { add_live(s.view.live, -removed); }
    if (s.view.tails != nullptr) { store_relaxed(s.view.tails[b], no_rank); }  // empty now
    store_release(s.view.versions[b], v + 1);
  }
  if (s.view.victim_age != nullptr) { store_relaxed(*s.view.victim_age, score_type{0}); }
}

template <class Policy>
void cpu_launcher::find(table_state const& s, key_type const* keys, value_type* values,
                        bool* found, std::size_t n, std::size_t*, stream_type) {
  check_keys_host({keys, n}, "find");
  tick_type const base = reserve_ticks(s.clock, n);
  auto const v = s.view;
  for_each_chunk(n, s.cpu_threads, [&](std::size_t b, std::size_t e) {
    prefetcher<Policy::promotes_on_hit> pf{v, keys, base};
    access_counts c;
    access_counts* const acc = s.counts ? &c : nullptr;
    pipelined(
        b, e, [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA { pf.lookup1(i); },
        [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA { pf.lookup2(i); },
        [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA { pf.lookup3(i); },
        [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA {
          auto const [hit, val] = find_one<Policy>(v, keys[i], base + i, acc);
          found[i] = hit;
          if (hit) { values[i] = val; }
        });
    add_counts(s.counts, c);
  });
}

void cpu_launcher::contains(table_state const& s, key_type const* keys, bool* found, std::size_t n,
                            std::size_t*, stream_type) {
  check_keys_host({keys, n}, "contains");
  auto const v = s.view;
  for_each_chunk(n, s.cpu_threads, [&](std::size_t b, std::size_t e) {
    prefetcher<false> pf{v, keys, 0};
    access_counts c;
    access_counts* const acc = s.counts ? &c : nullptr;
    pipelined(
        b, e, [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA { pf.lookup1(i); },
        [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA { pf.lookup2(i); },
        [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA { pf.lookup3(i); },
        [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA {
          found[i] = contains_one(v, keys[i], acc);
        });
    add_counts(s.counts, c);
  });
}

template <class Policy>
void cpu_launcher::insert_or_assign(table_state const& s, key_type const* keys,
                                    value_type const* values, std::size_t n,
                                    key_type* evicted_keys, value_type* evicted_values,
                                    std::size_t* num_evicted, std::size_t*, stream_type) {
  check_keys_host({keys, n}, "insert_or_assign");
  *num_evicted = 0;
  if (n == 0) { return; }
  tick_type const base = reserve_ticks(s.clock, n);
  auto const v = s.view;
  victim_list const chosen = victims_for_batch(s, keys, nullptr, n, base);
  for_each_chunk(n, s.cpu_threads, [&](std::size_t b, std::size_t e) {
    auto buf = std::make_unique_for_overwrite<eviction_buffer>();
    prefetcher<Policy::promotes_on_hit> pf{v, keys, base};
    chosen_victims_hook hook = hook_for(v, chosen, b, e, n);
    if (!chosen.empty()) { pf.evicting = false; }  // no searches to prefetch for
    access_counts c;
    access_counts* const acc = s.counts ? &c : nullptr;
    pipelined(
        b, e, [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA { pf.tails1(i); },
        [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA {
          pf.update2(i, true);
          pf.tails2(i);
        },
        [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA { pf.upsert3(i); },
        [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA {
          upsert_result const r = upsert<Policy>(v, keys[i], values[i], base + i, hook, acc);
          if (r.status == op_status::inserted_evicted) { buf->push(r.evicted_key, r.evicted_value); }
        });
    add_counts(s.counts, c);
    buf->flush(evicted_keys, evicted_values, num_evicted);
  });
}

void cpu_launcher::erase(table_state const& s, key_type const* keys, std::size_t n,
                         std::size_t* num_erased, std::size_t*, stream_type) {
  check_keys_host({keys, n}, "erase");
  if (num_erased != nullptr) { *num_erased = 0; }
  if (n == 0) { return; }
  auto const v = s.view;
  for_each_chunk(n, s.cpu_threads, [&](std::size_t b, std::size_t e) {
    std::size_t local = 0;
    prefetcher<false> pf{v, keys, 0};
    access_counts c;
    access_counts* const acc = s.counts ? &c : nullptr;
    pipelined(
        b, e, [](std::size_t) {},
        [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA { pf.update2(i, false); }, [](std::size_t) {},
        [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA {
          local += erase_one(v, keys[i], acc);
        });
    add_counts(s.counts, c);
    if (num_erased != nullptr) { std::atomic_ref<std::size_t>(*num_erased).fetch_add(local); }
  });
}

template <class Policy>
void cpu_launcher::execute(table_state const& s, op_code const* ops, key_type const* keys,
                           value_type const* values, value_type* values_out, op_status* status,
                           std::size_t n, key_type* evicted_keys, value_type* evicted_values,
                           std::size_t* num_evicted, std::size_t*, stream_type) {
  check_ops_host({ops, n}, "execute");
  check_keys_host({keys, n}, "execute");
  *num_evicted = 0;
  if (n == 0) { return; }
  tick_type const base = reserve_ticks(s.clock, n);
  auto const v = s.view;
  victim_list const chosen = victims_for_batch(s, keys, ops, n, base);
  for_each_chunk(n, s.cpu_threads, [&](std::size_t b, std::size_t e) {
    auto buf = std::make_unique_for_overwrite<eviction_buffer>();
    prefetcher<Policy::promotes_on_hit> pf{v, keys, base};
    chosen_victims_hook hook = hook_for(v, chosen, b, e, n);
    if (!chosen.empty()) { pf.evicting = false; }  // no searches to prefetch for
    access_counts c;
    access_counts* const acc = s.counts ? &c : nullptr;
    auto stage1 = [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA {
      if (ops[i] == op_code::find) {
        pf.lookup1(i);
      } else if (ops[i] == op_code::insert_or_assign) {
        pf.tails1(i);
      }
    };
    auto stage2 = [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA {
      if (ops[i] == op_code::find) {
        pf.lookup2(i);
      } else {
        pf.update2(i, ops[i] == op_code::insert_or_assign);
        if (ops[i] == op_code::insert_or_assign) { pf.tails2(i); }
      }
    };
    auto stage3 = [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA {
      if (ops[i] == op_code::find) {
        pf.lookup3(i);
      } else if (ops[i] == op_code::insert_or_assign) {
        pf.upsert3(i);
      }
    };
    pipelined(b, e, stage1, stage2, stage3, [&](std::size_t i) CCHT_FORCEINLINE_LAMBDA {
      switch (ops[i]) {
        case op_code::find: {
          auto const [hit, val] = find_one<Policy>(v, keys[i], base + i, acc);
          if (hit) { values_out[i] = val; }
          status[i] = hit ? op_status::hit : op_status::miss;
          break;
        }
        case op_code::insert_or_assign: {
          upsert_result const r = upsert<Policy>(v, keys[i], values[i], base + i, hook, acc);
          if (r.status == op_status::inserted_evicted) { buf->push(r.evicted_key, r.evicted_value); }
          status[i] = r.status;
          break;
        }
        case op_code::erase:
          status[i] = erase_one(v, keys[i], acc) ? op_status::hit : op_status::miss;
          break;
      }
    });
    add_counts(s.counts, c);
    buf->flush(evicted_keys, evicted_values, num_evicted);
  });
}

std::size_t cpu_launcher::export_entries(table_state const& s, key_type* keys_out,
                                         value_type* values_out, std::size_t capacity,
                                         stream_type) {
  std::size_t count = 0;
  for (std::uint32_t b = 0; b < s.view.num_buckets; ++b) {
    auto const& bk = s.view.buckets[b];
    key_type k[B];
    value_type val[B];
    unsigned spins = 0;
    while (true) {  // optimistic copy of the bucket, validated like a find
      std::uint32_t const v1 = load_acquire(s.view.versions[b]);
      if ((v1 & 1u) == 0) {
        for (int i = 0; i < B; ++i) {
          k[i] = load_relaxed(bk.keys[i]);
          val[i] = load_relaxed(bk.values[i]);
        }
        fence_acquire();
        if (load_relaxed(s.view.versions[b]) == v1) { break; }
      }
      spin_wait(spins);
    }
    for (int i = 0; i < B; ++i) {
      if (k[i] == empty_key) { continue; }
      if (count < capacity) {
        keys_out[count] = k[i];
        values_out[count] = val[i];
      }
      ++count;
    }
  }
  return count;
}

void cpu_launcher::check_async_error(table_state const&, stream_type) {}

cpu_launcher::stream_type cpu_launcher::sync_stream(stream_type stream) noexcept { return stream; }

// One pair of words per host thread, reused by its every synchronous call with the count left
// from the last one, as the CUDA backend's (launcher_cuda.cu, thread_words): a call that does not
// set its count reads the previous call's on both backends, so CI sees what a GPU would.
std::size_t* cpu_launcher::acquire_words(stream_type) {
  thread_local std::size_t words[2] = {0, no_reject};
  return words;
}

void cpu_launcher::release_words(std::size_t* words, std::size_t host[2], stream_type) {
  host[0] = words[0];
  host[1] = words[1];
  words[1] = no_reject;  // the reject word's resting value
}

#define CCHT_INSTANTIATE_CPU(P)                                                                   \
  template void cpu_launcher::find<P>(table_state const&, key_type const*, value_type*, bool*,    \
                                      std::size_t, std::size_t*, stream_type);                    \
  template void cpu_launcher::insert_or_assign<P>(table_state const&, key_type const*,            \
                                                  value_type const*, std::size_t, key_type*,      \
                                                  value_type*, std::size_t*, std::size_t*,        \
                                                  stream_type);                                   \
  template void cpu_launcher::execute<P>(table_state const&, op_code const*, key_type const*,     \
                                         value_type const*, value_type*, op_status*, std::size_t, \
                                         key_type*, value_type*, std::size_t*, std::size_t*,      \
                                         stream_type);
// Every table policy (include/ccht/policy_list.hpp): the same list the name dispatch follows.
CCHT_TABLE_POLICIES(CCHT_INSTANTIATE_CPU)
#undef CCHT_INSTANTIATE_CPU

}  // namespace ccht::detail
#undef CCHT_FORCEINLINE_LAMBDA
