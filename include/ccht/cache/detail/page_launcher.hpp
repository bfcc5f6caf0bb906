/**
 * @file page_launcher.hpp
 * @brief The per-backend layer under ccht::page_cache: one bulk entry point that runs a batch of
 *        page operations (cache/page_ref.hpp) over host threads (host/cpu/page_launcher_cpu.cpp)
 *        or CUDA tiles (kernels/page_kernels.cu). Pointers are backend memory; sizes and, on
 *        the CPU, keys are already validated.
 */
#pragma once

#include <ccht/backend.hpp>
#include <ccht/cache/page_ref.hpp>
#include <ccht/core/types.hpp>
#include <ccht/table_ref.hpp>

#include <cstddef>
#include <cstdint>

namespace ccht::detail {

/// What a page batch does to each element.
enum class page_op : std::uint8_t {
  acquire, lookup, publish, abandon, release_key, release_page, erase, match_prefix,
};

/// Name of a page_op, for messages.
constexpr char const* to_string(page_op op) noexcept {
  switch (op) {
    case page_op::acquire: return "acquire";
    case page_op::lookup: return "lookup";
    case page_op::publish: return "publish";
    case page_op::abandon: return "abandon";
    case page_op::release_key: return "release";
    case page_op::release_page: return "release_pages";
    case page_op::erase: return "erase";
    case page_op::match_prefix: return "match_prefix";
  }
  return "?";
}

/// Whether @p op reports a page_status per element (else a page_result).
constexpr bool reports_status(page_op op) noexcept {
  return op == page_op::acquire || op == page_op::lookup || op == page_op::match_prefix;
}

/// Event counters of a page cache (backend memory); `pinned` and `filling` are gauges kept as
/// sums of signed deltas (two's complement in a 64-bit word).
struct page_counters {
  std::uint64_t hits, misses, fills, pending, no_space, evictions;
  std::uint64_t publishes, abandons, releases, erases;
  std::uint64_t pinned, filling;
};

/// Backend words of one batch (page_batch::words).
enum page_word : int {
  pw_evicted = 0,      ///< evictions written to evicted_keys / evicted_pages
  pw_errors = 1,       ///< elements whose page_result is neither ok nor (erase) unknown_key
  pw_first_error = 2,  ///< smallest index of such an element (~0 if none)
  pw_reject = 3,       ///< smallest index of a reserved key (~0 if none; CUDA only)
  pw_prefix = 4,       ///< match_prefix: length of the resident run; erase: keys erased
  pw_tick = 5,         ///< CUDA: the batch's first tick
  pw_words = 6,        ///< number of words
};

/// One batch of page operations.
struct page_batch {
  page_op op = page_op::lookup;
  key_type const* keys = nullptr;       ///< n keys (all ops but release_page)
  page_id const* pages_in = nullptr;    ///< n page ids (release_page)
  std::size_t n = 0;
  page_id* pages_out = nullptr;         ///< acquire / lookup / match_prefix: page per element
  page_status* status_out = nullptr;    ///< acquire / lookup / match_prefix (may be null)
  page_result* result_out = nullptr;    ///< the other ops (may be null)
  key_type* evicted_keys = nullptr;     ///< acquire: victims' keys (at least n)
  page_id* evicted_pages = nullptr;     ///< acquire: victims' pages (at least n)
  std::size_t* words = nullptr;         ///< pw_words backend words, zeroed (first_error, reject: ~0)
};

/// Backend layer of the page cache; specialised per backend.
template <class Backend>
struct page_launcher;

/// CPU: OpenMP threads over the batch (host/cpu/page_launcher_cpu.cpp).
template <>
struct page_launcher<cpu_backend> {
  /// pw_words initialised words for one batch (a per-thread buffer).
  static std::size_t* acquire_words(host_stream);
  /// Copies the words to @p host (if not null) and gives them back.
  static void release_words(std::size_t* words, std::size_t* host, host_stream);
  /// *dst = *src.
  static void copy_word(std::size_t* dst, std::size_t const* src, host_stream) { *dst = *src; }
  /// Runs @p b; match_prefix runs in order on one thread.
  template <class Policy>
  static void run(page_ref<Policy> const& ref, table_ref<Policy> const& index,
                  page_counters* counters, page_batch const& b, int threads, host_stream);
};

#if CCHT_WITH_CUDA
/// CUDA: one tile per element (kernels/page_kernels.cu); match_prefix is one tile walking the
/// chain. Stream-ordered; a batch with a reserved key is skipped whole (pw_reject).
template <>
struct page_launcher<cuda_backend> {
  /// pw_words device words, stream-ordered allocation and initialisation.
  static std::size_t* acquire_words(cudaStream_t stream);
  /// Waits for @p stream and copies the words to @p host when it is not null; frees the words
  /// in stream order.
  static void release_words(std::size_t* words, std::size_t* host, cudaStream_t stream);
  /// Device-to-device copy of one word in stream order.
  static void copy_word(std::size_t* dst, std::size_t const* src, cudaStream_t stream);
  template <class Policy>
  static void run(page_ref<Policy> const& ref,
                  table_ref<Policy, default_bucket_size, device_memory> const& index,
                  page_counters* counters, page_batch const& b, int threads, cudaStream_t stream);
};
#endif

}  // namespace ccht::detail
