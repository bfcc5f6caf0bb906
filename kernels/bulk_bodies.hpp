/**
 * @file bulk_bodies.hpp
 * @brief The bodies of the CUDA backend's bulk kernels, written against a block interface so
 *        that the same code runs in the `__global__` wrappers (bulk_kernels.cuh, with
 *        kernels::cuda_block) and on the CPU in lockstep (ccht/lanes/lockstep_block.hpp), where
 *        the tests run them (tests/test_lanes_grid.cpp).
 *
 * A Block provides block_index(), grid_blocks(), thread_index(), block_threads(), sync(),
 * sync_count(p) and tile() (see lockstep_block.hpp); shared memory is a trivial struct per block
 * that the caller passes by reference (the CUDA wrapper declares it `__shared__`).
 *
 * Per-key kernels run ccht::bucket_ops with one tile per key (a 16-lane tile loads one bucket's
 * 16 keys, one 128-byte line, in one coalesced access). A block of shape::block_threads threads
 * owns a contiguous range of shape::items_per_block elements; each tile walks that range with a
 * stride of tiles_per_block, so neighbouring tiles read neighbouring input words.
 *
 * Batch protocol (host code in launcher_cuda.cu): a batch first runs validate_batch, which
 * records the smallest index of a reserved key (and of a bad op code) in the batch's reject words,
 * zeroes the batch's count word and reserves the batch's ticks with one atomic add on the table
 * clock. The operation body then reads the reject words and returns at once if the batch was
 * rejected, so a rejected batch leaves the table unchanged.
 *
 * Internal header: included by bulk_kernels.cuh and by the tests.
 */
#pragma once

#include <ccht/core/accounting.hpp>
#include <ccht/core/atomics.hpp>
#include <ccht/core/bucket.hpp>
#include <ccht/core/bucket_ops.hpp>
#include <ccht/core/config.hpp>
#include <ccht/core/global.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/core/tile.hpp>
#include <ccht/core/types.hpp>
#include <ccht/detail/launcher.hpp>

#include <cuda/atomic>

#include <cstddef>
#include <cstdint>

namespace ccht::kernels {

/**
 * @brief Launch shape of the per-key kernels for a tile of @p TileSize threads.
 *
 * 256 threads = 16 tiles of 16; each tile handles 8 elements, so a block covers 128 elements.
 * Why several elements per tile: it bounds the number of blocks (and so the per-block
 * shared-memory flushes of evictions and counts) at n / 128, and with 16 tiles per block the
 * eviction buffer of one block is only 2 KiB.
 */
template <int TileSize>
struct shape {
  static_assert(TileSize >= 1 && TileSize <= 32 && (TileSize & (TileSize - 1)) == 0);
  /// Threads per block.
  static constexpr int block_threads = 256;
  /// Tiles per block.
  static constexpr int tiles_per_block = block_threads / TileSize;
  /// Elements each tile processes.
  static constexpr int items_per_tile = 8;
  /// Elements each block processes.
  static constexpr int items_per_block = tiles_per_block * items_per_tile;
};

/// Threads per block of the streaming kernels (validation, size).
inline constexpr int stream_block_threads = 256;

/**
 * @brief Per-batch device words, written by validate_batch and read by the operation bodies.
 *
 * Layout of the three words a batch's `reject` pointer designates (see launcher_cuda.cu):
 * - reject[0]: smallest index of a reserved key, ccht::detail::no_reject if none;
 * - reject[1]: (smallest index of an invalid op code << 8) | that op code, or no_reject;
 * - reject[2]: the batch's first tick (element i gets reject[2] + i).
 */
enum batch_word : int { word_reject_key = 0, word_reject_op = 1, word_tick_base = 2 };

/// Shared memory of a body that needs none.
struct no_shared {};

// ---- atomics for host and device -----------------------------------------------------------------

/// Device-scope relaxed add on a global word; returns the old value.
template <class T>
CCHT_HOST_DEVICE CCHT_FORCEINLINE T add_global(T& word, T v) noexcept {
  return cuda::atomic_ref<T, cuda::thread_scope_device>(word).fetch_add(
      v, cuda::std::memory_order_relaxed);
}

/// Device-scope relaxed min on a global word.
template <class T>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void min_global(T& word, T v) noexcept {
  cuda::atomic_ref<T, cuda::thread_scope_device>(word).fetch_min(v,
                                                                 cuda::std::memory_order_relaxed);
}

/// Block-scope relaxed add on a shared-memory word; returns the old value.
CCHT_HOST_DEVICE CCHT_FORCEINLINE unsigned add_shared(unsigned& word, unsigned v) noexcept {
  return cuda::atomic_ref<unsigned, cuda::thread_scope_block>(word).fetch_add(
      v, cuda::std::memory_order_relaxed);
}

/// Whether the batch described by @p words was rejected (read once per thread).
CCHT_HOST_DEVICE CCHT_FORCEINLINE bool batch_rejected(std::size_t const* words, bool check_ops) {
  // A plain load suffices: the words were written by an earlier kernel in the same stream.
  return words[word_reject_key] != detail::no_reject ||
         (check_ops && words[word_reject_op] != detail::no_reject);
}

// ---- block-level building blocks -----------------------------------------------------------------

/**
 * @brief Block-local buffer that compacts evicted pairs and appends them to the caller's output
 *        with one global atomic add per block (instead of one per eviction).
 */
template <int Capacity>
struct eviction_buffer {
  key_type keys[Capacity];
  value_type values[Capacity];
  unsigned count;
  std::size_t base;

  /// Called by every thread; the block's barrier follows before the first push.
  template <class Block>
  CCHT_HOST_DEVICE void init(Block const& block) {
    if (block.thread_index() == 0) { count = 0; }
  }

  /// Called by one thread per eviction.
  CCHT_HOST_DEVICE void push(key_type k, value_type v) {
    unsigned const at = add_shared(count, 1u);
    keys[at] = k;
    values[at] = v;
  }

  /// Called by every thread of the block after its last push.
  template <class Block>
  CCHT_HOST_DEVICE void flush(Block const& block, key_type* out_keys, value_type* out_values,
                              std::size_t* counter) {
    block.sync();
    unsigned const n = count;
    if (n == 0) { return; }  // uniform: every thread read the same count after the barrier
    if (block.thread_index() == 0) { base = add_global(*counter, std::size_t{n}); }
    block.sync();
    std::size_t const at = base;
    for (unsigned t = block.thread_index(); t < n; t += block.block_threads()) {
      out_keys[at + t] = keys[t];
      out_values[at + t] = values[t];
    }
  }
};

/// A block's count, added to a global counter with one atomic.
struct block_count {
  unsigned value;
};

/// Adds a block's count to @p counter with one atomic (every thread of the block calls).
template <class Block>
CCHT_HOST_DEVICE void flush_block_count(Block const& block, block_count& shared,
                                        std::size_t* counter) {
  block.sync();
  if (block.thread_index() == 0 && shared.value != 0 && counter != nullptr) {
    add_global(*counter, std::size_t{shared.value});
  }
}

/// Runs f(i) for the elements of [0, n) that fall to the calling tile: block b owns
/// items_per_block consecutive elements, and its tiles take them in turn.
template <int TileSize, class Block, class F>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void for_tile_elements(Block const& block, std::size_t n, F&& f) {
  using S = shape<TileSize>;
  std::size_t const begin = std::size_t{block.block_index()} * S::items_per_block;
  std::size_t const end = begin + S::items_per_block < n ? begin + S::items_per_block : n;
  for (std::size_t i = begin + block.thread_index() / TileSize; i < end; i += S::tiles_per_block) {
    f(i);
  }
}

/**
 * @brief for_tile_elements with access counting (core/accounting.hpp): runs f(i, acc) where acc
 *        is null when @p total is null (the default: counting is off), else a per-thread
 *        access_counts that lane 0 adds to @p total once, at the end.
 *
 * The two cases are two inlined loops, so the core sees a constant null pointer (its count code
 * folds away) or the address of one local object that never escapes (its counters stay in
 * registers). A single loop given `counting ? &local : nullptr` kept the counters in a local-
 * memory frame behind a pointer, with spills in the larger inserts (docs/kernel-resources.md).
 */
template <int TileSize, class Block, class Tile, class F>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void for_tile_elements_counted(Block const& block, std::size_t n,
                                                                 access_counts* total,
                                                                 Tile const& tile, F&& f) {
  if (total == nullptr) {  // uniform over the grid
    for_tile_elements<TileSize>(block, n,
                                [&](std::size_t i) { f(i, static_cast<access_counts*>(nullptr)); });
    return;
  }
  access_counts local{};
  for_tile_elements<TileSize>(block, n, [&](std::size_t i) { f(i, &local); });
  if (tile.thread_rank() != 0) { return; }  // the core's count events are uniform over a tile
  auto add = [](std::uint64_t& to, std::uint64_t v) {
    if (v != 0) { add_global(to, v); }
  };
  add(total->bucket_reads, local.bucket_reads);
  add(total->bucket_writes, local.bucket_writes);
  add(total->bytes_read, local.bytes_read);
  add(total->bytes_written, local.bytes_written);
  add(total->kicks, local.kicks);
  add(total->chosen_victims, local.chosen_victims);
}

// ---- batch bookkeeping -------------------------------------------------------------------------

/**
 * @brief Validates a batch and reserves its ticks (one thread per element, grid-stride).
 *
 * Records the smallest index of a reserved key in reject[word_reject_key], and of an op code
 * outside ccht::op_code in reject[word_reject_op] (packed with the code), mirroring both into
 * @p sticky (the table's words for check_async_error) when non-null. Thread 0 of block 0 also
 * zeroes @p count (when non-null) and, when @p clock is non-null, takes the batch's @p n ticks with
 * one atomic add (so element i's tick is reject[word_tick_base] + i, in index order over the whole
 * batch).
 */
template <class Block>
CCHT_HOST_DEVICE void validate_batch(Block const& block, key_type const* keys, op_code const* ops,
                                     std::size_t n, std::size_t* reject, std::size_t* sticky,
                                     std::size_t* count, tick_type* clock) {
  if (block.block_index() == 0 && block.thread_index() == 0) {
    if (count != nullptr) { *count = 0; }
    if (clock != nullptr) { reject[word_tick_base] = add_global(*clock, tick_type{n}) + 1; }
  }
  std::size_t bad_key = detail::no_reject;
  std::size_t bad_op = detail::no_reject;
  std::size_t const stride = std::size_t{block.grid_blocks()} * block.block_threads();
  for (std::size_t i =
           std::size_t{block.block_index()} * block.block_threads() + block.thread_index();
       i < n; i += stride) {
    // Each thread's indices increase, so its first hit is its smallest.
    if (bad_key == detail::no_reject && is_reserved_key(keys[i])) { bad_key = i; }
    if (ops != nullptr && bad_op == detail::no_reject) {
      auto const code = static_cast<std::uint8_t>(ops[i]);
      if (code > static_cast<std::uint8_t>(op_code::erase)) { bad_op = (i << 8) | code; }
    }
  }
  // Rare path: one atomic per offending thread.
  if (bad_key != detail::no_reject) {
    min_global(reject[word_reject_key], bad_key);
    if (sticky != nullptr) { min_global(sticky[word_reject_key], bad_key); }
  }
  if (bad_op != detail::no_reject) {
    min_global(reject[word_reject_op], bad_op);
    if (sticky != nullptr) { min_global(sticky[word_reject_op], bad_op); }
  }
}

// ---- per-key operations ------------------------------------------------------------------------

/**
 * @brief Bulk find: found[i] = hit, values[i] = value on a hit; hits are promoted.
 * @param words the batch's reject words (see batch_word)
 */
template <class Policy, int B, int TileSize, class Block>
CCHT_HOST_DEVICE void find_body(Block const& block, bucket_array_view<B> view, key_type const* keys,
                                value_type* values, bool* found, std::size_t n,
                                std::size_t const* words, access_counts* counts) {
  using ops = bucket_ops<Policy, B>;
  if (batch_rejected(words, false)) { return; }
  tick_type const tick_base = Policy::promotes_on_hit ? words[word_tick_base] : 0;
  auto const tile = block.tile();
  for_tile_elements_counted<TileSize>(
      block, n, counts, tile, [&](std::size_t i, access_counts* acc) {
        value_type v = 0;
        bool const hit = ops::find(tile, view, keys[i], tick_base + i, v, acc);
        if (tile.thread_rank() == 0) {
          found[i] = hit;
          if (hit) { values[i] = v; }
        }
      });
}

/// Bulk contains: found[i] = whether keys[i] is present (no promotion).
template <int B, int TileSize, class Block>
CCHT_HOST_DEVICE void contains_body(Block const& block, bucket_array_view<B> view,
                                    key_type const* keys, bool* found, std::size_t n,
                                    std::size_t const* words, access_counts* counts) {
  using ops = bucket_ops<lru, B>;  // contains() does not depend on the policy
  if (batch_rejected(words, false)) { return; }
  auto const tile = block.tile();
  for_tile_elements_counted<TileSize>(block, n, counts, tile,
                                      [&](std::size_t i, access_counts* acc) {
                                        bool const hit = ops::contains(tile, view, keys[i], acc);
                                        if (tile.thread_rank() == 0) { found[i] = hit; }
                                      });
}

/// Shared memory of the bodies that evict.
template <int TileSize>
using eviction_shared = eviction_buffer<shape<TileSize>::items_per_block>;

/**
 * @brief Bulk insert_or_assign; evicted pairs are appended to evicted_keys/values through
 *        @p num_evicted, with one global atomic per block.
 */
template <class Policy, int B, int TileSize, class Block>
CCHT_HOST_DEVICE void insert_or_assign_body(Block const& block,
                                            eviction_shared<TileSize>& evictions,
                                            bucket_array_view<B> view, key_type const* keys,
                                            value_type const* values, std::size_t n,
                                            key_type* evicted_keys, value_type* evicted_values,
                                            std::size_t* num_evicted, std::size_t const* words,
                                            access_counts* counts) {
  using ops = bucket_ops<Policy, B>;
  if (batch_rejected(words, false)) { return; }
  evictions.init(block);
  tick_type const tick_base = words[word_tick_base];
  block.sync();
  auto const tile = block.tile();
  for_tile_elements_counted<TileSize>(
      block, n, counts, tile, [&](std::size_t i, access_counts* acc) {
        key_type ek = 0;
        value_type ev = 0;
        op_status const st =
            ops::insert_or_assign(tile, view, keys[i], values[i], tick_base + i, ek, ev, acc);
        if (st == op_status::inserted_evicted && tile.thread_rank() == 0) {
          evictions.push(ek, ev);
        }
      });
  evictions.flush(block, evicted_keys, evicted_values, num_evicted);
}

/// Bulk erase; the number of keys removed is added to @p num_erased (may be null).
template <int B, int TileSize, class Block>
CCHT_HOST_DEVICE void erase_body(Block const& block, block_count& erased, bucket_array_view<B> view,
                                 key_type const* keys, std::size_t n, std::size_t* num_erased,
                                 std::size_t const* words, access_counts* counts) {
  using ops = bucket_ops<lru, B>;  // erase() does not depend on the policy
  if (batch_rejected(words, false)) { return; }
  if (block.thread_index() == 0) { erased.value = 0; }
  block.sync();
  auto const tile = block.tile();
  for_tile_elements_counted<TileSize>(block, n, counts, tile,
                                      [&](std::size_t i, access_counts* acc) {
                                        bool const removed = ops::erase(tile, view, keys[i], acc);
                                        if (removed && tile.thread_rank() == 0) {
                                          add_shared(erased.value, 1u);
                                        }
                                      });
  flush_block_count(block, erased, num_erased);
}

/**
 * @brief The mixed batch: element i is a find, an upsert or an erase of keys[i] per ops[i];
 *        status[i] gets its ccht::op_status, values_out[i] the value of a find hit.
 */
template <class Policy, int B, int TileSize, class Block>
CCHT_HOST_DEVICE void execute_body(Block const& block, eviction_shared<TileSize>& evictions,
                                   bucket_array_view<B> view, op_code const* ops_in,
                                   key_type const* keys, value_type const* values,
                                   value_type* values_out, op_status* status, std::size_t n,
                                   key_type* evicted_keys, value_type* evicted_values,
                                   std::size_t* num_evicted, std::size_t const* words,
                                   access_counts* counts) {
  using ops = bucket_ops<Policy, B>;
  if (batch_rejected(words, true)) { return; }
  evictions.init(block);
  tick_type const tick_base = words[word_tick_base];
  block.sync();
  auto const tile = block.tile();
  for_tile_elements_counted<TileSize>(
      block, n, counts, tile, [&](std::size_t i, access_counts* acc) {
        key_type const key = keys[i];
        tick_type const tick = tick_base + i;
        op_status st = op_status::miss;
        switch (ops_in[i]) {  // the same element for every lane: the tile stays converged
          case op_code::find: {
            value_type v = 0;
            if (ops::find(tile, view, key, tick, v, acc)) {
              st = op_status::hit;
              if (tile.thread_rank() == 0) { values_out[i] = v; }
            }
            break;
          }
          case op_code::insert_or_assign: {
            key_type ek = 0;
            value_type ev = 0;
            st = ops::insert_or_assign(tile, view, key, values[i], tick, ek, ev, acc);
            if (st == op_status::inserted_evicted && tile.thread_rank() == 0) {
              evictions.push(ek, ev);
            }
            break;
          }
          case op_code::erase:
            st = ops::erase(tile, view, key, acc) ? op_status::hit : op_status::miss;
            break;
        }
        if (tile.thread_rank() == 0) { status[i] = st; }
      });
  evictions.flush(block, evicted_keys, evicted_values, num_evicted);
}

// ---- whole-table kernels -----------------------------------------------------------------------

/// Counts occupied slots (key != empty_key) into @p count; one thread per slot, grid-stride.
template <int B, class Block>
CCHT_HOST_DEVICE void size_body(Block const& block, bucket_array_view<B> view, std::size_t* count) {
  std::size_t const slots = std::size_t{view.num_buckets} * B;
  std::size_t const stride = std::size_t{block.grid_blocks()} * block.block_threads();
  std::size_t total = 0;  // meaningful in thread 0
  // The loop bound is uniform across the block, as __syncthreads_count requires.
  for (std::size_t base = std::size_t{block.block_index()} * block.block_threads(); base < slots;
       base += stride) {
    std::size_t const s = base + block.thread_index();
    bool occupied = false;
    if (s < slots) {
      occupied = detail::load_relaxed(view.buckets[s / B].keys[s % B]) != empty_key;
    }
    total += static_cast<std::size_t>(block.sync_count(occupied));
  }
  if (block.thread_index() == 0 && total != 0) { add_global(*count, total); }
}

/**
 * @brief Empties every bucket like a writer: lock the version word, store empty_key in every slot,
 *        release. So it is safe against concurrent readers and writers. One tile per bucket.
 */
template <int B, int TileSize, class Block>
CCHT_HOST_DEVICE void clear_body(Block const& block, bucket_array_view<B> view) {
  static_assert(B % TileSize == 0);
  auto const tile = block.tile();
  unsigned const tiles_per_block = block.block_threads() / TileSize;
  std::size_t const tiles = std::size_t{block.grid_blocks()} * tiles_per_block;
  for (std::size_t b = std::size_t{block.block_index()} * tiles_per_block +
                       block.thread_index() / TileSize;
       b < view.num_buckets; b += tiles) {
    std::uint32_t held = 0;
    if (tile.thread_rank() == 0) {
      held = detail::lock_bucket(view.versions[b]);
      detail::fence_release();  // the odd version is visible before any emptied slot
    }
    tile.sync();
    // Every lane stores empty keys, not only lane 0 that took the lock, so every lane needs its
    // own release fence here: its stores must not be seen before the odd version (which it saw
    // through tile.sync()). An acquire fence orders only its loads.
    detail::fence_acq_rel();
    unsigned removed = 0;
    for (int s = static_cast<int>(tile.thread_rank()); s < B; s += TileSize) {
      removed += detail::load_relaxed(view.buckets[b].keys[s]) != empty_key;
      detail::store_relaxed(view.buckets[b].keys[s], empty_key);
    }
    if (view.tails != nullptr && tile.thread_rank() == 0) {  // empty: no oldest entry
      detail::store_relaxed(view.tails[b], detail::no_rank);
    }
    if (view.live != nullptr) {  // global capacity layer: keep the live count exact
      for (unsigned off = TileSize / 2; off > 0; off >>= 1) {
        removed += tile.shfl_xor(removed, off);
      }
      if (tile.thread_rank() == 0 && removed != 0) {
        detail::add_live(view.live, -static_cast<std::int64_t>(removed));
      }
    }
    detail::fence_release();  // every lane's stores precede the unlock below
    tile.sync();
    if (tile.thread_rank() == 0) { detail::store_release(view.versions[b], held + 1); }
  }
}

/// Shared memory of export_body: one round's entries, compacted.
template <int B, int TileSize>
struct export_shared {
  static constexpr int round_capacity = shape<TileSize>::tiles_per_block * B;
  key_type keys[round_capacity];
  value_type values[round_capacity];
  unsigned filled;
  std::size_t base;
};

/// One bucket read consistently by a tile (optimistic, validated by the version like a find):
/// lane l gets slots l, l + TileSize, ...
template <int B, int TileSize, class Tile>
CCHT_HOST_DEVICE void read_bucket_consistent(Tile const& tile, bucket_array_view<B> view,
                                             std::size_t b, key_type (&k)[B / TileSize],
                                             value_type (&v)[B / TileSize]) {
  unsigned const lane = tile.thread_rank();
  auto const& bk = view.buckets[b];
  unsigned spins = 0;
  while (true) {
    std::uint32_t const v1 = detail::load_acquire(view.versions[b]);
    // Every lane must reach the shfl: one inside `||` would be skipped by lanes that saw an odd
    // version, and a *_sync collective that some of its lanes skip is undefined behaviour.
    std::uint32_t const v0 = tile.shfl(v1, 0);
    if (tile.ballot((v1 & 1u) != 0 || v1 != v0) != 0) {
      detail::spin_wait(spins);
      continue;
    }
    for (int j = 0; j < B / TileSize; ++j) {
      k[j] = detail::load_relaxed(bk.keys[j * TileSize + lane]);
      v[j] = detail::load_relaxed(bk.values[j * TileSize + lane]);
    }
    detail::fence_acquire();
    std::uint32_t const v2 = detail::load_relaxed(view.versions[b]);
    if (tile.ballot(v2 != v1) == 0) { return; }
  }
}

/// A tile's bucket entries appended to the block's round buffer (lane order within each pass).
template <int B, int TileSize, class Tile>
CCHT_HOST_DEVICE void append_to_round(Tile const& tile, export_shared<B, TileSize>& sh,
                                      key_type const (&k)[B / TileSize],
                                      value_type const (&v)[B / TileSize]) {
  constexpr int per_lane = B / TileSize;
  unsigned const lane = tile.thread_rank();
  unsigned masks[per_lane];
  unsigned total = 0;
  for (int j = 0; j < per_lane; ++j) {
    masks[j] = tile.ballot(k[j] != empty_key);
    total += static_cast<unsigned>(detail::popcount(masks[j]));
  }
  unsigned at = 0;
  if (lane == 0 && total != 0) { at = add_shared(sh.filled, total); }
  at = tile.shfl(at, 0);
  unsigned const below = (1u << lane) - 1u;
  for (int j = 0; j < per_lane; ++j) {
    if (k[j] != empty_key) {
      unsigned const pos = at + static_cast<unsigned>(detail::popcount(masks[j] & below));
      sh.keys[pos] = k[j];
      sh.values[pos] = v[j];
    }
    at += static_cast<unsigned>(detail::popcount(masks[j]));
  }
}

/**
 * @brief Copies every entry out, each bucket read consistently (optimistic, validated by the
 *        bucket's version like a find). Entries are compacted through @p count with one global
 *        atomic per block and round; only indices below @p capacity are written, all are counted.
 */
template <int B, int TileSize, class Block>
CCHT_HOST_DEVICE void export_body(Block const& block, export_shared<B, TileSize>& sh,
                                  bucket_array_view<B> view, key_type* keys_out,
                                  value_type* values_out, std::size_t capacity,
                                  std::size_t* count) {
  static_assert(B % TileSize == 0);
  constexpr int tiles_per_block = shape<TileSize>::block_threads / TileSize;
  auto const tile = block.tile();
  std::size_t const rounds =
      (std::size_t{view.num_buckets} + tiles_per_block - 1) / tiles_per_block;
  if (block.thread_index() == 0) { sh.filled = 0; }
  block.sync();
  // Rounds are block-uniform (the barriers below need every thread).
  for (std::size_t r = block.block_index(); r < rounds; r += block.grid_blocks()) {
    std::size_t const b = r * tiles_per_block + block.thread_index() / TileSize;
    if (b < view.num_buckets) {
      key_type k[B / TileSize];
      value_type v[B / TileSize];
      read_bucket_consistent<B, TileSize>(tile, view, b, k, v);
      append_to_round<B, TileSize>(tile, sh, k, v);
    }
    block.sync();
    unsigned const n = sh.filled;
    if (block.thread_index() == 0 && n != 0) { sh.base = add_global(*count, std::size_t{n}); }
    block.sync();
    if (n != 0) {
      std::size_t const at = sh.base;
      for (unsigned t = block.thread_index(); t < n; t += block.block_threads()) {
        if (at + t < capacity) {
          keys_out[at + t] = sh.keys[t];
          values_out[at + t] = sh.values[t];
        }
      }
    }
    block.sync();  // everyone has read `filled`, `base` and the buffer before the reset
    if (block.thread_index() == 0) { sh.filled = 0; }
    block.sync();
  }
}

}  // namespace ccht::kernels
