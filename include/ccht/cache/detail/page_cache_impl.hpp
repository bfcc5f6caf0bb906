// Backend-independent part of ccht::page_cache: geometry and argument checks (the same errors on
// every backend), the page ring's initial state, sync wrappers, and error messages. Each batch is
// one call into detail::page_launcher<Backend>.
#pragma once

#include <ccht/cache/detail/page_launcher.hpp>
#include <ccht/detail/validate.hpp>
#include <ccht/error.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace ccht {
namespace detail {

/// Byte offsets of the parts of a page cache's auxiliary allocation.
struct page_aux_layout {
  std::size_t ring = 0, words = 0, owners = 0, counters = 0, bytes = 0;
  explicit page_aux_layout(std::size_t pages) {
    auto up8 = [](std::size_t x) { return (x + 7) / 8 * 8; };
    ring = 0;
    words = up8(pages * sizeof(page_id));
    owners = words + up8(sizeof(free_ring_words));
    counters = owners + pages * sizeof(key_type);
    bytes = counters + sizeof(page_counters);
  }
};

/// Index slots for @p pages pages at @p ratio pages per slot.
inline std::size_t page_index_slots(std::size_t pages, double ratio) {
  if (!(ratio > 0.0 && ratio <= 1.0)) {
    throw error(error_code::invalid_argument,
                "page_cache: table_ratio " + std::to_string(ratio) + " is not in (0, 1]");
  }
  double const slots = std::ceil(static_cast<double>(pages) / ratio);
  if (slots > 4.0e18) {
    throw error(error_code::invalid_size, "page_cache: the index for " + std::to_string(pages) +
                                              " pages at ratio " + std::to_string(ratio) +
                                              " is too large");
  }
  return static_cast<std::size_t>(slots);
}

/// The page_pool argument check, before the pool or the index allocates anything.
inline std::size_t checked_page_count(std::size_t pool_bytes, std::size_t page_bytes) {
  if (pool_bytes == 0 || page_bytes == 0) {
    throw error(error_code::invalid_size, "page_cache: pool_bytes (" + std::to_string(pool_bytes) +
                                              ") and page_bytes (" + std::to_string(page_bytes) +
                                              ") must both be non-zero");
  }
  if (pool_bytes % page_bytes != 0) {
    throw error(error_code::invalid_size, "page_cache: page_bytes " + std::to_string(page_bytes) +
                                              " does not divide pool_bytes " +
                                              std::to_string(pool_bytes));
  }
  return pool_bytes / page_bytes;
}

/// Checks the geometry and the ratio before anything is allocated; returns @p pool_bytes.
inline std::size_t checked_pool_bytes(std::size_t pool_bytes, std::size_t page_bytes,
                                      double ratio) {
  page_index_slots(checked_page_count(pool_bytes, page_bytes), ratio);
  return pool_bytes;
}

}  // namespace detail

template <class Backend, class Policy>
page_cache<Backend, Policy>::page_cache(std::size_t pool_bytes, std::size_t page_bytes,
                                        page_cache_options options)
    : options_(options),
      pool_(detail::checked_pool_bytes(pool_bytes, page_bytes, options.table_ratio), page_bytes,
            options.pool),
      index_(detail::page_index_slots(pool_.num_pages(), options.table_ratio),
             table_options{.seed = options.seed,
                           .cpu_threads = options.cpu_threads,
                           .capacity = pool_.num_pages(),
                           .global_samples = options.global_samples,
                           .global_search = options.global_search}) {
  std::size_t const n = pool_.num_pages();
  detail::page_aux_layout const lay(n);
  aux_ = Backend::allocate(lay.bytes);
  try {
    // Initial state, built on the host and copied once: every page free, in id order.
    std::vector<unsigned char> host(lay.bytes, 0);
    auto* ring = reinterpret_cast<page_id*>(host.data() + lay.ring);
    for (std::size_t i = 0; i < n; ++i) { ring[i] = static_cast<page_id>(i); }
    detail::free_ring_words w{0, n, static_cast<std::int64_t>(n)};
    std::memcpy(host.data() + lay.words, &w, sizeof(w));
    std::memset(host.data() + lay.owners, 0xff, n * sizeof(key_type));  // empty_key
    Backend::copy_from_host(aux_, host.data(), lay.bytes);
  } catch (...) {
    Backend::deallocate(aux_);
    throw;
  }
  auto* base = static_cast<unsigned char*>(aux_);
  counters_ = reinterpret_cast<detail::page_counters*>(base + lay.counters);
  ref_.index = index_.ref().view();
  // Every writer of the index goes through ref_ (index() is const), so all of them claim
  // victims, and hits and releases can pin without the lock (core/pin.hpp).
  ref_.index.optimistic_pins = true;
  ref_.ring = detail::free_ring{reinterpret_cast<page_id*>(base + lay.ring),
                                reinterpret_cast<detail::free_ring_words*>(base + lay.words),
                                static_cast<std::uint32_t>(n)};
  ref_.owner = reinterpret_cast<key_type*>(base + lay.owners);
  ref_.data = pool_.data();
  ref_.page_bytes = pool_.page_bytes();
}

template <class Backend, class Policy>
page_cache<Backend, Policy>::~page_cache() {
  Backend::deallocate(aux_);
}

template <class Backend, class Policy>
void page_cache<Backend, Policy>::run(detail::page_batch b, stream_type stream, bool sync,
                                      std::size_t host_words[]) {
  std::size_t* words = launcher::acquire_words(stream);
  b.words = words;
  try {
    launcher::template run<Policy>(ref_, index_.ref(), counters_, b, options_.cpu_threads, stream);
  } catch (...) {
    launcher::release_words(words, nullptr, stream);
    throw;
  }
  launcher::release_words(words, sync ? host_words : nullptr, stream);
}

template <class Backend, class Policy>
void page_cache<Backend, Policy>::run_async_word(detail::page_batch b, std::size_t* dst, int word,
                                                 stream_type stream) {
  std::size_t* words = launcher::acquire_words(stream);
  b.words = words;
  try {
    if (b.n != 0) {
      launcher::template run<Policy>(ref_, index_.ref(), counters_, b, options_.cpu_threads,
                                     stream);
    }
    if (dst != nullptr) { launcher::copy_word(dst, words + word, stream); }
  } catch (...) {
    launcher::release_words(words, nullptr, stream);
    throw;
  }
  launcher::release_words(words, nullptr, stream);
}

template <class Backend, class Policy>
void page_cache<Backend, Policy>::throw_if_failed(detail::page_op op,
                                                  std::span<key_type const> keys,
                                                  std::span<page_id const> pages,
                                                  std::size_t const words[],
                                                  std::span<page_result const>,
                                                  stream_type stream) const {
  if (words[detail::pw_reject] != detail::no_reject) {
    std::size_t const at = words[detail::pw_reject];
    key_type k = 0;
    Backend::copy_to_host(&k, keys.data() + at, sizeof(k), stream);
    throw error(error_code::reserved_key,
                detail::reserved_key_message(to_string(op), at, k) + "; nothing was changed");
  }
  if (words[detail::pw_errors] == 0) { return; }
  std::size_t const first = words[detail::pw_first_error] >> 8;
  auto const why = static_cast<page_result>(words[detail::pw_first_error] & 0xff);
  std::string what = "element " + std::to_string(first);
  if (op == detail::page_op::release_page) {
    page_id p = 0;
    Backend::copy_to_host(&p, pages.data() + first, sizeof(p), stream);
    what += " (page " + std::to_string(p) + ")";
  } else {
    key_type k = 0;
    Backend::copy_to_host(&k, keys.data() + first, sizeof(k), stream);
    what += " (key " + std::to_string(k) + ")";
  }
  char const* hint = "";
  switch (why) {
    case page_result::not_pinned: hint = ": it holds no pin (released twice?)"; break;
    case page_result::unknown_key: hint = ": the key is not resident"; break;
    case page_result::unknown_page: hint = ": no key owns this page (released after eviction?)"; break;
    case page_result::not_filling: hint = ": the page is not being filled (acquire returned no fill)"; break;
    case page_result::filling: hint = ": the page is still being filled (publish or abandon it first)"; break;
    case page_result::pinned: hint = ": the page is pinned"; break;
    default: break;
  }
  std::size_t const n = keys.empty() ? pages.size() : keys.size();
  throw error(error_code::invalid_argument,
              std::string("page_cache::") + to_string(op) + ": " +
                  std::to_string(words[detail::pw_errors]) + " of " + std::to_string(n) +
                  " elements failed and changed nothing; first: " + what + " is " +
                  to_string(why) + hint +
                  (words[detail::pw_errors] < n ? ". The other elements were applied." : "."));
}

namespace detail {
inline void check_keyed(std::span<key_type const> keys, char const* op) {
  check_span(keys, keys.size(), op, "keys");
}
}  // namespace detail

template <class Backend, class Policy>
std::size_t page_cache<Backend, Policy>::acquire(std::span<key_type const> keys,
                                                 std::span<page_id> pages_out,
                                                 std::span<page_status> status_out,
                                                 std::span<key_type> evicted_keys,
                                                 std::span<page_id> evicted_pages,
                                                 stream_type stream) {
  stream = detail::launcher<Backend>::sync_stream(stream);
  char const* op = "page_cache::acquire";
  detail::check_keyed(keys, op);
  detail::check_span(pages_out, keys.size(), op, "pages_out");
  detail::check_span(status_out, keys.size(), op, "status_out");
  detail::check_span(evicted_keys, keys.size(), op, "evicted_keys", true);
  detail::check_span(evicted_pages, keys.size(), op, "evicted_pages", true);
  if (keys.empty()) { return 0; }
  std::size_t w[detail::pw_words];
  run({.op = detail::page_op::acquire, .keys = keys.data(), .n = keys.size(),
       .pages_out = pages_out.data(), .status_out = status_out.data(),
       .evicted_keys = evicted_keys.data(), .evicted_pages = evicted_pages.data()},
      stream, true, w);
  throw_if_failed(detail::page_op::acquire, keys, {}, w, {}, stream);
  return w[detail::pw_evicted];
}

template <class Backend, class Policy>
void page_cache<Backend, Policy>::acquire_async(std::span<key_type const> keys,
                                                std::span<page_id> pages_out,
                                                std::span<page_status> status_out,
                                                std::span<key_type> evicted_keys,
                                                std::span<page_id> evicted_pages,
                                                std::size_t* num_evicted, stream_type stream) {
  char const* op = "page_cache::acquire_async";
  detail::check_keyed(keys, op);
  detail::check_span(pages_out, keys.size(), op, "pages_out");
  detail::check_span(status_out, keys.size(), op, "status_out");
  detail::check_span(evicted_keys, keys.size(), op, "evicted_keys", true);
  detail::check_span(evicted_pages, keys.size(), op, "evicted_pages", true);
  if (num_evicted == nullptr) {
    throw error(error_code::null_pointer, std::string(op) + ": num_evicted is null");
  }
  run_async_word({.op = detail::page_op::acquire, .keys = keys.data(), .n = keys.size(),
                  .pages_out = pages_out.data(), .status_out = status_out.data(),
                  .evicted_keys = evicted_keys.data(), .evicted_pages = evicted_pages.data()},
                 num_evicted, detail::pw_evicted, stream);
}

template <class Backend, class Policy>
void page_cache<Backend, Policy>::lookup(std::span<key_type const> keys,
                                         std::span<page_id> pages_out,
                                         std::span<page_status> status_out, stream_type stream) {
  stream = detail::launcher<Backend>::sync_stream(stream);
  char const* op = "page_cache::lookup";
  detail::check_keyed(keys, op);
  detail::check_span(pages_out, keys.size(), op, "pages_out");
  detail::check_span(status_out, keys.size(), op, "status_out");
  if (keys.empty()) { return; }
  std::size_t w[detail::pw_words];
  run({.op = detail::page_op::lookup, .keys = keys.data(), .n = keys.size(),
       .pages_out = pages_out.data(), .status_out = status_out.data()},
      stream, true, w);
  throw_if_failed(detail::page_op::lookup, keys, {}, w, {}, stream);
}

template <class Backend, class Policy>
void page_cache<Backend, Policy>::lookup_async(std::span<key_type const> keys,
                                               std::span<page_id> pages_out,
                                               std::span<page_status> status_out,
                                               stream_type stream) {
  char const* op = "page_cache::lookup_async";
  detail::check_keyed(keys, op);
  detail::check_span(pages_out, keys.size(), op, "pages_out");
  detail::check_span(status_out, keys.size(), op, "status_out");
  if (keys.empty()) { return; }
  run({.op = detail::page_op::lookup, .keys = keys.data(), .n = keys.size(),
       .pages_out = pages_out.data(), .status_out = status_out.data()},
      stream, false, nullptr);
}

template <class Backend, class Policy>
std::size_t page_cache<Backend, Policy>::match_prefix(std::span<key_type const> keys,
                                                      std::span<page_id> pages_out,
                                                      stream_type stream) {
  stream = detail::launcher<Backend>::sync_stream(stream);
  char const* op = "page_cache::match_prefix";
  detail::check_keyed(keys, op);
  detail::check_span(pages_out, keys.size(), op, "pages_out", true);
  if (keys.empty()) { return 0; }
  std::size_t w[detail::pw_words];
  run({.op = detail::page_op::match_prefix, .keys = keys.data(), .n = keys.size(),
       .pages_out = pages_out.data()},
      stream, true, w);
  throw_if_failed(detail::page_op::match_prefix, keys, {}, w, {}, stream);
  return w[detail::pw_prefix];
}

template <class Backend, class Policy>
void page_cache<Backend, Policy>::match_prefix_async(std::span<key_type const> keys,
                                                     std::span<page_id> pages_out,
                                                     std::size_t* length, stream_type stream) {
  char const* op = "page_cache::match_prefix_async";
  detail::check_keyed(keys, op);
  detail::check_span(pages_out, keys.size(), op, "pages_out", true);
  if (length == nullptr) {
    throw error(error_code::null_pointer, std::string(op) + ": length is null");
  }
  run_async_word({.op = detail::page_op::match_prefix, .keys = keys.data(), .n = keys.size(),
                  .pages_out = pages_out.data()},
                 length, detail::pw_prefix, stream);
}

template <class Backend, class Policy>
void page_cache<Backend, Policy>::erase_async(std::span<key_type const> keys,
                                              std::span<page_result> results_out,
                                              std::size_t* num_erased, stream_type stream) {
  char const* op = "page_cache::erase_async";
  detail::check_keyed(keys, op);
  if (!results_out.empty()) { detail::check_span(results_out, keys.size(), op, "results_out"); }
  detail::page_batch b{.op = detail::page_op::erase, .keys = keys.data(), .n = keys.size()};
  b.result_out = results_out.empty() ? nullptr : results_out.data();
  run_async_word(b, num_erased, detail::pw_prefix, stream);
}

#define CCHT_PAGE_RESULT_OP(NAME, OP, SPAN_T, FIELD)                                              \
  template <class Backend, class Policy>                                                          \
  void page_cache<Backend, Policy>::NAME(std::span<SPAN_T const> in, stream_type stream) {        \
    stream = detail::launcher<Backend>::sync_stream(stream);                                      \
    char const* op = "page_cache::" #NAME;                                                        \
    detail::check_span(in, in.size(), op, "input");                                               \
    if (in.empty()) { return; }                                                                   \
    std::size_t w[detail::pw_words];                                                              \
    detail::page_batch b{.op = OP, .n = in.size()};                                               \
    b.FIELD = in.data();                                                                          \
    run(b, stream, true, w);                                                                      \
    if constexpr (OP == detail::page_op::release_page) {                                          \
      throw_if_failed(OP, {}, std::span<page_id const>(                                           \
                                  reinterpret_cast<page_id const*>(in.data()), in.size()),        \
                      w, {}, stream);                                                             \
    } else {                                                                                      \
      throw_if_failed(OP, std::span<key_type const>(                                              \
                              reinterpret_cast<key_type const*>(in.data()), in.size()),           \
                      {}, w, {}, stream);                                                         \
    }                                                                                             \
  }                                                                                               \
  template <class Backend, class Policy>                                                          \
  void page_cache<Backend, Policy>::NAME##_async(std::span<SPAN_T const> in,                      \
                                                 std::span<page_result> results_out,              \
                                                 stream_type stream) {                            \
    char const* op = "page_cache::" #NAME "_async";                                               \
    detail::check_span(in, in.size(), op, "input");                                               \
    if (!results_out.empty()) { detail::check_span(results_out, in.size(), op, "results_out"); }  \
    if (in.empty()) { return; }                                                                   \
    detail::page_batch b{.op = OP, .n = in.size()};                                               \
    b.FIELD = in.data();                                                                          \
    b.result_out = results_out.empty() ? nullptr : results_out.data();                            \
    run(b, stream, false, nullptr);                                                               \
  }

CCHT_PAGE_RESULT_OP(publish, detail::page_op::publish, key_type, keys)
CCHT_PAGE_RESULT_OP(abandon, detail::page_op::abandon, key_type, keys)
CCHT_PAGE_RESULT_OP(release, detail::page_op::release_key, key_type, keys)
CCHT_PAGE_RESULT_OP(release_pages, detail::page_op::release_page, page_id, pages_in)
#undef CCHT_PAGE_RESULT_OP

template <class Backend, class Policy>
std::size_t page_cache<Backend, Policy>::erase(std::span<key_type const> keys,
                                               std::span<page_result> results_out,
                                               stream_type stream) {
  stream = detail::launcher<Backend>::sync_stream(stream);
  char const* op = "page_cache::erase";
  detail::check_keyed(keys, op);
  if (!results_out.empty()) { detail::check_span(results_out, keys.size(), op, "results_out"); }
  if (keys.empty()) { return 0; }
  std::size_t w[detail::pw_words];
  detail::page_batch b{.op = detail::page_op::erase, .keys = keys.data(), .n = keys.size()};
  b.result_out = results_out.empty() ? nullptr : results_out.data();
  run(b, stream, true, w);
  if (w[detail::pw_reject] != detail::no_reject) {
    throw_if_failed(detail::page_op::erase, keys, {}, w, {}, stream);
  }
  return w[detail::pw_prefix];  // erase counts its successes in the prefix word
}

template <class Backend, class Policy>
page_cache_stats page_cache<Backend, Policy>::stats(stream_type stream) const {
  stream = detail::launcher<Backend>::sync_stream(stream);
  Backend::synchronize(stream);
  detail::page_counters c{};
  Backend::copy_to_host(&c, counters_, sizeof(c), stream);
  detail::free_ring_words w{};
  Backend::copy_to_host(&w, ref_.ring.words, sizeof(w), stream);
  page_cache_stats s;
  s.hits = c.hits;
  s.misses = c.misses;
  s.fills = c.fills;
  s.pending = c.pending;
  s.no_space = c.no_space;
  s.evictions = c.evictions;
  s.publishes = c.publishes;
  s.abandons = c.abandons;
  s.releases = c.releases;
  s.erases = c.erases;
  s.pages = num_pages();
  s.page_bytes = page_bytes();
  std::int64_t const free_now = w.count < 0 ? 0 : w.count;
  s.pages_free = static_cast<std::size_t>(free_now);
  s.pages_resident = num_pages() - s.pages_free;
  // Gauges are sums of per-batch deltas: a snapshot taken while batches run may see a release
  // before its pin, so clamp at zero.
  auto gauge = [](std::uint64_t v) {
    auto const x = static_cast<std::int64_t>(v);
    return static_cast<std::size_t>(x < 0 ? 0 : x);
  };
  s.pages_pinned = gauge(c.pinned);
  s.pages_filling = gauge(c.filling);
  s.bytes_resident = s.pages_resident * page_bytes();
  return s;
}

}  // namespace ccht
