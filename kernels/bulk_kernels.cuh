/**
 * @file bulk_kernels.cuh
 * @brief The `__global__` kernels behind the CUDA backend's bulk operations: thin wrappers that
 *        declare each body's shared memory and run the body (bulk_bodies.hpp) on the CUDA block.
 *
 * The bodies hold all the logic (the launch shape, the batch protocol, the eviction buffer, the
 * grid-stride walks); the tests run the same bodies on the CPU on lockstep blocks
 * (tests/test_lanes_grid.cpp). Kernels are templates on the policy, the bucket size and the tile
 * size; launcher_cuda.cuh instantiates them (B = 16, tile = 16), one policy per translation unit.
 *
 * Internal header: included by kernels/launcher_cuda.cuh only.
 */
#pragma once

#include "bulk_bodies.hpp"

#include <cooperative_groups.h>

#include <cstddef>
#include <cstdint>

namespace ccht::kernels {

namespace cg = cooperative_groups;

static_assert(sizeof(std::size_t) == sizeof(unsigned long long),
              "device counters use 64-bit atomics on std::size_t words");
static_assert(sizeof(tick_type) == sizeof(unsigned long long));

/// The CUDA thread block as bulk_bodies.hpp's block interface (ccht/lanes/lockstep_block.hpp).
template <int TileSize>
struct cuda_block {
  /// blockIdx.x
  __device__ __forceinline__ unsigned block_index() const { return blockIdx.x; }
  /// gridDim.x
  __device__ __forceinline__ unsigned grid_blocks() const { return gridDim.x; }
  /// threadIdx.x
  __device__ __forceinline__ unsigned thread_index() const { return threadIdx.x; }
  /// blockDim.x
  __device__ __forceinline__ unsigned block_threads() const { return blockDim.x; }
  /// __syncthreads()
  __device__ __forceinline__ void sync() const { __syncthreads(); }
  /// __syncthreads_count(p)
  __device__ __forceinline__ int sync_count(bool p) const { return __syncthreads_count(p); }
  /// The calling thread's tile of TileSize threads.
  __device__ __forceinline__ cg::thread_block_tile<TileSize> tile() const {
    return cg::tiled_partition<TileSize>(cg::this_thread_block());
  }
};

// static (here and take_sticky_kernel): launcher_cuda.cuh includes this header in one
// translation unit per policy, and a non-template kernel would be defined in each of them.

/// validate_batch (bulk_bodies.hpp) over a grid of stream_block_threads-thread blocks.
static __global__ void __launch_bounds__(stream_block_threads)
    validate_batch_kernel(key_type const* keys, op_code const* ops, std::size_t n,
                          std::size_t* reject, std::size_t* sticky, std::size_t* count,
                          tick_type* clock) {
  validate_batch(cuda_block<1>{}, keys, ops, n, reject, sticky, count, clock);
}

/// Moves the table's sticky words to words[1..2] and resets them (check_async_error).
static __global__ void take_sticky_kernel(std::size_t* sticky, std::size_t* words) {
  auto* s = reinterpret_cast<unsigned long long*>(sticky);
  words[1] = static_cast<std::size_t>(atomicExch(&s[0], ~0ull));
  words[2] = static_cast<std::size_t>(atomicExch(&s[1], ~0ull));
}

/// find_body
template <class Policy, int B, int TileSize>
__global__ void __launch_bounds__(shape<TileSize>::block_threads)
    find_kernel(bucket_array_view<B> view, key_type const* keys, value_type* values, bool* found,
                std::size_t n, std::size_t const* words, access_counts* counts) {
  find_body<Policy, B, TileSize>(cuda_block<TileSize>{}, view, keys, values, found, n, words, counts);
}

/// contains_body
template <int B, int TileSize>
__global__ void __launch_bounds__(shape<TileSize>::block_threads)
    contains_kernel(bucket_array_view<B> view, key_type const* keys, bool* found, std::size_t n,
                    std::size_t const* words, access_counts* counts) {
  contains_body<B, TileSize>(cuda_block<TileSize>{}, view, keys, found, n, words, counts);
}

/// insert_or_assign_body
template <class Policy, int B, int TileSize>
__global__ void __launch_bounds__(shape<TileSize>::block_threads)
    insert_or_assign_kernel(bucket_array_view<B> view, key_type const* keys,
                            value_type const* values, std::size_t n, key_type* evicted_keys,
                            value_type* evicted_values, std::size_t* num_evicted,
                            std::size_t const* words, access_counts* counts) {
  __shared__ eviction_shared<TileSize> evictions;
  insert_or_assign_body<Policy, B, TileSize>(cuda_block<TileSize>{}, evictions, view, keys, values,
                                             n, evicted_keys, evicted_values, num_evicted, words,
                                             counts);
}

/// erase_body
template <int B, int TileSize>
__global__ void __launch_bounds__(shape<TileSize>::block_threads)
    erase_kernel(bucket_array_view<B> view, key_type const* keys, std::size_t n,
                 std::size_t* num_erased, std::size_t const* words, access_counts* counts) {
  __shared__ block_count erased;
  erase_body<B, TileSize>(cuda_block<TileSize>{}, erased, view, keys, n, num_erased, words, counts);
}

/// execute_body
template <class Policy, int B, int TileSize>
__global__ void __launch_bounds__(shape<TileSize>::block_threads)
    execute_kernel(bucket_array_view<B> view, op_code const* ops_in, key_type const* keys,
                   value_type const* values, value_type* values_out, op_status* status,
                   std::size_t n, key_type* evicted_keys, value_type* evicted_values,
                   std::size_t* num_evicted, std::size_t const* words, access_counts* counts) {
  __shared__ eviction_shared<TileSize> evictions;
  execute_body<Policy, B, TileSize>(cuda_block<TileSize>{}, evictions, view, ops_in, keys, values,
                                    values_out, status, n, evicted_keys, evicted_values,
                                    num_evicted, words, counts);
}

/// size_body
template <int B>
__global__ void __launch_bounds__(stream_block_threads)
    size_kernel(bucket_array_view<B> view, std::size_t* count) {
  size_body<B>(cuda_block<1>{}, view, count);
}

/// clear_body
template <int B, int TileSize>
__global__ void __launch_bounds__(shape<TileSize>::block_threads)
    clear_kernel(bucket_array_view<B> view) {
  clear_body<B, TileSize>(cuda_block<TileSize>{}, view);
}

/// export_body
template <int B, int TileSize>
__global__ void __launch_bounds__(shape<TileSize>::block_threads)
    export_kernel(bucket_array_view<B> view, key_type* keys_out, value_type* values_out,
                  std::size_t capacity, std::size_t* count) {
  __shared__ export_shared<B, TileSize> sh;
  export_body<B, TileSize>(cuda_block<TileSize>{}, sh, view, keys_out, values_out, capacity, count);
}

}  // namespace ccht::kernels
