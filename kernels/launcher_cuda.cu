// CUDA backend of ccht::table: detail::launcher<cuda_backend> (declared in
// include/ccht/detail/launcher.hpp), over the kernels of bulk_kernels.cuh. The policy-templated
// batches (find, insert_or_assign, execute) are in launcher_cuda.cuh, built one policy per
// translation unit; this file holds everything else.
//
// Every keyed batch is two launches on its stream: validate_batch_kernel (reserved keys, op
// codes, the count word, the batch's ticks) and the operation kernel, which does nothing when the
// batch was rejected. The batch's device words (count, reject words, first tick) are per call,
// never per table, so that batches from several host threads and streams can run at once without
// sharing a counter or a reject flag, and no call takes a lock:
// - a synchronous call uses its thread's words (thread_words(): one small allocation per host
//   thread and device, made once). The call waits for its stream before it returns, so the words
//   are free again for the thread's next call. Invariant: the reject words read no_reject between
//   calls; validate_batch_kernel zeroes the count and writes the tick, and only a rejected batch
//   (rare) costs a reset.
// - an asynchronous call gets its own words from a stream-ordered pool, initialises its reject
//   words with one memset and frees the words stream-ordered after its kernel; a rejection is also
//   recorded in the table's sticky words for check_async_error().
// Synchronous calls given the default stream run on the calling thread's per-thread default
// stream (sync_stream()), so calls from several host threads do not serialise on the legacy stream.
// Before launching, every entry point checks that no CUDA error is pending from earlier work
// (check_no_pending_error), so the error read after its own launch is its own.
#include "launcher_cuda.cuh"
#include "words_pool.hpp"

#include <ccht/backend.hpp>
#include <ccht/core/bucket.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/detail/launcher.hpp>
#include <ccht/detail/validate.hpp>
#include <ccht/error.hpp>

#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ccht::detail {

using namespace cuda_batch;

namespace {

using cuda_launcher = launcher<cuda_backend>;

/// Words per call: [0] count, [1] reserved-key index, [2] bad op code (packed), [3] first tick.
constexpr std::size_t num_call_words = 4;
constexpr std::size_t call_words_bytes = num_call_words * sizeof(std::size_t);

int current_device() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

/// Makes the device that holds @p p current for the scope, then the caller's again: a table may
/// live on another device than the one the calling thread has current.
class device_scope {
 public:
  explicit device_scope(void const* p) : caller_(current_device()) {
    cudaPointerAttributes a{};
    check_cuda(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes");
    if (a.type == cudaMemoryTypeDevice && a.device != caller_) {
      check_cuda(cudaSetDevice(a.device), "cudaSetDevice");
      switched_ = true;
    }
  }
  ~device_scope() {
    if (switched_ && cudaSetDevice(caller_) != cudaSuccess) { (void)cudaGetLastError(); }
  }
  device_scope(device_scope const&) = delete;
  device_scope& operator=(device_scope const&) = delete;

 private:
  int caller_;
  bool switched_ = false;
};

// ---- per-call device words -----------------------------------------------------------------------

/// The reject words' resting value, and the initial value of all of a thread's words.
constexpr std::size_t initial_words[num_call_words] = {0, no_reject, no_reject, 0};

/**
 * The calling thread's words for synchronous calls on the current device (see the file comment).
 * Allocated and initialised on first use; freed when the thread exits (errors ignored: at process
 * exit the runtime may be gone, and the memory with it).
 */
std::size_t* thread_words() {
  struct entry {
    int device;
    std::size_t* words;
  };
  struct cache {
    std::vector<entry> entries;
    ~cache() {
      for (entry const& e : entries) { (void)cudaFree(e.words); }
    }
  };
  thread_local cache c;
  int const device = current_device();
  for (entry const& e : c.entries) {
    if (e.device == device) { return e.words; }
  }
  auto* words = static_cast<std::size_t*>(cuda_backend::allocate(call_words_bytes));
  cudaError_t const copied =
      cudaMemcpy(words, initial_words, call_words_bytes, cudaMemcpyHostToDevice);
  if (copied != cudaSuccess) {
    cuda_backend::deallocate(words);
    check_cuda(copied, "cudaMemcpy (call words)");
  }
  c.entries.push_back({device, words});
  return words;
}

/// Copies a thread's words to @p host after the work on @p stream, and restores the reject words'
/// resting value if the call left a rejection in them.
void read_thread_words(std::size_t* words, std::size_t host[num_call_words], cudaStream_t stream) {
  check_cuda(cudaMemcpyAsync(host, words, call_words_bytes, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (call words)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (host[1] != no_reject || host[2] != no_reject) {
    check_cuda(cudaMemcpy(words + 1, initial_words + 1, 2 * sizeof(std::size_t),
                          cudaMemcpyHostToDevice),
               "cudaMemcpy (call words reset)");
  }
}

/// Message for a rejected op code, as the CPU backend words it (check_ops_host).
std::string bad_op_message(char const* op, std::size_t packed) {
  return std::string(op) + ": op code at index " + std::to_string(packed >> 8) + " (" +
         std::to_string(packed & 0xffu) + ") is not a ccht::op_code";
}

}  // namespace

// ---- per-call words of asynchronous calls, launch helpers (launcher_cuda.cuh) ------------------

std::size_t* cuda_batch::allocate_words(cudaStream_t stream) {
  int const device = current_device();
  cudaMemPool_t const pool = words_pool(device);
  void* p = nullptr;
  if (pool != nullptr) {
    check_cuda(cudaMallocFromPoolAsync(&p, call_words_bytes, pool, stream),
               "cudaMallocFromPoolAsync");
  } else {
    p = cuda_backend::allocate(call_words_bytes);
  }
  auto* words = static_cast<std::size_t*>(p);
  // The count and the tick are written by validate_batch_kernel; only the reject words need a
  // value first (all bytes 0xff is no_reject).
  cudaError_t const set = cudaMemsetAsync(words + 1, 0xff, 2 * sizeof(std::size_t), stream);
  if (set != cudaSuccess) {
    if (pool != nullptr) {
      (void)cudaFreeAsync(words, stream);
    } else {
      cuda_backend::deallocate(words);
    }
    check_cuda(set, "cudaMemsetAsync (call words)");
  }
  return words;
}

void cuda_batch::free_words(std::size_t* words, cudaStream_t stream) noexcept {
  if (words == nullptr) { return; }
  cudaMemPool_t pool = nullptr;
  try {
    pool = words_pool(current_device());
  } catch (...) {
  }
  if (pool != nullptr) {
    if (cudaFreeAsync(words, stream) != cudaSuccess) { (void)cudaGetLastError(); }
  } else {
    cuda_backend::deallocate(words);  // synchronises the device: only without memory pools
  }
}

void cuda_batch::check_launch(char const* what) { check_cuda(cudaGetLastError(), what); }

unsigned cuda_batch::blocks_for(std::size_t n, std::size_t per_block, unsigned cap) {
  std::size_t const b = (n + per_block - 1) / per_block;
  if (b > static_cast<std::size_t>(INT_MAX)) {
    throw error(error_code::invalid_size,
                "batch of " + std::to_string(n) + " elements exceeds one CUDA grid");
  }
  return static_cast<unsigned>(b < cap ? (b == 0 ? 1 : b) : cap);
}

void cuda_batch::validate(table_state const& s, key_type const* keys, op_code const* ops,
                          std::size_t n, batch_words const& w, std::size_t* count,
                          bool take_ticks, cudaStream_t stream) {
  unsigned const blocks = blocks_for(n, kernels::stream_block_threads, max_stream_blocks);
  kernels::validate_batch_kernel<<<blocks, kernels::stream_block_threads, 0, stream>>>(
      keys, ops, n, w.reject(), w.sticky(s), count, take_ticks ? s.clock : nullptr);
  check_launch("validate_batch_kernel launch");
}


// ---- storage -------------------------------------------------------------------------------------

void cuda_launcher::create(table_state& s, std::uint32_t num_buckets, std::uint64_t seed,
                          bool count_accesses) {
  try {
    std::size_t const bucket_bytes = std::size_t{num_buckets} * sizeof(bucket<B>);
    s.view.buckets = static_cast<bucket<B>*>(cuda_backend::allocate(bucket_bytes));
    s.view.versions = static_cast<std::uint32_t*>(
        cuda_backend::allocate(std::size_t{num_buckets} * sizeof(std::uint32_t)));
    // Clock and sticky words share one allocation, on separate 128-byte lines: the clock takes
    // an atomic per batch and per ref call, the sticky words only on rejections.
    // The live-entry word of the global capacity layer has a line of its own too.
    auto* misc = static_cast<char*>(cuda_backend::allocate(512));
    s.clock = reinterpret_cast<tick_type*>(misc);
    s.sticky_reject = reinterpret_cast<std::size_t*>(misc + 128);
    s.view.live = s.view.capacity != 0 ? reinterpret_cast<std::uint64_t*>(misc + 256) : nullptr;
    // The own-first search's victim age has a line of its own as well: it is written on every
    // global victim, and the live word, read by every insert, only below the capacity.
    s.view.victim_age = s.own_first ? reinterpret_cast<score_type*>(misc + 384) : nullptr;
    // The upper level of the two-level index follows the tails, in the same allocation.
    std::size_t const tail_words =
        s.tail_index ? std::size_t{num_buckets} + (s.upper_index ? tail_index_lines(num_buckets) : 0)
                     : 0;
    if (s.tail_index) {
      s.view.tails = static_cast<score_type*>(cuda_backend::allocate(tail_words * sizeof(score_type)));
      if (s.upper_index) { s.view.upper = s.view.tails + num_buckets; }
    }
    if (count_accesses) {
      s.counts = static_cast<access_counts*>(cuda_backend::allocate(sizeof(access_counts)));
    }
    s.view.num_buckets = num_buckets;
    s.view.seed = seed;

    // Same initial state as the CPU backend: keys empty, values and scores 0, versions 0.
    // Legacy default stream, then a wait: streams created non-blocking must see it done.
    cudaStream_t const stream = nullptr;
    check_cuda(cudaMemsetAsync(s.view.buckets, 0, bucket_bytes, stream), "cudaMemsetAsync");
    check_cuda(cudaMemset2DAsync(s.view.buckets, sizeof(bucket<B>), 0xff, sizeof(key_type) * B,
                                 num_buckets, stream),
               "cudaMemset2DAsync (empty keys)");
    check_cuda(cudaMemsetAsync(s.view.versions, 0, std::size_t{num_buckets} * sizeof(std::uint32_t),
                               stream),
               "cudaMemsetAsync");
    check_cuda(cudaMemsetAsync(misc, 0, 128, stream), "cudaMemsetAsync");
    check_cuda(cudaMemsetAsync(misc + 128, 0xff, 128, stream), "cudaMemsetAsync");  // no_reject
    check_cuda(cudaMemsetAsync(misc + 256, 0, 256, stream), "cudaMemsetAsync");      // live, victim age
    if (s.counts != nullptr) {
      check_cuda(cudaMemsetAsync(s.counts, 0, sizeof(access_counts), stream), "cudaMemsetAsync");
    }
    if (s.view.tails != nullptr) {  // no_rank: every bucket is empty
      check_cuda(cudaMemsetAsync(s.view.tails, 0xff, tail_words * sizeof(score_type), stream),
                 "cudaMemsetAsync (tail index)");
    }
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  } catch (...) {
    destroy(s);
    throw;
  }
}

void cuda_launcher::destroy(table_state& s) noexcept {
  cuda_backend::deallocate(s.view.buckets);
  cuda_backend::deallocate(s.view.versions);
  cuda_backend::deallocate(s.clock);  // also frees the sticky words (same allocation)
  cuda_backend::deallocate(s.view.tails);
  cuda_backend::deallocate(s.counts);
  s = {};
}

// No pending-error check here: the entry point that launches checks, under its own name.
std::size_t* cuda_launcher::acquire_words(stream_type) { return thread_words(); }

cuda_launcher::stream_type cuda_launcher::sync_stream(stream_type stream) noexcept {
  return stream == nullptr ? cudaStreamPerThread : stream;
}

// The counters take adds from every batch, on whatever stream it was given, non-blocking ones
// included, which a legacy-stream cudaMemcpy or cudaMemset does not wait for. So both calls wait
// for the whole device first (the contract in table.hpp), then finish their own copy or memset
// before returning, so a batch issued after them is counted from the new value.
access_counts cuda_launcher::read_counts(table_state const& s) {
  access_counts c{};
  if (s.counts != nullptr) {
    device_scope const on(s.counts);
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (access counters)");
    check_cuda(cudaMemcpyAsync(&c, s.counts, sizeof(c), cudaMemcpyDeviceToHost,
                               cudaStreamPerThread),
               "cudaMemcpyAsync (access counters)");
    check_cuda(cudaStreamSynchronize(cudaStreamPerThread), "cudaStreamSynchronize");
  }
  return c;
}

void cuda_launcher::reset_counts(table_state const& s) {
  if (s.counts != nullptr) {
    device_scope const on(s.counts);
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (access counters)");
    check_cuda(cudaMemsetAsync(s.counts, 0, sizeof(access_counts), cudaStreamPerThread),
               "cudaMemsetAsync (access counters)");
    check_cuda(cudaStreamSynchronize(cudaStreamPerThread), "cudaStreamSynchronize");
  }
}

void cuda_launcher::release_words(std::size_t* words, std::size_t host[2], stream_type stream) {
  std::size_t all[num_call_words];
  read_thread_words(words, all, stream);
  host[0] = all[0];
  host[1] = all[1];
  // Only execute() can reject an op code; the CPU backend reports it before reserved keys.
  if (all[2] != no_reject) { throw error(error_code::invalid_argument, bad_op_message("execute", all[2])); }
}

void cuda_launcher::check_async_error(table_state const& s, stream_type stream) {
  check_no_pending_error("check_async_error");
  std::size_t* words = thread_words();
  kernels::take_sticky_kernel<<<1, 1, 0, stream>>>(s.sticky_reject, words);
  check_launch("take_sticky_kernel launch");
  std::size_t host[num_call_words];
  read_thread_words(words, host, stream);  // also puts the reject words back to rest
  if (host[2] != no_reject) {
    throw error(error_code::invalid_argument,
                bad_op_message("an earlier execute_async batch was skipped", host[2]));
  }
  if (host[1] != no_reject) {
    throw error(error_code::reserved_key,
                "an earlier _async batch was skipped: its key at index " +
                    std::to_string(host[1]) +
                    " is a reserved sentinel; user keys must be below " +
                    std::to_string(claimed_key));
  }
}

// ---- whole-table operations ----------------------------------------------------------------------

std::size_t cuda_launcher::size(table_state const& s, stream_type stream) {
  check_no_pending_error("size");
  std::size_t* words = thread_words();
  std::size_t const slots = std::size_t{s.view.num_buckets} * B;
  unsigned const blocks = blocks_for(slots, kernels::stream_block_threads, max_stream_blocks);
  check_cuda(cudaMemsetAsync(words, 0, sizeof(std::size_t), stream), "cudaMemsetAsync (count)");
  kernels::size_kernel<B><<<blocks, kernels::stream_block_threads, 0, stream>>>(s.view, words);
  check_launch("size_kernel launch");
  std::size_t host[num_call_words];
  read_thread_words(words, host, stream);
  return host[0];
}

void cuda_launcher::clear(table_state const& s, stream_type stream) {
  check_no_pending_error("clear");
  unsigned const blocks = blocks_for(s.view.num_buckets, shape::tiles_per_block, max_stream_blocks);
  kernels::clear_kernel<B, tile_size><<<blocks, shape::block_threads, 0, stream>>>(s.view);
  check_launch("clear_kernel launch");
  if (s.view.victim_age != nullptr) {  // an empty table has no victim age yet
    check_cuda(cudaMemsetAsync(s.view.victim_age, 0, sizeof(score_type), stream), "cudaMemsetAsync");
  }
}

std::size_t cuda_launcher::export_entries(table_state const& s, key_type* keys, value_type* values,
                                          std::size_t capacity, stream_type stream) {
  check_no_pending_error("export_entries");
  std::size_t* words = thread_words();
  unsigned const blocks = blocks_for(s.view.num_buckets, shape::tiles_per_block, max_stream_blocks);
  check_cuda(cudaMemsetAsync(words, 0, sizeof(std::size_t), stream), "cudaMemsetAsync (count)");
  kernels::export_kernel<B, tile_size>
      <<<blocks, shape::block_threads, 0, stream>>>(s.view, keys, values, capacity, words);
  check_launch("export_kernel launch");
  std::size_t host[num_call_words];
  read_thread_words(words, host, stream);
  return host[0];
}

// ---- keyed batches -------------------------------------------------------------------------------

void cuda_launcher::contains(table_state const& s, key_type const* keys, bool* found,
                             std::size_t n, std::size_t* reject, stream_type stream) {
  check_no_pending_error("contains");
  if (n == 0) { return; }
  batch_words const w(reject, stream);
  validate(s, keys, nullptr, n, w, nullptr, false, stream);
  kernels::contains_kernel<B, tile_size>
      <<<blocks_for(n, shape::items_per_block), shape::block_threads, 0, stream>>>(
          s.view, keys, found, n, w.reject(), s.counts);
  check_launch("contains_kernel launch");
}

void cuda_launcher::erase(table_state const& s, key_type const* keys, std::size_t n,
                          std::size_t* num_erased, std::size_t* reject, stream_type stream) {
  check_no_pending_error("erase");
  if (n == 0) {
    if (num_erased != nullptr) {
      check_cuda(cudaMemsetAsync(num_erased, 0, sizeof(std::size_t), stream), "cudaMemsetAsync");
    }
    return;
  }
  batch_words const w(reject, stream);
  validate(s, keys, nullptr, n, w, num_erased, false, stream);
  kernels::erase_kernel<B, tile_size>
      <<<blocks_for(n, shape::items_per_block), shape::block_threads, 0, stream>>>(
          s.view, keys, n, num_erased, w.reject(), s.counts);
  check_launch("erase_kernel launch");
}

}  // namespace ccht::detail
