/**
 * @file table_ref.hpp
 * @brief ccht::table_ref, the trivially copyable handle through which kernels (or, for a CPU
 *        table, host threads) call the table's per-key operations directly.
 */
#pragma once

#include <ccht/core/bucket_ops.hpp>
#include <ccht/core/config.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/core/types.hpp>
#include <ccht/memory_space.hpp>

#include <cuda/atomic>

#include <type_traits>

namespace ccht {

/**
 * @brief Non-owning handle to a table's storage, passed to kernels by value.
 *
 * Every member is called by all threads of a tile with the same arguments (a tile of one thread
 * is fine: pass ccht::scalar_tile{}). The overloads without a tick take one from the table's
 * logical clock with one atomic add per call. Operations through refs and through the owning
 * table's bulk calls may run concurrently; the concurrency contract of ccht::table applies.
 *
 * Where the operations may run follows from @p MemorySpace, the table backend's memory space: a
 * CPU table's ref (ccht::host_memory) works from any host thread; a CUDA table's ref
 * (ccht::device_memory) holds device pointers, so its operations compile only in device code,
 * and calling one from host code is a compile-time error rather than a crash. view() and
 * num_buckets() only copy fields and work anywhere.
 *
 * @tparam Policy in-bucket policy (ccht::lru, ccht::fifo, ccht::lfu, ...)
 * @tparam BucketSize slots per bucket
 * @tparam MemorySpace ccht::host_memory or ccht::device_memory
 */
template <class Policy, int BucketSize = default_bucket_size, class MemorySpace = host_memory>
class table_ref {
  // Dependent on the tile type so it is checked per call site, and only in host compilation: in
  // nvcc's device pass (__CUDA_ARCH__ defined) every space is accessible.
  template <class Tile>
  CCHT_HOST_DEVICE static constexpr void check_callable_here() noexcept {
#if !defined(__CUDA_ARCH__)
    static_assert(MemorySpace::host_accessible || sizeof(Tile) == 0,
                  "ccht::table_ref: this ref points to device memory (the ref() of a "
                  "ccht::table<ccht::cuda_backend>); call its operations from a kernel, or use "
                  "the table's bulk calls from host code");
#endif
  }

 public:
  /// Memory space of the storage the ref points to.
  using memory_space = MemorySpace;
  /// Storage view type.
  using view_type = bucket_array_view<BucketSize>;
  /// Core algorithm used.
  using ops = bucket_ops<Policy, BucketSize>;

  table_ref() = default;
  /// Wraps a storage view and the table's clock word.
  CCHT_HOST_DEVICE table_ref(view_type view, tick_type* clock) noexcept
      : view_(view), clock_(clock) {}

  /// Storage view.
  CCHT_HOST_DEVICE view_type const& view() const noexcept { return view_; }
  /// Number of buckets.
  CCHT_HOST_DEVICE std::uint32_t num_buckets() const noexcept { return view_.num_buckets; }

  /// Reserves @p n consecutive ticks and returns the first.
  template <class Tile>
  CCHT_HOST_DEVICE tick_type next_ticks(Tile const& tile, tick_type n = 1) const noexcept {
    check_callable_here<Tile>();
    tick_type t = 0;
    if (tile.thread_rank() == 0) {
      t = cuda::atomic_ref<tick_type, cuda::thread_scope_device>(*clock_).fetch_add(
              n, cuda::std::memory_order_relaxed) + 1;
    }
    return tile.shfl(t, 0);
  }

  /// Finds @p key; on a hit stores its value in @p value, promotes it and returns true.
  template <class Tile>
  CCHT_HOST_DEVICE bool find(Tile const& tile, key_type key, value_type& value,
                             tick_type tick) const noexcept {
    check_callable_here<Tile>();
    return ops::find(tile, view_, key, tick, value);
  }
  /// find() with a tick from the table's clock.
  template <class Tile>
  CCHT_HOST_DEVICE bool find(Tile const& tile, key_type key, value_type& value) const noexcept {
    check_callable_here<Tile>();
    return find(tile, key, value, next_ticks(tile));
  }
  /// Whether @p key is present (no promotion).
  template <class Tile>
  CCHT_HOST_DEVICE bool contains(Tile const& tile, key_type key) const noexcept {
    check_callable_here<Tile>();
    return ops::contains(tile, view_, key);
  }
  /**
   * @brief Upserts (@p key, @p value); see ccht::bucket_ops::insert_or_assign.
   * @return op_status::assigned, inserted or inserted_evicted (then the victim is in
   *         @p evicted_key / @p evicted_value)
   */
  template <class Tile>
  CCHT_HOST_DEVICE op_status insert_or_assign(Tile const& tile, key_type key, value_type value,
                                              key_type& evicted_key, value_type& evicted_value,
                                              tick_type tick) const noexcept {
    check_callable_here<Tile>();
    return ops::insert_or_assign(tile, view_, key, value, tick, evicted_key, evicted_value);
  }
  /// insert_or_assign() with a tick from the table's clock.
  template <class Tile>
  CCHT_HOST_DEVICE op_status insert_or_assign(Tile const& tile, key_type key, value_type value,
                                              key_type& evicted_key,
                                              value_type& evicted_value) const noexcept {
    check_callable_here<Tile>();
    return insert_or_assign(tile, key, value, evicted_key, evicted_value, next_ticks(tile));
  }
  /**
   * @brief Pins @p key (core/pin.hpp): it is not evicted until unpinned as often; its value goes
   *        to @p value. Pinnable policies only (lru, fifo, double_lru, coarse_lru).
   * @return pin_status::done, absent, or saturated (ccht::max_pins held already)
   */
  template <class Tile>
  CCHT_HOST_DEVICE pin_status pin(Tile const& tile, key_type key, value_type& value) const noexcept {
    check_callable_here<Tile>();
    return ops::pin(tile, view_, key, value);
  }
  /// Releases one pin of @p key; the last release is a use at @p tick.
  /// @return pin_status::done, absent, or not_pinned
  template <class Tile>
  CCHT_HOST_DEVICE pin_status unpin(Tile const& tile, key_type key, tick_type tick) const noexcept {
    check_callable_here<Tile>();
    return ops::unpin(tile, view_, key, tick);
  }
  /// unpin() with a tick from the table's clock.
  template <class Tile>
  CCHT_HOST_DEVICE pin_status unpin(Tile const& tile, key_type key) const noexcept {
    check_callable_here<Tile>();
    return unpin(tile, key, next_ticks(tile));
  }
  /// Erases @p key; true when it was present.
  template <class Tile>
  CCHT_HOST_DEVICE bool erase(Tile const& tile, key_type key) const noexcept {
    check_callable_here<Tile>();
    return ops::erase(tile, view_, key);
  }

 private:
  view_type view_{};
  tick_type* clock_ = nullptr;
};

static_assert(std::is_trivially_copyable_v<table_ref<lru>>);
static_assert(std::is_trivially_copyable_v<table_ref<lru, default_bucket_size, device_memory>>);

}  // namespace ccht
