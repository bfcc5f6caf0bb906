/**
 * @file atomics.hpp
 * @brief Atomic accessors, fences, back-off and the bucket lock, for host and device alike.
 *
 * Every shared word of the table is accessed through cuda::atomic_ref, so the host build is
 * data-race free in the C++ memory model and ThreadSanitizer can check it.
 */
#pragma once

#include <ccht/core/config.hpp>

#include <cuda/atomic>

#include <cstdint>
#if !CCHT_DEVICE_CODE
#include <thread>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#endif

#ifndef CCHT_LANE_HOOKS
/// 1 in builds whose every shared store reports to the lockstep runner (preset `lanes`).
#define CCHT_LANE_HOOKS 0
#endif
#if CCHT_LANE_HOOKS && !CCHT_DEVICE_CODE
#include <ccht/lanes/store_hook.hpp>
#endif

namespace ccht::detail {

#if CCHT_LANE_HOOKS && !CCHT_DEVICE_CODE
/// cuda::atomic_ref whose writes tell the lockstep runner their address first, so that it can
/// report two lanes of a tile storing to one word in one step (ccht/lanes/lockstep_tile.hpp).
/// Only in the `lanes` preset, where every translation unit sees the same definition.
template <class T>
class atomic_ref_t : public cuda::atomic_ref<T, cuda::thread_scope_device> {
  using base = cuda::atomic_ref<T, cuda::thread_scope_device>;
  using order = cuda::std::memory_order;
  static constexpr order seq = cuda::std::memory_order_seq_cst;

 public:
  explicit atomic_ref_t(T& x) noexcept : base(x), p_(&x) {}
  void store(T v, order o = seq) const noexcept { noted().store(v, o); }
  T fetch_add(T v, order o = seq) const noexcept { return noted().fetch_add(v, o); }
  T fetch_sub(T v, order o = seq) const noexcept { return noted().fetch_sub(v, o); }
  T fetch_max(T v, order o = seq) const noexcept { return noted().fetch_max(v, o); }
  T fetch_min(T v, order o = seq) const noexcept { return noted().fetch_min(v, o); }
  T exchange(T v, order o = seq) const noexcept { return noted().exchange(v, o); }
  bool compare_exchange_strong(T& e, T d, order s, order f) const noexcept {
    return noted().compare_exchange_strong(e, d, s, f);
  }
  bool compare_exchange_strong(T& e, T d, order o = seq) const noexcept {
    return noted().compare_exchange_strong(e, d, o);
  }
  bool compare_exchange_weak(T& e, T d, order s, order f) const noexcept {
    return noted().compare_exchange_weak(e, d, s, f);
  }
  bool compare_exchange_weak(T& e, T d, order o = seq) const noexcept {
    return noted().compare_exchange_weak(e, d, o);
  }

 private:
  /// Reports the store about to happen, then hands over the plain reference that makes it.
  base const& noted() const noexcept {
    ccht::lanes::detail::note_store(p_);
    return *this;
  }
  T* p_;
};
#else
template <class T>
using atomic_ref_t = cuda::atomic_ref<T, cuda::thread_scope_device>;
#endif

template <class T>
CCHT_HOST_DEVICE CCHT_FORCEINLINE T load_relaxed(T const& x) noexcept {
  return atomic_ref_t<T>(const_cast<T&>(x)).load(cuda::std::memory_order_relaxed);
}
template <class T>
CCHT_HOST_DEVICE CCHT_FORCEINLINE T load_acquire(T const& x) noexcept {
  return atomic_ref_t<T>(const_cast<T&>(x)).load(cuda::std::memory_order_acquire);
}
template <class T>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void store_relaxed(T& x, T v) noexcept {
  atomic_ref_t<T>(x).store(v, cuda::std::memory_order_relaxed);
}
template <class T>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void store_release(T& x, T v) noexcept {
  atomic_ref_t<T>(x).store(v, cuda::std::memory_order_release);
}
/// Atomic max (relaxed): the word becomes max(word, v).
template <class T>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void fetch_max_relaxed(T& x, T v) noexcept {
  atomic_ref_t<T>(x).fetch_max(v, cuda::std::memory_order_relaxed);
}
/// Relaxed compare-and-swap: stores @p desired if the word holds @p expected, else loads it
/// into @p expected. Strong, so a false return always means another writer changed the word.
template <class T>
CCHT_HOST_DEVICE CCHT_FORCEINLINE bool cas_relaxed(T& x, T& expected, T desired) noexcept {
  return atomic_ref_t<T>(x).compare_exchange_strong(expected, desired,
                                                    cuda::std::memory_order_relaxed,
                                                    cuda::std::memory_order_relaxed);
}
/// Compare-and-swap with acquire on success: a writer claiming a slot synchronises with the
/// release of the last lock-free unpin, so the old holder's reads of its data happen before.
template <class T>
CCHT_HOST_DEVICE CCHT_FORCEINLINE bool cas_acquire(T& x, T& expected, T desired) noexcept {
  return atomic_ref_t<T>(x).compare_exchange_strong(expected, desired,
                                                    cuda::std::memory_order_acquire,
                                                    cuda::std::memory_order_relaxed);
}
/// Compare-and-swap with release on success (a lock-free unpin publishes the holder's reads).
template <class T>
CCHT_HOST_DEVICE CCHT_FORCEINLINE bool cas_release(T& x, T& expected, T desired) noexcept {
  return atomic_ref_t<T>(x).compare_exchange_strong(expected, desired,
                                                    cuda::std::memory_order_release,
                                                    cuda::std::memory_order_relaxed);
}
/// Acquire and release fence: for a lane that both loads and stores under a lock another lane
/// of its tile took (its stores must not be seen before the lock, nor its loads read stale data).
CCHT_HOST_DEVICE CCHT_FORCEINLINE void fence_acq_rel() noexcept {
  cuda::atomic_thread_fence(cuda::std::memory_order_acq_rel, cuda::thread_scope_device);
}
CCHT_HOST_DEVICE CCHT_FORCEINLINE void fence_acquire() noexcept {
  cuda::atomic_thread_fence(cuda::std::memory_order_acquire, cuda::thread_scope_device);
}
CCHT_HOST_DEVICE CCHT_FORCEINLINE void fence_release() noexcept {
  cuda::atomic_thread_fence(cuda::std::memory_order_release, cuda::thread_scope_device);
}

#if !CCHT_DEVICE_CODE
/**
 * Set on a host thread while a lockstep run (ccht/lanes) executes lanes on it: spin_wait calls it,
 * and it parks the spinning lane until the next step, so that a tile of the same run holding the
 * lock gets to run (returns false outside a lane). Null everywhere else, which costs spin_wait
 * one thread-local load.
 */
inline thread_local bool (*lane_spin_hook)() noexcept = nullptr;
#endif

/// Back-off while a bucket is locked: pause, and on the host yield now and then so that an
/// oversubscribed writer holding the lock gets to run.
CCHT_HOST_DEVICE CCHT_FORCEINLINE void spin_wait(unsigned& spins) noexcept {
#if CCHT_DEVICE_CODE
  __nanosleep(spins < 8 ? 16u : 256u);
  ++spins;
#else
  if (lane_spin_hook != nullptr) { (void)lane_spin_hook(); }
  if (++spins < 128) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  } else {
    spins = 0;
    std::this_thread::yield();
  }
#endif
}

/// Locks one bucket: version even -> odd. Returns the odd value held.
CCHT_HOST_DEVICE inline std::uint32_t lock_bucket(std::uint32_t& version) noexcept {
  atomic_ref_t<std::uint32_t> ref(version);
  unsigned spins = 0;
  while (true) {
    std::uint32_t v = ref.load(cuda::std::memory_order_relaxed);
    if ((v & 1u) == 0 &&
        ref.compare_exchange_weak(v, v + 1, cuda::std::memory_order_acquire,
                                  cuda::std::memory_order_relaxed)) {
      return v + 1;
    }
    spin_wait(spins);
  }
}

}  // namespace ccht::detail
