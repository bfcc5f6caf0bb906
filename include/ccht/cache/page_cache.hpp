/**
 * @file page_cache.hpp
 * @brief ccht::page_cache: fixed-size pages of backend memory (device memory on CUDA), found by
 *        key through the CCHT index, pinned while in use, for KV-cache blocks and the layers
 *        above (weights, tiers).
 *
 * Life of a page (cache/page_ref.hpp has the per-key rules):
 *
 *     acquire(key) --hit------------------------------> pinned, ready --release--> unpinned
 *                  --fill--> write the page --publish-> pinned, ready --release--> unpinned
 *                                           --abandon-> gone, page free
 *                  --pending: someone else is filling it (no pin; retry)
 *                  --no_space: every candidate page is pinned (nothing changed)
 *
 * An unpinned page stays resident until the index evicts it (double LRU by default) for a new
 * key, or until erase(). An acquire that evicts reports the victim's (key, page id); the new key
 * owns that same page, so its old bytes are intact until the caller overwrites them: copy them
 * to a lower tier first (ccht::tiered_page_cache does).
 *
 * **Buffers.** Spans point to backend memory (device or managed memory on CUDA), like
 * ccht::table's. Pages are addressed by page_id; page_data() gives a page's first byte.
 *
 * **Errors.** A reserved key (ccht::is_reserved_key) makes the whole batch fail before anything
 * changes: a synchronous call throws ccht::error (reserved_key); a CUDA `_async` call skips the
 * batch and marks every element `rejected`. publish, abandon and release report per element
 * (page_result): a double release, an unknown key or page, a publish of a page not being filled.
 * Such an element changes nothing. The synchronous calls then throw ccht::error
 * (invalid_argument) naming the first bad element and how many there were; the batch's other
 * elements were applied. The `_async` variants only write the results.
 *
 * **Erase of a pinned page is refused** (page_result::pinned, or filling), never deferred: the
 * caller knows at once whether the page is gone. Erase of an absent key is not an error.
 *
 * **Concurrency.** Every call may run concurrently with every other, from many host threads and
 * streams. No reader ever gets a page before its publish; a pinned page is never evicted, erased
 * or handed to another key, so its bytes change only if its holders write them.
 *
 * **Pins are counts, not owners**: a release is matched against the count, so one holder that
 * releases twice is caught only when no pin is left (page_result::not_pinned).
 *
 * **Release in stream order (CUDA).** A release is a batch on its stream: the pin drops when the
 * batch runs on the device, after the work enqueued on that stream before it. So release on the
 * stream of the kernels or copies that read the pages (or on one made to wait for them with
 * cudaStreamWaitEvent): the page cannot be evicted, and a new filler cannot get it, before those
 * reads are done; no event and no host wait are needed. Nothing is unmapped, so a release on
 * another stream is no fault but a silent wrong read: another caller's acquire may hand the page
 * to a filler whose bytes the running kernel then reads. Beware the default: release(keys) and
 * release_pages(pages) given no stream run on the calling thread's per-thread default stream,
 * which is ordered after the legacy default stream's work but not after other streams'. The same
 * holds for fills: publish on the stream of the copies that wrote the page. On the CPU every call
 * finishes before it returns, so a release follows the caller's reads in program order.
 */
#pragma once

#include <ccht/backend.hpp>
#include <ccht/cache/detail/page_launcher.hpp>
#include <ccht/cache/page_pool.hpp>
#include <ccht/cache/page_ref.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/table.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace ccht {

/// Construction options of a ccht::page_cache.
struct page_cache_options {
  /// Pages / index slots (the paper's cache/table ratio), in (0, 1]. The index has
  /// ceil(pages / ratio) slots, rounded up to whole buckets, and a capacity of `pages` entries.
  double table_ratio = 0.9;
  /// Hash seed of the index.
  std::uint64_t seed = default_seed;
  /// CPU backend: threads per bulk call (0: the OpenMP default). Ignored on CUDA.
  int cpu_threads = 0;
  /// Global layer: buckets ranked per eviction (0: the default; see ccht::table_options).
  std::uint32_t global_samples = 0;
  /// Global layer of double LRU: how the victim is found.
  victim_search global_search = victim_search::two_level;
  /// How the page pool is allocated (the weight cache asks for a mappable one).
  pool_options pool{};
};

/// Counters and gauges of a page cache (see page_cache::stats()).
struct page_cache_stats {
  std::uint64_t hits = 0;       ///< acquire and lookup hits
  std::uint64_t misses = 0;     ///< acquire fills plus lookup misses
  std::uint64_t fills = 0;      ///< acquires that handed out a page to fill
  std::uint64_t pending = 0;    ///< acquires and lookups that found a page being filled
  std::uint64_t no_space = 0;   ///< acquires refused because every candidate was pinned
  std::uint64_t evictions = 0;  ///< entries evicted to make room
  std::uint64_t publishes = 0;  ///< successful publishes
  std::uint64_t abandons = 0;   ///< successful abandons
  std::uint64_t releases = 0;   ///< successful releases
  std::uint64_t erases = 0;     ///< successful erases
  std::size_t pages = 0;           ///< pages in the pool
  std::size_t page_bytes = 0;      ///< bytes per page
  std::size_t pages_resident = 0;  ///< pages owned by a key (published or being filled)
  std::size_t pages_free = 0;      ///< pages in the free ring
  std::size_t pages_pinned = 0;    ///< resident pages holding at least one pin
  std::size_t pages_filling = 0;   ///< pages handed out by a fill, not yet published or abandoned
  std::size_t bytes_resident = 0;  ///< pages_resident x page_bytes
};

/**
 * @brief A pool of fixed-size pages indexed by 64-bit keys, with pins, fills and eviction.
 * @tparam Backend ccht::cpu_backend or ccht::cuda_backend
 * @tparam Policy ccht::double_lru (default) or ccht::coarse_lru
 */
template <class Backend, class Policy = double_lru>
class page_cache {
  static_assert(Policy::pinnable && Policy::global != global_layer::none,
                "page_cache needs a pinnable policy with a global layer (double_lru, coarse_lru)");

 public:
  using backend_type = Backend;                       ///< backend tag
  using policy_type = Policy;                         ///< index policy
  using stream_type = typename Backend::stream_type;  ///< stream of `_async` calls
  using index_type = table<Backend, Policy>;          ///< the CCHT index: key -> page id
  using ref_type = page_ref<Policy>;                  ///< per-key handle (see ref())

  /**
   * @brief Allocates pool_bytes / page_bytes pages and an index for them.
   * @throws ccht::error invalid_size when a size is 0, page_bytes does not divide pool_bytes, or
   *         the page count exceeds page_pool::max_pages; invalid_argument for a table_ratio
   *         outside (0, 1]; out_of_memory / cuda_failure when an allocation fails. Nothing stays
   *         allocated after a throw.
   */
  page_cache(std::size_t pool_bytes, std::size_t page_bytes, page_cache_options options = {});
  ~page_cache();
  page_cache(page_cache const&) = delete;
  page_cache& operator=(page_cache const&) = delete;

  /// Number of pages.
  std::size_t num_pages() const noexcept { return pool_.num_pages(); }
  /// Bytes per page.
  std::size_t page_bytes() const noexcept { return pool_.page_bytes(); }
  /// The page storage.
  page_pool<Backend> const& pool() const noexcept { return pool_; }
  /// First byte of page @p id (backend memory). @throws ccht::error for an id out of range
  std::byte* page_data(page_id id) const { return pool_.page(id); }
  /// The index (key -> page id); for inspection: its values encode page ids and flags.
  index_type const& index() const noexcept { return index_; }
  /// Options the cache was built with.
  page_cache_options const& options() const noexcept { return options_; }

  /**
   * @brief Per key: hit (pinned), fill (pinned, write then publish), pending or no_space.
   * @param pages_out page per element (hit and fill; no_page otherwise)
   * @param status_out status per element
   * @param evicted_keys,evicted_pages victims (at least keys.size() each): each victim's page
   *        is the page now handed to a fill, with the victim's bytes still in it
   * @return the number of victims written
   */
  std::size_t acquire(std::span<key_type const> keys, std::span<page_id> pages_out,
                      std::span<page_status> status_out, std::span<key_type> evicted_keys,
                      std::span<page_id> evicted_pages, stream_type stream = {});
  /// Stream-ordered acquire(); the victim count goes to @p num_evicted (backend memory).
  void acquire_async(std::span<key_type const> keys, std::span<page_id> pages_out,
                     std::span<page_status> status_out, std::span<key_type> evicted_keys,
                     std::span<page_id> evicted_pages, std::size_t* num_evicted,
                     stream_type stream = {});

  /// Per key: hit (pinned), pending or miss. Never inserts or evicts.
  void lookup(std::span<key_type const> keys, std::span<page_id> pages_out,
              std::span<page_status> status_out, stream_type stream = {});
  /// Stream-ordered lookup().
  void lookup_async(std::span<key_type const> keys, std::span<page_id> pages_out,
                    std::span<page_status> status_out, stream_type stream = {});

  /**
   * @brief For a chain of page keys (ccht::chain_keys), pins the longest leading run that is
   *        resident and published, in order, and stops at the first key that is not.
   * @param pages_out the run's pages in its first elements (at least keys.size())
   * @return the run's length
   */
  std::size_t match_prefix(std::span<key_type const> keys, std::span<page_id> pages_out,
                           stream_type stream = {});
  /// Stream-ordered match_prefix(); the run's length goes to @p length (backend memory).
  void match_prefix_async(std::span<key_type const> keys, std::span<page_id> pages_out,
                          std::size_t* length, stream_type stream = {});

  /// Marks filled pages ready. @throws ccht::error invalid_argument if an element is not a fill
  void publish(std::span<key_type const> keys, stream_type stream = {});
  /// Stream-ordered publish(); per-element results go to @p results_out (may be empty).
  void publish_async(std::span<key_type const> keys, std::span<page_result> results_out,
                     stream_type stream = {});

  /// Gives up fills: the keys go away, their pages are free. @throws like publish()
  void abandon(std::span<key_type const> keys, stream_type stream = {});
  /// Stream-ordered abandon().
  void abandon_async(std::span<key_type const> keys, std::span<page_result> results_out,
                     stream_type stream = {});

  /**
   * @brief Releases one pin per key, in order after the work enqueued on @p stream (see "Release
   *        in stream order": pass the stream that read the pages).
   * @throws ccht::error invalid_argument naming the first element that held no pin
   *         (not_pinned), was not resident (unknown_key) or is still being filled (filling);
   *         those elements change nothing, the others are released
   */
  void release(std::span<key_type const> keys, stream_type stream = {});
  /// Stream-ordered release().
  void release_async(std::span<key_type const> keys, std::span<page_result> results_out,
                     stream_type stream = {});
  /// release() by page id (unknown_page for a page no key owns).
  void release_pages(std::span<page_id const> pages, stream_type stream = {});
  /// Stream-ordered release_pages().
  void release_pages_async(std::span<page_id const> pages, std::span<page_result> results_out,
                           stream_type stream = {});

  /**
   * @brief Erases unpinned keys and frees their pages. Pinned pages are refused
   *        (page_result::pinned / filling), absent keys ignored.
   * @param results_out per-element results (may be empty)
   * @return the number of keys erased
   */
  std::size_t erase(std::span<key_type const> keys, std::span<page_result> results_out = {},
                    stream_type stream = {});
  /// Stream-ordered erase(); the count goes to @p num_erased (backend memory, may be null).
  void erase_async(std::span<key_type const> keys, std::span<page_result> results_out,
                   std::size_t* num_erased, stream_type stream = {});

  /// Counters and gauges; waits for the stream on CUDA (a snapshot under concurrency).
  page_cache_stats stats(stream_type stream = {}) const;

  /// Per-key handle over the cache's storage (kernels on CUDA, host threads on the CPU).
  ref_type ref() const noexcept { return ref_; }

 private:
  using launcher = detail::page_launcher<Backend>;
  /// Runs one batch on the stream given; returns the host copy of its words when @p sync.
  void run(detail::page_batch b, stream_type stream, bool sync, std::size_t host_words[]);
  /// Runs one batch on @p stream and copies word @p word to @p dst (backend memory) after it.
  void run_async_word(detail::page_batch b, std::size_t* dst, int word, stream_type stream);
  /// Throws the per-element error summary of a finished synchronous batch.
  void throw_if_failed(detail::page_op op, std::span<key_type const> keys,
                       std::span<page_id const> pages, std::size_t const words[],
                       std::span<page_result const> results, stream_type stream) const;

  page_cache_options options_;
  page_pool<Backend> pool_;
  index_type index_;
  void* aux_ = nullptr;  ///< one allocation: ring slots, ring words, owners, counters
  detail::page_counters* counters_ = nullptr;
  ref_type ref_{};
};

}  // namespace ccht

#include <ccht/cache/detail/page_cache_impl.hpp>
