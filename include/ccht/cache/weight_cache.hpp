/**
 * @file weight_cache.hpp
 * @brief ccht::weight_cache: objects of any size (tensors, files) held in the pages of a
 *        ccht::page_cache and mapped into one contiguous virtual range each while resident, so a
 *        kernel sees every object contiguous without a gather or a copy.
 *
 * **Structure.** Object k of b bytes is ceil(b / page_bytes) pages; page i of k is the page
 * cache entry of key object_page_key(k, i), so residency, pins and double-LRU eviction are the
 * page cache's, per page. Each object has its own reserved address range (page_pool's mapping
 * calls: memfd pages on the CPU, cuMemMap on CUDA); page i of the object is mapped at
 * range + i * page_bytes. An object that lost some pages to eviction keeps the others: its next
 * acquire fills only the missing pages (fill_pages) and remaps only those.
 *
 * **Life of an object** (as a page's, in page_cache.hpp):
 *
 *     acquire --hit------------------------------------> pinned, mapped --release--> unpinned
 *             --fill: write fill_pages --publish------> pinned, mapped --release--> unpinned
 *                                      --abandon------> the filled pages are freed
 *             --pending: another caller is filling the object: wait_ready(), then acquire again
 *             --no_space: not enough unpinned pages; nothing is held
 *
 * An object has at most one filler at a time: concurrent acquires of an object being filled get
 * `pending` (wait_ready() blocks until its publish or abandon), so many threads loading one model
 * read its file once.
 *
 * **Budget.** The pool is exactly budget_bytes (a multiple of page_bytes); an object uses whole
 * pages. Pinned objects' pages are never evicted or remapped.
 *
 * **Stale views.** A page evicted from an object is unmapped from the object's range by the
 * acquire that evicted it, before that acquire returns, so a pointer kept past release() faults
 * instead of reading another object's bytes, once the page is reused.
 *
 * **Stream-ordered release (CUDA).** A kernel that reads an object may still run when its caller
 * releases the object; if another thread's acquire then evicted a page, its cuMemUnmap would pull
 * the page from under the kernel (cudaErrorIllegalAddress: sticky, the context is lost) and the
 * new filler would overwrite bytes still being read. So:
 *  - release(keys, stream) records an event on @p stream after the caller's work and keeps it with
 *    each object. Before any page of an object is unmapped or remapped (eviction, erase, abandon,
 *    a defensive remap, the destructor), the cache waits for every event of its releases that is
 *    not done yet; a page is handed to a new filler only after that, since the acquire that
 *    evicted it returns after the unmap. Releases on several streams are all waited for.
 *  - release(keys) means the caller's work on the objects is done (host code, or it synchronized).
 * A release never waits for its stream: it records an event (pooled, timing disabled) and
 * queries it once, and an event already done is dropped at once, so releases whose work finished
 * cost no wait anywhere. A wait happens under the cache's lock, so it delays the cache's other calls while
 * a thrashing pool evicts an object whose reader still runs. On the CPU the work of a call is done
 * when it returns: events are trivial and release(keys, stream) is release(keys).
 *
 * **Read-only once published.** A fill's pages are mapped writable for its filler; publish()
 * makes them read-only, and hits map pages read-only, so no holder can change the bytes that
 * every later hit is served (a write faults). On CUDA this relies on cuMemSetAccess accepting
 * read-only access (not yet run on a GPU; where refused, mappings stay read-write).
 *
 * **Bounded metadata.** An object that has no resident page left, no pin and no fill in progress
 * is forgotten: its record goes and its address range is returned. So the objects known are at
 * most the pages plus those being acquired, and kernel mappings stay within about twice the pages
 * plus the objects, however many distinct objects a long-running process loads.
 *
 * **Errors** (ccht::error, nothing changed): a zero size, an object larger than the budget, a key
 * repeated in one batch or acquired with another size than it has (invalid_size /
 * invalid_argument); publish or abandon of an object not being filled; release of an object with
 * no pin or still being filled. erase() reports per key (page_result) and refuses pinned objects.
 *
 * **Keys.** Object keys are any 64-bit values; page keys are 64-bit hashes of (key, page index),
 * so two objects collide only with probability about 2^-64 per pair of pages.
 *
 * **Limits (CPU).** Each mapped run of pages is one kernel mapping (and each gap between runs
 * another); Linux allows 65530 per process by default (vm.max_map_count), so pools of more than
 * about 30,000 small pages may need it raised. The pool is populated at construction, and a budget
 * above the memory the machine has available is refused (out_of_memory). Pages of a
 * multiple of 2 MiB use hugetlb pages when available (weight_cache_options::huge), which makes
 * mapping about 500x cheaper.
 */
#pragma once

#include <ccht/backend.hpp>
#include <ccht/cache/page_cache.hpp>
#include <ccht/core/hash.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

namespace ccht {

/// Outcome of an object acquire.
enum class object_status : std::uint8_t {
  hit = 0,       ///< every page resident and published: pinned and mapped
  fill = 1,      ///< pinned and mapped; write the pages in fill_pages, then publish (or abandon)
  pending = 2,   ///< another caller is filling the object; nothing held (see wait_ready)
  no_space = 3,  ///< too few unpinned pages; nothing held
};

/// Short name of an object_status.
constexpr char const* to_string(object_status s) noexcept {
  switch (s) {
    case object_status::hit: return "hit";
    case object_status::fill: return "fill";
    case object_status::pending: return "pending";
    case object_status::no_space: return "no_space";
  }
  return "?";
}

/// One object to acquire.
struct object_request {
  key_type key = 0;        ///< the object's key
  std::size_t bytes = 0;   ///< its size (fixed for the key's lifetime in the cache)
};

/// Result of acquiring one object.
struct object_lease {
  object_status status = object_status::no_space;  ///< see object_status
  std::byte* data = nullptr;  ///< hit / fill: the object's contiguous bytes (backend memory)
  std::size_t bytes = 0;      ///< the object's size
  /// fill: indices of the pages to write; page i is bytes [i * page_bytes, min((i + 1) *
  /// page_bytes, bytes)). The other pages already hold the object's bytes.
  std::vector<std::uint32_t> fill_pages;
};

/// Construction options of a ccht::weight_cache.
struct weight_cache_options {
  /// Pages over index slots of the page index. Lower than the page cache's default: an object
  /// pins many pages at once, and a half-empty index almost never finds both buckets of a key
  /// full of pinned pages (which would be no_space with free pages left).
  double table_ratio = 0.5;
  /// Hugetlb pages on the CPU (automatic: when page_bytes is a multiple of 2 MiB and available).
  huge_pages huge = huge_pages::automatic;
  /// CPU backend: threads of the page index's bulk calls (0: the OpenMP default).
  int cpu_threads = 0;
  /// Hash seed of the page index.
  std::uint64_t seed = default_seed;
};

/// Counters and gauges of a weight cache.
struct weight_cache_stats {
  std::uint64_t hits = 0;        ///< object acquires that were hits
  std::uint64_t fills = 0;       ///< object acquires that were fills
  std::uint64_t pending = 0;     ///< object acquires that found the object being filled
  std::uint64_t no_space = 0;    ///< object acquires refused for lack of pages
  std::uint64_t pages_filled = 0;  ///< pages handed out to fill (the missing ones only)
  std::uint64_t pages_kept = 0;    ///< pages of fill acquires that were still resident
  std::uint64_t pages_evicted = 0; ///< pages evicted from objects by acquires
  std::uint64_t publishes = 0, abandons = 0, releases = 0, erases = 0;  ///< successful calls, per object
  /// Unmaps that first waited for the stream work of an object's releases (release(keys, stream))
  std::uint64_t release_waits = 0;
  std::size_t objects = 0;         ///< objects known (resident in whole or in part)
  std::size_t objects_pinned = 0;  ///< objects holding at least one pin
  std::size_t objects_filling = 0; ///< objects being filled
  std::size_t budget_bytes = 0;    ///< the pool
  std::size_t page_bytes = 0;      ///< bytes per page
  std::size_t bytes_resident = 0;  ///< pages owned by an object x page_bytes (<= budget_bytes)
  std::size_t pages_pinned = 0;    ///< pages holding at least one pin
  bool huge_pages = false;         ///< hugetlb (CPU) or GPU large pages back the pool
};

/// Key of page @p index of object @p object (never a reserved key).
inline key_type object_page_key(key_type object, std::uint32_t index) noexcept {
  std::uint64_t const h =
      hash64(hash64(object, 0x77656967687473ull) ^ (std::uint64_t{index} * 0x9e3779b97f4a7c15ull),
             0x706167655f6b6579ull);
  return is_reserved_key(h) ? h - 2 : h;
}

/**
 * @brief Objects of any size over a page pool, each contiguous while resident. Thread-safe:
 *        every call may run concurrently with every other from many host threads.
 * @tparam Backend ccht::cpu_backend or ccht::cuda_backend
 * @tparam Events where release(keys, stream) records its event and how the cache waits for it:
 *         the backend (default). A substitute provides stream_type, event_type and the static
 *         record_event(stream), event_done(e), wait_event(e) and free_event(e) (noexcept) of
 *         ccht::cpu_backend; the tests use one that records the cache's waits.
 */
template <class Backend, class Events = Backend>
class weight_cache {
 public:
  using backend_type = Backend;                 ///< backend tag
  using page_cache_type = page_cache<Backend>;  ///< the page layer
  using stream_type = typename Events::stream_type;  ///< stream of release(keys, stream)
  using event_type = typename Events::event_type;    ///< what release(keys, stream) records

  /**
   * @brief A pool of exactly @p budget_bytes in pages of @p page_bytes, and its index.
   * @throws ccht::error invalid_size when page_bytes does not divide budget_bytes or is not a
   *         multiple of the mapping granularity (the system page; the GPU's allocation
   *         granularity on CUDA); out_of_memory when the pool cannot be allocated
   */
  weight_cache(std::size_t budget_bytes, std::size_t page_bytes, weight_cache_options options = {});
  ~weight_cache();
  weight_cache(weight_cache const&) = delete;
  weight_cache& operator=(weight_cache const&) = delete;

  /// Bytes per page.
  std::size_t page_bytes() const noexcept { return pages_.page_bytes(); }
  /// The pool's bytes (the budget).
  std::size_t budget_bytes() const noexcept { return pages_.num_pages() * pages_.page_bytes(); }
  /// Pages of the pool.
  std::size_t num_pages() const noexcept { return pages_.num_pages(); }
  /// Pages an object of @p bytes uses.
  std::size_t pages_for(std::size_t bytes) const noexcept {
    return bytes / page_bytes() + (bytes % page_bytes() != 0);  // no overflow near SIZE_MAX
  }
  /// The page layer (for inspection).
  page_cache_type const& pages() const noexcept { return pages_; }

  /**
   * @brief Acquires each object: a hit, a fill, pending or no_space per element (object_status).
   * @param leases one per request (at least requests.size())
   * @throws ccht::error before anything changes, for the errors listed in the file comment
   */
  void acquire(std::span<object_request const> requests, std::span<object_lease> leases);
  /// Marks filled objects ready; they stay pinned. @throws ccht::error invalid_argument for a key
  /// that is not being filled (then nothing changed)
  void publish(std::span<key_type const> keys);
  /// Gives up fills: the filled pages are freed, the pin released. @throws like publish()
  void abandon(std::span<key_type const> keys);
  /// Releases one pin per key; the caller's work on the objects is done (host code, or it
  /// synchronized). @throws ccht::error invalid_argument for an unknown key, one with no pin, or
  /// one still being filled (then nothing changed)
  void release(std::span<key_type const> keys);
  /**
   * @brief Releases one pin per key after the work enqueued on @p stream so far: no page of these
   *        objects is unmapped, remapped or given to another object before that work is done
   *        (the eviction or erase that needs one waits for it; see "Stream-ordered release").
   *
   * Records one event on @p stream for the whole batch and never waits for it here.
   * @throws like release(keys); or ccht::error when recording the event fails (nothing changed)
   */
  void release(std::span<key_type const> keys, stream_type stream);
  /**
   * @brief Erases unpinned objects: their pages are freed and their ranges returned.
   * @param results per key (may be empty): ok, unknown_key, pinned (held or being acquired) or
   *        filling
   * @return the number erased
   */
  std::size_t erase(std::span<key_type const> keys, std::span<page_result> results = {});
  /**
   * @brief Waits until none of @p keys is being filled (published or abandoned), or @p timeout
   *        (a century or more: no limit).
   * @return true when none is being filled
   */
  bool wait_ready(std::span<key_type const> keys,
                  std::chrono::milliseconds timeout = std::chrono::seconds(60));

  /// Counters and gauges (a snapshot under concurrency).
  weight_cache_stats stats() const;

 private:
  struct record;
  struct fence;
  struct owner {
    record* rec = nullptr;
    std::uint32_t index = 0;
  };
  using status_vector = std::vector<page_status>;

  record* find_locked(key_type key) const;
  void evicted_locked(std::span<page_id const> pages);
  void map_locked(record& r, std::span<page_id const> pages, std::span<page_status const> status);
  void forget_if_idle_locked(record* r);
  void protect_fill_locked(record const& r);
  void take_locked(std::span<object_request const> requests, std::span<object_lease> leases,
                   std::vector<record*>& recs);
  void unmap_locked(record& r, std::uint32_t first, std::uint32_t count);
  std::size_t page_acquire(std::span<key_type const> keys, std::span<page_id> pages,
                           std::span<page_status> status, std::vector<page_id>& evicted);
  void page_op(detail::page_op op, std::span<key_type const> keys,
               std::span<page_result> results);
  void keys_of(record const& r, std::span<std::uint32_t const> indices, std::vector<key_type>& out) const;
  void release_impl(std::span<key_type const> keys, stream_type const* stream);
  fence* record_fence_locked(stream_type stream);
  void poll_fences_locked();
  void fence_done_locked(fence* f) noexcept;
  void drop_fence_locked(fence* f) noexcept;
  void wait_fences_locked(record& r);
  void drop_fences_locked(record& r) noexcept;

  page_cache_type pages_;
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::unordered_map<key_type, std::unique_ptr<record>> objects_;
  std::vector<owner> owners_;  ///< per page: the object range it is mapped in
  weight_cache_stats counts_{};
  std::vector<std::unique_ptr<fence>> fences_;  ///< every fence made (reused, never shrinks)
  std::vector<fence*> spare_fences_;            ///< fences no record names
  std::vector<fence*> pending_fences_;          ///< fences whose work may still run
};

}  // namespace ccht

#include <ccht/cache/detail/weight_cache_impl.hpp>
