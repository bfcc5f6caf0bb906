/**
 * @file table.hpp
 * @brief ccht::table: the CCHT index, a bucketized cuckoo hash table whose per-bucket
 *        replacement policy replaces cuckoo kick-out.
 *
 * Members are defined once for every backend in detail/table_impl.hpp (argument checks, sync
 * wrappers); each backend implements detail::launcher<Backend> (detail/launcher.hpp).
 */
#pragma once

#include <ccht/backend.hpp>
#include <ccht/core/bucket.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/core/types.hpp>
#include <ccht/detail/launcher.hpp>
#include <ccht/error.hpp>
#include <ccht/table_ref.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ccht {

/**
 * @brief How the global layer of ccht::double_lru and ccht::lru_cht finds its victim (see
 *        core/global.hpp and docs/global-layer.md). coarse_lru and random_cht always sample.
 */
enum class victim_search {
  /// A word per bucket holding a lower bound of its oldest score, 16 buckets per 128-byte line:
  /// an eviction ranks `global_samples` buckets (rounded up to 16, at most 64) by reading their
  /// lines, then verifies the best under its lock. 8 bytes per bucket.
  tail_index,
  /// Read `global_samples` buckets themselves and evict the oldest of their tails.
  sampled,
  /// The tail index plus one word per line (a lower bound of its 16 words), 16 per upper line:
  /// an eviction ranks `global_samples` buckets (rounded up to 256, at most 1024) by reading
  /// their upper lines and descending into the best line. 8.5 bytes per bucket. The default.
  two_level,
  /// An insert at the capacity evicts the oldest entry of its own two buckets, which it has
  /// already read, when that entry is nearly as old as recent global victims
  /// (`own_first_slack`); otherwise it searches the two-level index. Costs the two-level
  /// index plus one word. Kick-out policies (lru_cht) never evict in their own buckets and
  /// search the two-level index.
  own_first,
};

/// Buckets a tail-index search ranks by default: four lines (docs/global-layer.md).
inline constexpr std::uint32_t default_tail_samples = 64;
/**
 * @brief The victim search named @p name, as the CLI and the Python package spell it:
 *        "tail-index", "two-level", "own-first" or "sampled".
 * @throws ccht::error invalid_argument for any other name (the message lists the valid ones)
 */
inline victim_search parse_victim_search(std::string_view name) {
  if (name == "tail-index") { return victim_search::tail_index; }
  if (name == "two-level") { return victim_search::two_level; }
  if (name == "sampled") { return victim_search::sampled; }
  if (name == "own-first") { return victim_search::own_first; }
  throw error(error_code::invalid_argument,
              "victim search must be tail-index, two-level, own-first or sampled, not '" +
                  std::string(name) + "'");
}

/// Buckets a two-level search ranks by default: one upper line (docs/global-layer.md).
inline constexpr std::uint32_t default_two_level_samples = 256;
/// Default table_options::own_first_slack (docs/global-layer.md).
inline constexpr std::uint32_t default_own_first_slack = 0;
/// Buckets a sampled search reads by default (docs/global-layer.md).
inline constexpr std::uint32_t default_sampled_buckets = 8;
/// Most buckets table_options::global_samples may ask for (a sampled eviction reads each).
inline constexpr std::uint32_t max_global_samples = 1024;

/// Construction options of a ccht::table.
struct table_options {
  /// Hash seed; tables with different seeds place keys differently.
  std::uint64_t seed = default_seed;
  /// CPU backend: worker threads per bulk call (0: the OpenMP default). Ignored on CUDA.
  int cpu_threads = 0;
  /**
   * Most entries held, at most the slots (0: the slots). Below the slots only for policies with a
   * global capacity layer (ccht::double_lru, ccht::coarse_lru): the paper's cache/table ratio is
   * capacity / num_slots().
   */
  std::size_t capacity = 0;
  /// Global capacity layer: buckets ranked per global eviction, at most max_global_samples; 0
  /// picks the search's default (default_tail_samples for the tail index, else
  /// default_sampled_buckets).
  std::uint32_t global_samples = 0;
  /// Global capacity layer of double_lru and lru_cht: how the victim is found.
  victim_search global_search = victim_search::two_level;
  /// victim_search::own_first only: how much younger than the last global victim an own
  /// bucket's oldest entry may be and still be evicted in place, in 256ths (0 to 255).
  /// Larger is cheaper (fewer global searches) and evicts younger entries.
  std::uint32_t own_first_slack = default_own_first_slack;
  /**
   * ccht::double_lru on the CPU backend: a bulk insert_or_assign() or execute() whose new keys
   * need at least one victim per bucket of the table (need >= num_buckets) chooses the `need`
   * oldest entries in one pass over the table (a histogram of their scores) and hands them to
   * its inserts in bucket order, instead of one global search per insert. A chosen victim that
   * was touched, pinned or removed meanwhile is skipped, and an insert left without one searches
   * as usual, so what holds for the search (reports, capacity, pins) holds here. The choice
   * takes about 16 bytes of host memory per victim for the call (without it the inserts search).
   * On by default; off measures the search alone (docs/global-layer.md, "Bulk victim select").
   * The CUDA backend always searches.
   */
  bool bulk_victim_select = true;
  /// Count buckets and bytes touched by bulk operations (see access_stats()). Off by default.
  bool count_accesses = false;
};

/**
 * @brief A fixed-size cache index over 64-bit keys and 64-bit payloads.
 *
 * Each key has two candidate buckets of `bucket_size` slots. An insert that finds neither its key
 * nor a free slot evicts the policy's victim of the two buckets (never kicks out), and reports the
 * evicted pair to the caller. So every operation touches at most two buckets.
 *
 * **Buffers.** Spans passed to bulk operations point to backend memory: host memory for
 * ccht::cpu_backend, device (or managed) memory for ccht::cuda_backend.
 *
 * **Errors.** Bad input throws ccht::error before anything is modified: zero or disagreeing sizes,
 * null buffers with a non-zero size, reserved keys (see ccht::is_reserved_key). A batch of size 0
 * is a no-op. On the CUDA backend an `_async` call checks sizes and pointers on the host; a batch
 * with a reserved key is skipped whole on the device and reported by check_async_error().
 *
 * **Concurrency.** Lookups, upserts and erases on overlapping keys may run at the same time: within
 * one batch, from many host threads, across streams, and through refs in user kernels. A find
 * returns the latest value written for its key or a miss, never a torn value or another key's
 * value, and no key is ever present twice. Within one batch the elements have no defined order
 * (on the CPU backend with one thread they run in index order). clear() may also run
 * concurrently; it empties one bucket at a time.
 *
 * **Streams (CUDA).** A call without the `_async` suffix returns when its work is done. Given
 * the default stream (a null cudaStream_t), it runs on the calling thread's per-thread default
 * stream (cudaStreamPerThread), which is ordered after earlier work on the legacy default stream,
 * so synchronous calls from several host threads overlap instead of queueing on the legacy
 * stream. Given any other stream, it runs on that stream. `_async` calls run on exactly the
 * stream given (null: the legacy default stream). No call takes a process-wide lock. Before it
 * launches, a call throws ccht::error if a CUDA error from earlier, unrelated work is pending,
 * and says so; an error after its own launch is reported as its own.
 *
 * **Ticks.** Every element of a batch gets its own tick from the table's logical clock, in index
 * order, so a serial run follows the policy exactly (see ccht::lru, ccht::fifo, ccht::lfu).
 *
 * @tparam Backend ccht::cpu_backend or ccht::cuda_backend
 * @tparam Policy in-bucket policy: ccht::lru (default), ccht::fifo, ccht::lfu
 */
template <class Backend, class Policy = lru>
class table {
 public:
  using backend_type = Backend;                        ///< backend tag
  using policy_type = Policy;                          ///< in-bucket policy
  using stream_type = typename Backend::stream_type;   ///< stream for `_async` calls
  using key_type = ccht::key_type;                     ///< 64-bit key
  using value_type = ccht::value_type;                 ///< 64-bit payload
  static constexpr int bucket_size = default_bucket_size;  ///< slots per bucket
  /// Per-key handle: usable from host threads on the CPU backend, from kernels on CUDA.
  using ref_type = table_ref<Policy, bucket_size, typename Backend::memory_space>;

  /**
   * @brief Allocates an empty table of at least @p num_slots slots.
   *
   * Slots are rounded up to whole buckets, and to at least two buckets.
   * @throws ccht::error invalid_size if num_slots is 0 or above 2^32 buckets, or the capacity
   *         above the slots; invalid_argument for a capacity below the slots without a global
   *         layer, or global_samples above max_global_samples; out_of_memory or cuda_failure if
   *         allocation fails.
   */
  explicit table(std::size_t num_slots, table_options options = {});
  ~table();
  table(table const&) = delete;
  table& operator=(table const&) = delete;
  /// Moves the storage; the source becomes empty of storage and must not be used.
  table(table&& other) noexcept;
  /// Moves the storage.
  table& operator=(table&& other) noexcept;

  /// Number of slots (buckets x bucket_size).
  std::size_t num_slots() const noexcept { return num_buckets() * bucket_size; }
  /// Number of buckets.
  std::size_t num_buckets() const noexcept { return state_.view.num_buckets; }
  /// Options the table was built with.
  table_options const& options() const noexcept { return options_; }
  /// Most entries the table holds (options().capacity, or the slots).
  std::size_t capacity() const noexcept {
    return state_.view.capacity ? state_.view.capacity : num_slots();
  }
  /**
   * @brief Buckets and bytes touched by every bulk operation since construction or the last
   *        reset, when options().count_accesses is set (zeros otherwise). Refs in user kernels
   *        are not counted.
   *
   * On CUDA the counters live on the device and every batch adds to them on its own stream. This
   * call first waits for all work on the table's device (cudaDeviceSynchronize: every stream,
   * non-blocking ones and other libraries' work included), then copies them: the result counts
   * every batch, synchronous or `_async`, issued before the call on any stream. A batch that
   * another host thread issues meanwhile may or may not be counted. Being a device-wide wait, it
   * must not be called while a stream capture in cudaStreamCaptureModeGlobal is in progress, and
   * it reports an error left by earlier asynchronous work as a ccht::error.
   * @throws ccht::error on a CUDA failure
   */
  access_counts access_stats() const { return launcher::read_counts(state_); }
  /**
   * @brief Sets the access counters to zero. On CUDA it waits for all work on the table's device
   *        first, as access_stats() does, and the zeros are written before it returns: batches
   *        issued before the call are not counted afterwards, batches issued after it are.
   * @throws ccht::error on a CUDA failure
   */
  void reset_access_stats() { launcher::reset_counts(state_); }

  /// Number of entries (a snapshot when writers run concurrently).
  std::size_t size(stream_type stream = {}) const;
  /// Removes every entry. Does not report them as evicted.
  void clear(stream_type stream = {});

  /**
   * @brief Looks up every key; a hit writes the value and promotes the entry.
   * @param keys keys to look up
   * @param values_out values of hits (untouched for misses); same size as keys
   * @param found_out whether each key was found; same size as keys
   */
  void find(std::span<key_type const> keys, std::span<value_type> values_out,
            std::span<bool> found_out, stream_type stream = {});
  /// Stream-ordered find(); returns before completion on the CUDA backend.
  void find_async(std::span<key_type const> keys, std::span<value_type> values_out,
                  std::span<bool> found_out, stream_type stream = {});

  /// Whether each key is present, without promoting anything.
  void contains(std::span<key_type const> keys, std::span<bool> found_out,
                stream_type stream = {}) const;
  /// Stream-ordered contains().
  void contains_async(std::span<key_type const> keys, std::span<bool> found_out,
                      stream_type stream = {}) const;

  /**
   * @brief Upserts every (key, value) pair.
   *
   * Pairs evicted to make room are written to @p evicted_keys / @p evicted_values, whose size must
   * be at least keys.size() (one victim per insert at most).
   * @return the number of evicted pairs written
   */
  std::size_t insert_or_assign(std::span<key_type const> keys, std::span<value_type const> values,
                               std::span<key_type> evicted_keys,
                               std::span<value_type> evicted_values, stream_type stream = {});
  /// Stream-ordered insert_or_assign(); the eviction count goes to @p num_evicted (backend memory).
  void insert_or_assign_async(std::span<key_type const> keys, std::span<value_type const> values,
                              std::span<key_type> evicted_keys,
                              std::span<value_type> evicted_values, std::size_t* num_evicted,
                              stream_type stream = {});

  /// Erases every key. @return the number of keys that were present
  std::size_t erase(std::span<key_type const> keys, stream_type stream = {});
  /// Stream-ordered erase(); the count goes to @p num_erased (backend memory, may be null).
  void erase_async(std::span<key_type const> keys, std::size_t* num_erased,
                   stream_type stream = {});

  /**
   * @brief A mixed batch: element i is a find, an upsert or an erase (ops[i]) of keys[i], all in
   *        one call (one kernel launch on the GPU), running concurrently.
   * @param ops what each element does
   * @param keys the keys
   * @param values upsert values (read for upserts only); same size as keys
   * @param values_out found values (written for hits only); same size as keys
   * @param status_out per-element outcome (see ccht::op_status); same size as keys
   * @param evicted_keys,evicted_values victims of upserts; at least keys.size() each
   * @return the number of evicted pairs written
   */
  std::size_t execute(std::span<op_code const> ops, std::span<key_type const> keys,
                      std::span<value_type const> values, std::span<value_type> values_out,
                      std::span<op_status> status_out, std::span<key_type> evicted_keys,
                      std::span<value_type> evicted_values, stream_type stream = {});
  /// Stream-ordered execute(); the eviction count goes to @p num_evicted (backend memory).
  void execute_async(std::span<op_code const> ops, std::span<key_type const> keys,
                     std::span<value_type const> values, std::span<value_type> values_out,
                     std::span<op_status> status_out, std::span<key_type> evicted_keys,
                     std::span<value_type> evicted_values, std::size_t* num_evicted,
                     stream_type stream = {});

  /**
   * @brief Copies every entry out (each bucket read consistently).
   *
   * Writes min(size, capacity) pairs where capacity = keys_out.size() (== values_out.size()).
   * @return the number of entries found; larger than the capacity means the output was truncated
   */
  std::size_t export_entries(std::span<key_type> keys_out, std::span<value_type> values_out,
                             stream_type stream = {}) const;

  /// On the CUDA backend, throws if an earlier `_async` batch was rejected; a no-op on the CPU.
  void check_async_error(stream_type stream = {});

  /**
   * @brief Trivially copyable handle for per-key calls (see ccht::table_ref).
   *
   * A CPU table's ref may be used from any host thread. A CUDA table's ref points to device
   * memory: pass it to a kernel by value; calling its operations from host code does not compile.
   */
  ref_type ref() const noexcept { return ref_type(state_.view, state_.clock); }

 private:
  using launcher = detail::launcher<Backend>;

  detail::table_state state_{};
  table_options options_{};
};

}  // namespace ccht

#include <ccht/detail/table_impl.hpp>
