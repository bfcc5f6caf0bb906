// CPU backend of ccht::page_cache: the per-key page operations (cache/page_ref.hpp) with a
// one-thread tile, over OpenMP threads. Each thread tallies its statistics and adds them once
// per batch, so the hot path has no shared counter; evictions are appended with one atomic add
// each (an eviction also costs a fill, which dwarfs it).
#include <ccht/cache/detail/page_launcher.hpp>
#include <ccht/detail/launcher.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/detail/validate.hpp>

#include "cpu_tile.hpp"

#include <algorithm>
#include <span>

#if CCHT_WITH_OPENMP
#include <omp.h>
#endif

namespace ccht::detail {
namespace {

/// Per-thread statistics of one batch.
struct tally {
  std::uint64_t c[sizeof(page_counters) / sizeof(std::uint64_t)] = {};
  std::uint64_t errors = 0;
  std::size_t first_error = ~std::size_t{0};  ///< (index << 8) | page_result
  std::uint64_t done = 0;                     ///< erase: keys erased

  CCHT_FORCEINLINE void count(page_op op, page_op_result const& r, std::size_t i) {
    auto& k = *reinterpret_cast<page_counters*>(c);
    if (reports_status(op)) {
      switch (r.status) {
        case page_status::hit: ++k.hits; break;
        case page_status::fill: ++k.fills; ++k.misses; break;
        case page_status::miss: ++k.misses; break;
        case page_status::pending: ++k.pending; break;
        case page_status::no_space: ++k.no_space; break;
        case page_status::rejected: break;
      }
      if (r.evicted) { ++k.evictions; }
    } else if (r.result == page_result::ok) {
      switch (op) {
        case page_op::publish: ++k.publishes; break;
        case page_op::abandon: ++k.abandons; break;
        case page_op::erase: ++k.erases; ++done; break;
        default: ++k.releases; break;
      }
    } else if (!(op == page_op::erase)) {  // erase refusals are answers, not errors
      ++errors;
      std::size_t const code = (i << 8) | static_cast<std::size_t>(r.result);
      first_error = std::min(first_error, code);
    }
    k.pinned += static_cast<std::uint64_t>(static_cast<std::int64_t>(r.pinned_delta));
    k.filling += static_cast<std::uint64_t>(static_cast<std::int64_t>(r.filling_delta));
  }

  void flush(page_counters* to, std::size_t* words) const {
    auto* dst = reinterpret_cast<std::uint64_t*>(to);
    for (std::size_t j = 0; j < std::size(c); ++j) {
      if (c[j] != 0) { atomic_ref_t<std::uint64_t>(dst[j]).fetch_add(c[j], cuda::std::memory_order_relaxed); }
    }
    if (errors != 0) {
      atomic_ref_t<std::size_t>(words[pw_errors]).fetch_add(errors, cuda::std::memory_order_relaxed);
      atomic_ref_t<std::size_t> first(words[pw_first_error]);
      std::size_t cur = first.load(cuda::std::memory_order_relaxed);
      while (first_error < cur &&
             !first.compare_exchange_weak(cur, first_error, cuda::std::memory_order_relaxed)) {}
    }
    if (done != 0) {
      atomic_ref_t<std::size_t>(words[pw_prefix]).fetch_add(done, cuda::std::memory_order_relaxed);
    }
  }
};

CCHT_FORCEINLINE void prefetch_r(void const* p) { __builtin_prefetch(p, 0, 2); }
CCHT_FORCEINLINE void prefetch_w(void const* p) { __builtin_prefetch(p, 1, 2); }

/// Elements between the two prefetch stages and the operation (as in launcher_cpu.cpp: lead x
/// time per element must cover a DRAM miss).
constexpr std::size_t lead = 8;
constexpr std::size_t ring_size = 64;
static_assert(ring_size > 2 * lead);

/**
 * Two-stage software prefetch over a chunk of page operations: stage 1 (element i + 2 * lead)
 * requests the key's first bucket (version word for writing: every page op locks it; the keys);
 * stage 2 (i + lead) peeks at those keys, a hint only, and requests the hit's score (written by a
 * pin) and value lines, or the second bucket. release_page first requests the page's owner word
 * and reads it one stage later. Peeks change nothing.
 */
template <class Policy, page_op Op>
struct page_prefetcher {
  page_ref<Policy> const& ref;
  page_batch const& b;
  // Left uninitialised: stage 1 writes an element's entries before stage 2 and the body read them.
  key_type key_at[ring_size];
  detail::slot_hint hint_at[ring_size];

  page_prefetcher(page_ref<Policy> const& r, page_batch const& batch) : ref(r), b(batch) {}

  /// What stage 2 learnt about element @p i (its candidates and first-bucket slot).
  CCHT_FORCEINLINE detail::slot_hint const* hint(std::size_t i) const {
    return Op == page_op::release_page ? nullptr : &hint_at[i % ring_size];
  }

  CCHT_FORCEINLINE void request_first(std::size_t i, key_type k) {
    candidate_buckets const cb = candidates(k, ref.index.seed, ref.index.num_buckets);
    key_at[i % ring_size] = k;
    hint_at[i % ring_size] = {cb, -1};
    prefetch_w(&ref.index.versions[cb.first]);
    auto const* keys = reinterpret_cast<char const*>(ref.index.buckets[cb.first].keys);
    prefetch_r(keys);
    prefetch_r(keys + 64);
  }
  CCHT_FORCEINLINE void stage1(std::size_t i) {
    if constexpr (Op == page_op::release_page) {
      if (b.pages_in[i] < ref.ring.num_pages) { prefetch_r(&ref.owner[b.pages_in[i]]); }
      return;
    }
    request_first(i, b.keys[i]);
  }
  CCHT_FORCEINLINE void stage2(std::size_t i) {
    if constexpr (Op == page_op::release_page) {
      if (b.pages_in[i] >= ref.ring.num_pages) { return; }
      key_type const k = load_relaxed(ref.owner[b.pages_in[i]]);
      if (k != empty_key) { request_first(i, k); }
      return;
    }
    key_type const k = key_at[i % ring_size];
    candidate_buckets const cb = hint_at[i % ring_size].cb;
    auto const& bk = ref.index.buckets[cb.first];
    int const slot = find_slot(scalar_tile{}, bk, k);
    hint_at[i % ring_size].first_slot = slot;
    if (slot >= 0) {
      prefetch_w(&bk.scores[slot]);
      prefetch_r(&bk.values[slot]);
      if (ref.index.tails != nullptr) { prefetch_w(&ref.index.tails[cb.first]); }
    } else {
      prefetch_w(&ref.index.versions[cb.second]);
      auto const* keys = reinterpret_cast<char const*>(ref.index.buckets[cb.second].keys);
      prefetch_r(keys);
      prefetch_r(keys + 64);
    }
  }
};

template <page_op Op, class Policy>
CCHT_FORCEINLINE page_op_result run_one(page_ref<Policy> const& ref, page_batch const& b,
                                        std::size_t i, tick_type tick,
                                        detail::slot_hint const* h) {
  return on_cpu_tile(nullptr, [&](auto const& t, access_counts*) -> page_op_result {
    switch (Op) {
      case page_op::acquire: return ref.acquire(t, b.keys[i], tick, nullptr, h);
      case page_op::lookup: return ref.lookup(t, b.keys[i], h);
      case page_op::publish: return ref.publish(t, b.keys[i]);
      case page_op::abandon: return ref.abandon(t, b.keys[i]);
      case page_op::release_key: return ref.release(t, b.keys[i], tick, nullptr, h);
      case page_op::release_page: return ref.release_page(t, b.pages_in[i], tick);
      case page_op::erase: return ref.erase(t, b.keys[i]);
      case page_op::match_prefix: break;
    }
    return {};
  });
}

template <page_op Op>
CCHT_FORCEINLINE void write_outputs(page_batch const& b, std::size_t i, page_op_result const& r) {
  if constexpr (reports_status(Op)) {
    if (b.pages_out != nullptr) { b.pages_out[i] = r.page; }
    if (b.status_out != nullptr) { b.status_out[i] = r.status; }
    if (r.evicted) {
      std::size_t const at = atomic_ref_t<std::size_t>(b.words[pw_evicted])
                                 .fetch_add(1, cuda::std::memory_order_relaxed);
      b.evicted_keys[at] = r.evicted_key;
      b.evicted_pages[at] = r.page;
    }
  } else if (b.result_out != nullptr) {
    b.result_out[i] = r.result;
  }
}

/// Runs elements [lo, hi) in order through the prefetch pipeline (one instance per op, so the
/// per-element dispatch folds away).
template <page_op Op, class Policy>
void run_range(page_ref<Policy> const& ref, page_batch const& b, std::size_t lo, std::size_t hi,
               tick_type base, tally& t) {
  if (hi - lo == 1) {  // nothing to overlap with: no stages, and the op finds its own slot
    page_op_result const r = run_one<Op>(ref, b, lo, base + lo, nullptr);
    write_outputs<Op>(b, lo, r);
    t.count(Op, r, lo);
    return;
  }
  page_prefetcher<Policy, Op> pf{ref, b};
  for (std::size_t i = lo; i < std::min(hi, lo + 2 * lead); ++i) { pf.stage1(i); }
  for (std::size_t i = lo; i < std::min(hi, lo + lead); ++i) { pf.stage2(i); }
  for (std::size_t i = lo; i < hi; ++i) {
    if (i + 2 * lead < hi) { pf.stage1(i + 2 * lead); }
    if (i + lead < hi) { pf.stage2(i + lead); }
    page_op_result const r = run_one<Op>(ref, b, i, base + i, pf.hint(i));
    write_outputs<Op>(b, i, r);
    t.count(Op, r, i);
  }
}

/// run_range for the batch's op, chosen once.
template <class Policy>
void run_range_dispatch(page_ref<Policy> const& ref, page_batch const& b, std::size_t lo,
                        std::size_t hi, tick_type base, tally& t) {
  switch (b.op) {
    case page_op::acquire: return run_range<page_op::acquire>(ref, b, lo, hi, base, t);
    case page_op::lookup: return run_range<page_op::lookup>(ref, b, lo, hi, base, t);
    case page_op::publish: return run_range<page_op::publish>(ref, b, lo, hi, base, t);
    case page_op::abandon: return run_range<page_op::abandon>(ref, b, lo, hi, base, t);
    case page_op::release_key: return run_range<page_op::release_key>(ref, b, lo, hi, base, t);
    case page_op::release_page: return run_range<page_op::release_page>(ref, b, lo, hi, base, t);
    case page_op::erase: return run_range<page_op::erase>(ref, b, lo, hi, base, t);
    case page_op::match_prefix: return;
  }
}

}  // namespace

std::size_t* page_launcher<cpu_backend>::acquire_words(host_stream) {
  // One live batch per thread: a page-cache call never starts another batch on its thread
  // before it has released its words.
  thread_local std::size_t words[pw_words];
  std::fill(std::begin(words), std::end(words), 0);
  words[pw_first_error] = ~std::size_t{0};
  words[pw_reject] = no_reject;
  return words;
}

void page_launcher<cpu_backend>::release_words(std::size_t* words, std::size_t* host,
                                               host_stream) {
  if (host != nullptr) { std::copy(words, words + pw_words, host); }
}

template <class Policy>
void page_launcher<cpu_backend>::run(page_ref<Policy> const& ref, table_ref<Policy> const& index,
                                     page_counters* counters, page_batch const& b, int threads,
                                     host_stream) {
  if (b.op != page_op::release_page) { check_keys_host({b.keys, b.n}, to_string(b.op)); }
  tick_type const base = index.next_ticks(scalar_tile{}, b.n);

  if (b.op == page_op::match_prefix) {  // in order, stopping at the first non-hit
    tally t;
    std::size_t run = 0;
    for (; run < b.n; ++run) {
      page_op_result const r = run_one<page_op::lookup>(ref, b, run, base + run, nullptr);
      t.count(page_op::lookup, r, run);
      if (r.status != page_status::hit) { break; }
      b.pages_out[run] = r.page;
    }
    b.words[pw_prefix] = run;
    t.flush(counters, b.words);
    return;
  }

#if CCHT_WITH_OPENMP
  int const nt = threads > 0 ? threads : omp_get_max_threads();
  // Small batches (batch-1 latency) stay on the calling thread: a parallel region costs more.
  if (nt > 1 && b.n >= 256) {
#pragma omp parallel num_threads(nt)
    {
      tally t;
      // Contiguous ranges per thread, each run through the prefetch pipeline.
      int const me = omp_get_thread_num(), team = omp_get_num_threads();
      std::size_t const per = (b.n + static_cast<std::size_t>(team) - 1) / static_cast<std::size_t>(team);
      std::size_t const lo = std::min(b.n, per * static_cast<std::size_t>(me));
      std::size_t const hi = std::min(b.n, lo + per);
      run_range_dispatch(ref, b, lo, hi, base, t);
      t.flush(counters, b.words);
    }
    return;
  }
#else
  (void)threads;
#endif
  tally t;
  run_range_dispatch(ref, b, 0, b.n, base, t);
  t.flush(counters, b.words);
}

#define CCHT_INSTANTIATE_PAGE_CPU(P)                                                              \
  template void page_launcher<cpu_backend>::run<P>(page_ref<P> const&, table_ref<P> const&,       \
                                                   page_counters*, page_batch const&, int,        \
                                                   host_stream);
CCHT_INSTANTIATE_PAGE_CPU(double_lru)
CCHT_INSTANTIATE_PAGE_CPU(coarse_lru)
#undef CCHT_INSTANTIATE_PAGE_CPU

}  // namespace ccht::detail
