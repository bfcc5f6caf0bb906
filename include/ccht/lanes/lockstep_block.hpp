/**
 * @file lockstep_block.hpp
 * @brief Thread blocks and grids run in lockstep on the CPU: how a kernel's block-level logic
 *        (its barriers, shared memory and grid-stride walks) runs in CI without a GPU.
 *
 * A kernel body written against the block interface below runs unchanged in a `__global__`
 * wrapper (kernels/cuda_block.cuh, where the block is the CUDA thread block) and here, where
 * run_grid executes it on fibers: every thread of a block is a lane of one of its tiles
 * (lockstep_tile.hpp), and a block barrier is a point every thread of the block must reach
 * before any goes on. Several blocks run at once on the calling thread (grid_options), so the
 * atomics and locks between blocks interleave as they do between a GPU's resident blocks.
 *
 * The block interface (what a body may use):
 * - `block_index()`, `grid_blocks()`, `thread_index()`, `block_threads()`: blockIdx.x,
 *   gridDim.x, threadIdx.x, blockDim.x;
 * - `sync()`: __syncthreads(); `sync_count(p)`: __syncthreads_count(p);
 * - `tile()`: the calling thread's tile of TileSize lanes (the core's tile interface).
 * Shared memory is one object of a trivial type per block, passed to the body by reference; here
 * it starts as garbage bytes (0xA5), as a GPU's does, so a body that reads it before writing is
 * seen to.
 *
 * Hazards besides a tile's (lockstep_tile.hpp): threads of a block waiting at different barriers
 * (divergent_collective), threads that returned while others wait at a barrier (lane_left_early).
 * A lane that spins on a lock (core/atomics.hpp spin_wait) parks until the next step, so the tile
 * holding the lock runs; a lock never released is a runaway after grid_options::max_steps.
 */
#pragma once

#include <ccht/lanes/lockstep_tile.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

namespace ccht::lanes {

/// How run_grid runs a grid.
struct grid_options {
  /// Blocks run at once on the calling thread (a GPU's resident blocks); at least 1.
  unsigned resident_blocks = 2;
  /// Order of the lanes within a step (run_options::order_seed).
  std::uint64_t order_seed = 0;
  /// Most steps of one wave of resident blocks before a runaway (a lock never released).
  std::uint64_t max_steps = std::uint64_t{1} << 22;
};

/**
 * @brief One thread's view of a block of lockstep tiles: the block interface (see the file
 *        comment). Made by ccht::lanes::run_grid, never by hand.
 */
template <unsigned TileSize>
class lockstep_block {
 public:
  /// Thread @p thread of block @p block; @p index is its lane in @p group.
  lockstep_block(unsigned block, unsigned grid_blocks, unsigned thread, unsigned block_threads,
                 unsigned index, detail::lane_group* group) noexcept
      : block_(block),
        grid_blocks_(grid_blocks),
        thread_(thread),
        block_threads_(block_threads),
        index_(index),
        group_(group) {}

  /// blockIdx.x
  unsigned block_index() const noexcept { return block_; }
  /// gridDim.x
  unsigned grid_blocks() const noexcept { return grid_blocks_; }
  /// threadIdx.x
  unsigned thread_index() const noexcept { return thread_; }
  /// blockDim.x
  unsigned block_threads() const noexcept { return block_threads_; }

  /// __syncthreads(): every thread of the block waits here until all have arrived.
  void sync(CCHT_LANES_SITE_PARAM) const {
    (void)detail::arrive(group_, index_, CCHT_LANES_SITE(collective::block_sync), 0, 0);
  }
  /// __syncthreads_count(p): a barrier that returns how many threads of the block had @p p.
  int sync_count(bool p, CCHT_LANES_SITE_PARAM) const {
    return static_cast<int>(detail::arrive(group_, index_,
                                           CCHT_LANES_SITE(collective::block_sync_count),
                                           p ? 1u : 0u, 0));
  }
  /// The calling thread's tile (cooperative_groups::tiled_partition<TileSize> of the block).
  lockstep_tile<TileSize> tile() const noexcept {
    unsigned const rank = thread_ % TileSize;
    return lockstep_tile<TileSize>(rank, index_ - rank, group_);
  }

 private:
  unsigned block_;
  unsigned grid_blocks_;
  unsigned thread_;
  unsigned block_threads_;
  unsigned index_;
  detail::lane_group* group_;
};

namespace detail {

/// Calls f(block, shared) on every thread of one wave of resident blocks.
template <unsigned TileSize, class Shared, class F>
struct grid_call {
  F* f;
  Shared* shared;  // one per resident block
  unsigned first_block;
  unsigned grid_blocks;
  unsigned block_threads;

  static void body(void* self, unsigned index, lane_group* group) {
    auto* c = static_cast<grid_call*>(self);
    unsigned const local = index / c->block_threads;
    lockstep_block<TileSize> const block(c->first_block + local, c->grid_blocks,
                                         index % c->block_threads, c->block_threads, index, group);
    (*c->f)(block, c->shared[local]);
  }
};

}  // namespace detail

/**
 * @brief Runs a kernel body over a grid of @p grid_blocks blocks of @p block_threads threads:
 *        f(block, shared) on every thread, where block is its lockstep_block<TileSize> and
 *        shared its block's Shared object (garbage at the start, as on a GPU).
 *
 * Blocks run in waves of grid_options::resident_blocks, the blocks of a wave in lockstep with
 * each other on the calling thread.
 * @throws ccht::lanes::hazard (lockstep_tile.hpp, and the file comment); std::invalid_argument
 *         for a block that is not a whole number of tiles or an empty grid
 */
template <unsigned TileSize, class Shared, class F>
void run_grid(unsigned grid_blocks, unsigned block_threads, F&& f,
              grid_options const& options = {}) {
  static_assert(std::is_trivially_default_constructible_v<Shared> &&
                    std::is_trivially_destructible_v<Shared>,
                "shared memory holds trivial types (a __shared__ variable has no constructor)");
  if (grid_blocks == 0 || block_threads == 0 || block_threads % TileSize != 0 ||
      options.resident_blocks == 0) {
    throw std::invalid_argument(
        "ccht::lanes::run_grid: a non-empty grid of blocks of whole tiles, one resident block or "
        "more");
  }
  unsigned const wave =
      options.resident_blocks < grid_blocks ? options.resident_blocks : grid_blocks;
  auto storage = std::make_unique<Shared[]>(wave);
  using call_type = detail::grid_call<TileSize, Shared, std::remove_reference_t<F>>;
  for (unsigned first = 0; first < grid_blocks; first += wave) {
    unsigned const blocks = grid_blocks - first < wave ? grid_blocks - first : wave;
    std::memset(static_cast<void*>(storage.get()), 0xA5, sizeof(Shared) * blocks);
    call_type call{&f, storage.get(), first, grid_blocks, block_threads};
    run_options run;
    run.order_seed = options.order_seed == 0 ? 0 : options.order_seed + first;
    run.max_steps = options.max_steps;
    detail::run_group(detail::group_shape{TileSize, block_threads / TileSize, blocks},
                      &call_type::body, &call, run);
  }
}

}  // namespace ccht::lanes
