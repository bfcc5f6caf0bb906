// CUDA backend of ccht::page_cache: detail::page_launcher<cuda_backend> (declared in
// include/ccht/cache/detail/page_launcher.hpp), running the per-key page operations of
// cache/page_ref.hpp with one 16-lane tile per element, as the table kernels do.
//
// A batch is two launches on its stream, like the table's keyed batches: page_validate_kernel
// records the smallest index of a reserved key in words[pw_reject] and reserves the batch's
// ticks (words[pw_tick]); the op kernel then skips the whole batch if it was rejected, so a
// rejected batch changes nothing. Semantics (statistics, errors, evictions, match_prefix) are
// those of host/cpu/page_launcher_cpu.cpp. Statistics are tallied per block in shared memory
// and added with one global atomic per non-zero counter per block; evictions are compacted per
// block and appended with one atomic on words[pw_evicted].
#include <ccht/backend.hpp>
#include <ccht/cache/detail/page_launcher.hpp>
#include <ccht/cache/page_ref.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/core/tile.hpp>
#include <ccht/core/types.hpp>
#include <ccht/detail/launcher.hpp>
#include <ccht/error.hpp>
#include <ccht/table_ref.hpp>

#include "words_pool.hpp"

#include <cooperative_groups.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ccht::detail {
namespace {

namespace cg = cooperative_groups;

using page_cuda = page_launcher<cuda_backend>;
constexpr int B = default_bucket_size;
template <class Policy>
using index_ref = table_ref<Policy, B, device_memory>;

/// Threads per element: one 16-lane tile loads one bucket's 16 keys in one access.
constexpr int tile_size = 16;
/// Threads per block of the op kernels.
constexpr int block_threads = 256;
constexpr int tiles_per_block = block_threads / tile_size;
/// Elements per tile: bounds the blocks, and so the per-block flushes, at n / 128.
constexpr int items_per_tile = 8;
constexpr int items_per_block = tiles_per_block * items_per_tile;
/// Blocks per SM the op kernels are built for, which caps them at 64 registers. With that cap
/// ptxas (nvcc 13.0, sm_90) allocates every op kernel without spills. Left alone, it also gave
/// double LRU's acquire 64 registers but spilled 100 bytes, and abandon and release 8-12.
constexpr int min_op_blocks = 4;
/// Threads per block, and most blocks, of the validation kernel (grid-stride).
constexpr int stream_block_threads = 256;
constexpr unsigned max_stream_blocks = 2048;

static_assert(sizeof(std::size_t) == sizeof(unsigned long long),
              "device words use 64-bit atomics on std::size_t");
static_assert(no_reject == ~std::size_t{0}, "acquire_words sets the reject word with 0xff bytes");
static_assert(pw_reject == pw_first_error + 1, "one memset sets both ~0 words");

/// Slots of a block's tally: one per page_counters field, then errors, erased keys, first error.
enum tally_slot : int {
  t_hits, t_misses, t_fills, t_pending, t_no_space, t_evictions,
  t_publishes, t_abandons, t_releases, t_erases, t_pinned, t_filling,
  num_counters, t_errors = num_counters, t_done, t_first_error, num_tally_slots,
};
static_assert(sizeof(page_counters) == num_counters * sizeof(std::uint64_t));
static_assert(offsetof(page_counters, hits) == t_hits * sizeof(std::uint64_t));
static_assert(offsetof(page_counters, evictions) == t_evictions * sizeof(std::uint64_t));
static_assert(offsetof(page_counters, erases) == t_erases * sizeof(std::uint64_t));
static_assert(offsetof(page_counters, filling) == t_filling * sizeof(std::uint64_t));

/// The calling thread's tile of tile_size threads.
__device__ __forceinline__ cg::thread_block_tile<tile_size> this_tile() {
  return cg::tiled_partition<tile_size>(cg::this_thread_block());
}

/// Statistics of one block (shared memory); page_launcher_cpu.cpp's tally, with atomics.
struct block_tally {
  unsigned long long w[num_tally_slots];

  /// Called by every thread of the block, then a barrier.
  __device__ void init() {
    for (int j = threadIdx.x; j < num_tally_slots; j += blockDim.x) {
      w[j] = j == t_first_error ? ~0ull : 0ull;
    }
  }

  __device__ void add(int slot, unsigned long long v = 1) { atomicAdd(&w[slot], v); }
  /// Gauges are sums of signed deltas, two's complement.
  __device__ void add_signed(int slot, int delta) {
    if (delta != 0) { add(slot, static_cast<unsigned long long>(static_cast<long long>(delta))); }
  }

  /// Tallies element @p i's outcome @p r of an @p Op (one thread per element).
  template <page_op Op>
  __device__ void count(page_op_result const& r, std::size_t i) {
    if constexpr (reports_status(Op)) {
      switch (r.status) {
        case page_status::hit: add(t_hits); break;
        case page_status::fill: add(t_fills); add(t_misses); break;
        case page_status::miss: add(t_misses); break;
        case page_status::pending: add(t_pending); break;
        case page_status::no_space: add(t_no_space); break;
        case page_status::rejected: break;
      }
      if (r.evicted) { add(t_evictions); }
    } else {
      if (r.result == page_result::ok) {
        switch (Op) {
          case page_op::publish: add(t_publishes); break;
          case page_op::abandon: add(t_abandons); break;
          case page_op::erase: add(t_erases); add(t_done); break;
          default: add(t_releases); break;
        }
      } else if (Op != page_op::erase) {  // erase refusals are answers, not errors
        add(t_errors);
        atomicMin(&w[t_first_error],
                  static_cast<unsigned long long>((i << 8) | static_cast<std::size_t>(r.result)));
      }
    }
    add_signed(t_pinned, r.pinned_delta);
    add_signed(t_filling, r.filling_delta);
  }

  /// Adds the block's tally to @p counters and @p words (every thread of the block calls).
  __device__ void flush(page_counters* counters, std::size_t* words) {
    __syncthreads();
    auto* c = reinterpret_cast<unsigned long long*>(counters);
    auto* wd = reinterpret_cast<unsigned long long*>(words);
    for (int j = threadIdx.x; j < num_tally_slots; j += blockDim.x) {
      unsigned long long const v = w[j];
      if (j < num_counters) {
        if (v != 0) { atomicAdd(&c[j], v); }
      } else if (j == t_errors) {
        if (v != 0) { atomicAdd(&wd[pw_errors], v); }
      } else if (j == t_done) {
        if (v != 0) { atomicAdd(&wd[pw_prefix], v); }
      } else if (v != ~0ull) {  // t_first_error
        atomicMin(&wd[pw_first_error], v);
      }
    }
  }
};

/// Whether the batch was rejected; a plain load: an earlier kernel on the stream wrote it.
__device__ __forceinline__ bool batch_rejected(std::size_t const* words) {
  return words[pw_reject] != no_reject;
}

/// Marks elements [begin, end) rejected, one thread each (every thread of the block calls).
template <page_op Op>
__device__ void write_rejected(page_batch const& b, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    if constexpr (reports_status(Op)) {
      if (b.status_out != nullptr) { b.status_out[i] = page_status::rejected; }
    } else {
      if (b.result_out != nullptr) { b.result_out[i] = page_result::rejected; }
    }
  }
}

/**
 * @brief Validates a batch and reserves its ticks: the smallest index of a reserved key goes to
 *        words[pw_reject] (@p keys null: nothing to check), and thread 0 of block 0 takes the
 *        batch's @p n ticks from the table clock (element i's tick is words[pw_tick] + i).
 */
template <class Policy>
__global__ void __launch_bounds__(stream_block_threads)
    page_validate_kernel(index_ref<Policy> index, key_type const* keys, std::size_t n,
                         std::size_t* words) {
  if (blockIdx.x == 0 && threadIdx.x == 0) { words[pw_tick] = index.next_ticks(scalar_tile{}, n); }
  if (keys == nullptr) { return; }
  std::size_t const stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (is_reserved_key(keys[i])) {  // a thread's indices increase: its first is its smallest
      atomicMin(reinterpret_cast<unsigned long long*>(&words[pw_reject]),
                static_cast<unsigned long long>(i));
      return;
    }
  }
}

/// Runs one element of an @p Op (every lane of @p tile, same arguments).
template <page_op Op, class Policy, class Tile>
__device__ __forceinline__ page_op_result run_one(page_ref<Policy> const& ref, Tile const& tile,
                                                  page_batch const& b, std::size_t i,
                                                  tick_type tick) {
  if constexpr (Op == page_op::acquire) {
    return ref.acquire(tile, b.keys[i], tick);
  } else if constexpr (Op == page_op::lookup) {
    return ref.lookup(tile, b.keys[i]);
  } else if constexpr (Op == page_op::publish) {
    return ref.publish(tile, b.keys[i]);
  } else if constexpr (Op == page_op::abandon) {
    return ref.abandon(tile, b.keys[i]);
  } else if constexpr (Op == page_op::release_key) {
    return ref.release(tile, b.keys[i], tick);
  } else if constexpr (Op == page_op::release_page) {
    return ref.release_page(tile, b.pages_in[i], tick);
  } else {
    static_assert(Op == page_op::erase, "match_prefix runs in page_prefix_kernel");
    return ref.erase(tile, b.keys[i]);
  }
}

/**
 * @brief One batch of @p Op (not match_prefix): block k owns elements [k * items_per_block,
 *        (k + 1) * items_per_block), its tiles take them in turn; lane 0 writes the outputs.
 */
template <class Policy, page_op Op>
__global__ void __launch_bounds__(block_threads, min_op_blocks)
    page_op_kernel(page_ref<Policy> ref, page_counters* counters, page_batch b) {
  constexpr bool acquires = Op == page_op::acquire;
  __shared__ block_tally tally;
  // Victims of this block, appended to the outputs with one global atomic (acquire only).
  __shared__ key_type ev_keys[acquires ? items_per_block : 1];
  __shared__ page_id ev_pages[acquires ? items_per_block : 1];
  __shared__ unsigned ev_count;
  __shared__ std::size_t ev_base;

  std::size_t const begin = std::size_t{blockIdx.x} * items_per_block;
  std::size_t const end = begin + items_per_block < b.n ? begin + items_per_block : b.n;
  if (batch_rejected(b.words)) {  // uniform over the grid
    write_rejected<Op>(b, begin, end);
    return;
  }
  tally.init();
  if (threadIdx.x == 0) { ev_count = 0; }
  tick_type const tick_base = b.words[pw_tick];
  __syncthreads();

  auto const tile = this_tile();
  bool const lead = tile.thread_rank() == 0;
  for (std::size_t i = begin + threadIdx.x / tile_size; i < end; i += tiles_per_block) {
    page_op_result const r = run_one<Op>(ref, tile, b, i, tick_base + i);
    if (!lead) { continue; }
    if constexpr (reports_status(Op)) {
      if (b.pages_out != nullptr) { b.pages_out[i] = r.page; }
      if (b.status_out != nullptr) { b.status_out[i] = r.status; }
      if constexpr (acquires) {
        if (r.evicted) {
          unsigned const at = atomicAdd(&ev_count, 1u);
          ev_keys[at] = r.evicted_key;
          ev_pages[at] = r.page;
        }
      }
    } else {
      if (b.result_out != nullptr) { b.result_out[i] = r.result; }
    }
    tally.count<Op>(r, i);
  }

  if constexpr (acquires) {
    __syncthreads();
    unsigned const n = ev_count;  // the same for every thread after the barrier
    if (n != 0) {
      if (threadIdx.x == 0) {
        ev_base = static_cast<std::size_t>(
            atomicAdd(reinterpret_cast<unsigned long long*>(&b.words[pw_evicted]),
                      static_cast<unsigned long long>(n)));
      }
      __syncthreads();
      std::size_t const at = ev_base;
      for (unsigned t = threadIdx.x; t < n; t += blockDim.x) {
        b.evicted_keys[at + t] = ev_keys[t];
        b.evicted_pages[at + t] = ev_pages[t];
      }
    }
  }
  tally.flush(counters, b.words);
}

/**
 * @brief match_prefix: one tile (the whole block) looks the keys up in order and stops at the
 *        first non-hit; the hits' pages go to pages_out and the run length to words[pw_prefix].
 */
template <class Policy>
__global__ void __launch_bounds__(tile_size)
    page_prefix_kernel(page_ref<Policy> ref, page_counters* counters, page_batch b) {
  __shared__ block_tally tally;
  if (batch_rejected(b.words)) {
    write_rejected<page_op::match_prefix>(b, 0, b.n);
    return;
  }
  tally.init();
  __syncthreads();
  auto const tile = this_tile();
  bool const lead = tile.thread_rank() == 0;
  std::size_t run = 0;
  for (; run < b.n; ++run) {
    page_op_result const r = ref.lookup(tile, b.keys[run]);  // shuffled: the same on every lane
    if (lead) { tally.count<page_op::lookup>(r, run); }
    if (r.status != page_status::hit) { break; }
    if (lead) { b.pages_out[run] = r.page; }
  }
  if (lead) { b.words[pw_prefix] = run; }
  tally.flush(counters, b.words);
}

/// After a launch: acquire_words checked that no error was pending, so this one is ours.
void check_launch(char const* what) { check_cuda(cudaGetLastError(), what); }

/// Blocks for @p n elements at @p per_block each, at most @p cap (grid-stride kernels).
unsigned blocks_for(std::size_t n, std::size_t per_block, unsigned cap = UINT_MAX) {
  std::size_t const b = (n + per_block - 1) / per_block;
  if (b > static_cast<std::size_t>(INT_MAX)) {
    throw error(error_code::invalid_size,
                "page_cache: batch of " + std::to_string(n) + " elements exceeds one CUDA grid");
  }
  return static_cast<unsigned>(b < cap ? (b == 0 ? 1 : b) : cap);
}

template <class Policy, page_op Op>
void launch_op(page_ref<Policy> const& ref, page_counters* counters, page_batch const& b,
               cudaStream_t stream) {
  page_op_kernel<Policy, Op>
      <<<blocks_for(b.n, items_per_block), block_threads, 0, stream>>>(ref, counters, b);
  check_launch("page_op_kernel launch");
}

/// The words pool of the current device (null without memory pools: cudaMalloc, cudaFree).
cudaMemPool_t current_words_pool() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return words_pool(device);
}

}  // namespace

// A batch's words come from the table launcher's pool (words_pool.hpp), not the device's default
// pool: with the default's release threshold of 0, every synchronisation would hand the memory
// back to the driver and the next batch would allocate it again.
std::size_t* page_cuda::acquire_words(cudaStream_t stream) {
  check_no_pending_error("page_cache");
  constexpr std::size_t bytes = pw_words * sizeof(std::size_t);
  cudaMemPool_t const pool = current_words_pool();
  void* p = nullptr;
  if (pool != nullptr) {
    check_cuda(cudaMallocFromPoolAsync(&p, bytes, pool, stream),
               "cudaMallocFromPoolAsync (page batch words)");
  } else {
    p = cuda_backend::allocate(bytes);
  }
  auto* words = static_cast<std::size_t*>(p);
  cudaError_t st = cudaMemsetAsync(words, 0, bytes, stream);
  if (st == cudaSuccess) {  // first_error and reject (adjacent): ~0
    st = cudaMemsetAsync(words + pw_first_error, 0xff, 2 * sizeof(std::size_t), stream);
  }
  if (st != cudaSuccess) {
    if (pool != nullptr) {
      (void)cudaFreeAsync(words, stream);
    } else {
      cuda_backend::deallocate(words);
    }
    check_cuda(st, "cudaMemsetAsync (page batch words)");
  }
  return words;
}

void page_cuda::release_words(std::size_t* words, std::size_t* host, cudaStream_t stream) {
  cudaError_t copied = cudaSuccess;
  if (host != nullptr) {
    copied = cudaMemcpyAsync(host, words, pw_words * sizeof(std::size_t), cudaMemcpyDeviceToHost,
                             stream);
    if (copied == cudaSuccess) { copied = cudaStreamSynchronize(stream); }
  }
  // Freed even if the copy failed; stream-ordered, so after the batch's kernels.
  cudaError_t freed = cudaSuccess;
  if (current_words_pool() != nullptr) {
    freed = cudaFreeAsync(words, stream);
  } else {
    cuda_backend::deallocate(words);  // synchronises the device: only without memory pools
  }
  check_cuda(copied, "cudaMemcpyAsync (page batch words)");
  check_cuda(freed, "cudaFreeAsync (page batch words)");
}

void page_cuda::copy_word(std::size_t* dst, std::size_t const* src, cudaStream_t stream) {
  check_cuda(cudaMemcpyAsync(dst, src, sizeof(std::size_t), cudaMemcpyDeviceToDevice, stream),
             "cudaMemcpyAsync (page batch word)");
}

template <class Policy>
void page_cuda::run(page_ref<Policy> const& ref, index_ref<Policy> const& index,
                    page_counters* counters, page_batch const& b, int /*threads*/,
                    cudaStream_t stream) {
  if (b.n == 0) { return; }  // nothing to do, and a grid of 0 blocks is invalid
  // release_page has no keys to check, but its elements still take ticks.
  bool const keyed = b.op != page_op::release_page;
  page_validate_kernel<Policy>
      <<<keyed ? blocks_for(b.n, stream_block_threads, max_stream_blocks) : 1u,
         keyed ? stream_block_threads : 1, 0, stream>>>(index, keyed ? b.keys : nullptr, b.n,
                                                        b.words);
  check_launch("page_validate_kernel launch");
  switch (b.op) {
    case page_op::acquire: launch_op<Policy, page_op::acquire>(ref, counters, b, stream); break;
    case page_op::lookup: launch_op<Policy, page_op::lookup>(ref, counters, b, stream); break;
    case page_op::publish: launch_op<Policy, page_op::publish>(ref, counters, b, stream); break;
    case page_op::abandon: launch_op<Policy, page_op::abandon>(ref, counters, b, stream); break;
    case page_op::release_key:
      launch_op<Policy, page_op::release_key>(ref, counters, b, stream);
      break;
    case page_op::release_page:
      launch_op<Policy, page_op::release_page>(ref, counters, b, stream);
      break;
    case page_op::erase: launch_op<Policy, page_op::erase>(ref, counters, b, stream); break;
    case page_op::match_prefix:
      page_prefix_kernel<Policy><<<1, tile_size, 0, stream>>>(ref, counters, b);
      check_launch("page_prefix_kernel launch");
      break;
  }
}

// Explicit instantiations: the two policies page_cache defaults to or documents.
#define CCHT_INSTANTIATE_PAGE_CUDA(P)                                                             \
  template void page_cuda::run<P>(page_ref<P> const&, index_ref<P> const&, page_counters*,        \
                                  page_batch const&, int, cudaStream_t);
CCHT_INSTANTIATE_PAGE_CUDA(double_lru)
CCHT_INSTANTIATE_PAGE_CUDA(coarse_lru)
#undef CCHT_INSTANTIATE_PAGE_CUDA

}  // namespace ccht::detail
