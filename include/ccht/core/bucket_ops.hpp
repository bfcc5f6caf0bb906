/**
 * @file bucket_ops.hpp
 * @brief The CCHT algorithm for one key: find, contains, insert_or_assign (evicting, never
 *        kicking out) and erase, written once for host and device and generic over a thread tile.
 *
 * Every operation touches only the key's two candidate buckets.
 *
 * Concurrency protocol (per-bucket seqlock, after MemC3/libcuckoo):
 * - Writers (insert_or_assign, erase) lock both candidate buckets in index order by moving the
 *   bucket's version from even to odd with a CAS, check both buckets for the key while holding both
 *   locks (so a key is never stored twice), modify, and release with a store of version + 1.
 * - Readers (find, contains) take no lock: load the version (acquire), scan keys and load the value
 *   with relaxed atomics, fence (acquire), reload the version, and retry if it moved or was odd.
 *   Every lane of a tile validates its own loads, so a value is never torn or another key's.
 * - A hit promotes its slot with a relaxed store after validation; a lost race only blurs recency.
 * All shared words are accessed through cuda::atomic_ref, so the host build is data-race free in
 * the C++ memory model (and ThreadSanitizer can check it).
 */
#pragma once

#include <ccht/core/bucket.hpp>
#include <ccht/core/config.hpp>
#include <ccht/core/hash.hpp>
#include <ccht/core/tile.hpp>
#include <ccht/core/types.hpp>

#include <cuda/atomic>

#include <cstdint>
#if !CCHT_DEVICE_CODE
#include <thread>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#endif

namespace ccht {
namespace detail {

template <class T>
using atomic_ref_t = cuda::atomic_ref<T, cuda::thread_scope_device>;

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
CCHT_HOST_DEVICE CCHT_FORCEINLINE void fence_acquire() noexcept {
  cuda::atomic_thread_fence(cuda::std::memory_order_acquire, cuda::thread_scope_device);
}
CCHT_HOST_DEVICE CCHT_FORCEINLINE void fence_release() noexcept {
  cuda::atomic_thread_fence(cuda::std::memory_order_release, cuda::thread_scope_device);
}

/// Back-off while a bucket is locked: pause, and on the host yield now and then so that an
/// oversubscribed writer holding the lock gets to run.
CCHT_HOST_DEVICE CCHT_FORCEINLINE void spin_wait(unsigned& spins) noexcept {
#if CCHT_DEVICE_CODE
  __nanosleep(spins < 8 ? 16u : 256u);
  ++spins;
#else
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

/// Result of one pass over a locked bucket.
struct scan_result {
  int match = -1;  ///< slot holding the key, or -1
  int empty = -1;  ///< first free slot, or -1
};

/// One pass over a bucket (caller holds its lock): where the key is, and the first free slot.
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE scan_result scan_locked(Tile const& tile, bucket<B> const& b,
                                                          key_type key) noexcept {
  constexpr int T = static_cast<int>(Tile::num_threads());
  static_assert(B % T == 0, "the tile size must divide the bucket size");
  scan_result r;
  for (int base = 0; base < B; base += T) {
    key_type const k = load_relaxed(b.keys[base + static_cast<int>(tile.thread_rank())]);
    unsigned const hit = tile.ballot(k == key);
    if (hit) {
      r.match = base + lowest_lane(hit);
      return r;
    }
    unsigned const free = tile.ballot(k == empty_key);
    if (free && r.empty < 0) { r.empty = base + lowest_lane(free); }
  }
  return r;
}

/// Slot holding @p key in a bucket, or -1 (unsynchronised scan; the caller validates).
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE int find_slot(Tile const& tile, bucket<B> const& b,
                                                key_type key) noexcept {
  constexpr int T = static_cast<int>(Tile::num_threads());
  for (int base = 0; base < B; base += T) {
    key_type const k = load_relaxed(b.keys[base + static_cast<int>(tile.thread_rank())]);
    unsigned const hit = tile.ballot(k == key);
    if (hit) { return base + lowest_lane(hit); }
  }
  return -1;
}

/// Slot with the smallest score in a full, locked bucket (lowest slot on ties), and its score.
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE int min_score_slot(Tile const& tile, bucket<B> const& b,
                                                     score_type& min_score) noexcept {
  constexpr int T = static_cast<int>(Tile::num_threads());
  int slot = static_cast<int>(tile.thread_rank());
  score_type s = load_relaxed(b.scores[slot]);
  for (int i = slot + T; i < B; i += T) {
    score_type const si = load_relaxed(b.scores[i]);
    if (si < s) { s = si; slot = i; }
  }
  for (unsigned off = T / 2; off > 0; off >>= 1) {
    score_type const os = tile.shfl_xor(s, off);
    int const oslot = tile.shfl_xor(slot, off);
    if (os < s || (os == s && oslot < slot)) { s = os; slot = oslot; }
  }
  min_score = s;
  return slot;
}

/// Optimistic read of one bucket. Returns the slot of @p key (value in @p value) or -1.
template <class Tile, int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE int read_bucket(Tile const& tile, bucket<B> const& b,
                                        std::uint32_t const& version, key_type key,
                                        value_type& value) noexcept {
  unsigned spins = 0;
  while (true) {
    std::uint32_t const v1 = load_acquire(version);
    // Proceed only when every lane saw the same even version, so the tile stays converged.
    if (tile.ballot((v1 & 1u) != 0 || v1 != tile.shfl(v1, 0)) != 0) {
      spin_wait(spins);
      continue;
    }
    int const slot = find_slot(tile, b, key);
    value_type v = 0;
    if (slot >= 0) { v = load_relaxed(b.values[slot]); }
    fence_acquire();
    std::uint32_t const v2 = load_relaxed(version);
    if (tile.ballot(v2 != v1) == 0) {
      value = v;
      return slot;
    }
  }
}

}  // namespace detail

/**
 * @brief The per-key CCHT operations over a bucket array, for in-bucket policy @p Policy.
 *
 * All functions must be called by every thread of @p tile with the same arguments; results are
 * returned to every thread. They never allocate and never touch more than the key's two
 * candidate buckets. @p tick orders operations: use a larger tick for a later operation.
 */
template <class Policy, int BucketSize>
struct bucket_ops {
  /// View type operated on.
  using view_type = bucket_array_view<BucketSize>;

  /**
   * @brief Looks @p key up; on a hit writes its value to @p value and promotes it.
   * @return true on a hit
   */
  template <class Tile>
  CCHT_HOST_DEVICE static bool find(Tile const& tile, view_type const& v, key_type key,
                                    tick_type tick, value_type& value) noexcept {
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    std::uint32_t bi = cb.first;
    int slot = detail::read_bucket(tile, v.buckets[bi], v.versions[bi], key, value);
    if (slot < 0) {
      bi = cb.second;
      slot = detail::read_bucket(tile, v.buckets[bi], v.versions[bi], key, value);
      if (slot < 0) { return false; }
    }
    if constexpr (Policy::promotes_on_hit) {
      if (tile.thread_rank() == 0) {
        score_type& s = v.buckets[bi].scores[slot];
        score_type const old = detail::load_relaxed(s);
        score_type const now = Policy::on_hit(old, tick);
        if (now != old) { detail::store_relaxed(s, now); }
      }
    }
    return true;
  }

  /// Whether @p key is present. Does not promote.
  template <class Tile>
  CCHT_HOST_DEVICE static bool contains(Tile const& tile, view_type const& v,
                                        key_type key) noexcept {
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    value_type ignored;
    return detail::read_bucket(tile, v.buckets[cb.first], v.versions[cb.first], key, ignored) >= 0 ||
           detail::read_bucket(tile, v.buckets[cb.second], v.versions[cb.second], key, ignored) >= 0;
  }

  /**
   * @brief Inserts @p key or assigns @p value to it.
   *
   * An existing key is updated and promoted. Otherwise a free slot is taken, in the first
   * candidate bucket if it has one, else in the second. Otherwise the tail (smallest score) of
   * whichever bucket has the older tail (the first on a tie) is evicted, written to
   * @p evicted_key / @p evicted_value, and replaced.
   */
  template <class Tile>
  CCHT_HOST_DEVICE static op_status insert_or_assign(Tile const& tile, view_type const& v,
                                                     key_type key, value_type value,
                                                     tick_type tick, key_type& evicted_key,
                                                     value_type& evicted_value) noexcept {
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    std::uint32_t const lo = cb.first < cb.second ? cb.first : cb.second;
    std::uint32_t const hi = cb.first < cb.second ? cb.second : cb.first;
    std::uint32_t vlo = 0, vhi = 0;
    if (tile.thread_rank() == 0) {
      vlo = detail::lock_bucket(v.versions[lo]);
      vhi = detail::lock_bucket(v.versions[hi]);
      detail::fence_release();  // slot stores below must not be seen before the odd versions
    }
    tile.sync();
    detail::fence_acquire();

    bucket<BucketSize>& b1 = v.buckets[cb.first];
    bucket<BucketSize>& b2 = v.buckets[cb.second];
    detail::scan_result const r1 = detail::scan_locked(tile, b1, key);
    op_status status;
    bucket<BucketSize>* target = nullptr;
    int slot = -1;
    if (r1.match >= 0) {
      target = &b1;
      slot = r1.match;
      status = op_status::assigned;
    } else {
      detail::scan_result const r2 = detail::scan_locked(tile, b2, key);
      if (r2.match >= 0) {
        target = &b2;
        slot = r2.match;
        status = op_status::assigned;
      } else if (r1.empty >= 0) {
        target = &b1;
        slot = r1.empty;
        status = op_status::inserted;
      } else if (r2.empty >= 0) {
        target = &b2;
        slot = r2.empty;
        status = op_status::inserted;
      } else {
        score_type m1, m2;
        int const s1 = detail::min_score_slot(tile, b1, m1);
        int const s2 = detail::min_score_slot(tile, b2, m2);
        bool const second_older = m2 < m1;
        target = second_older ? &b2 : &b1;
        slot = second_older ? s2 : s1;
        status = op_status::inserted_evicted;
      }
    }

    if (tile.thread_rank() == 0) {
      score_type& score = target->scores[slot];
      if (status == op_status::assigned) {
        detail::store_relaxed(target->values[slot], value);
        detail::store_relaxed(score, Policy::on_hit(detail::load_relaxed(score), tick));
      } else {
        if (status == op_status::inserted_evicted) {
          evicted_key = detail::load_relaxed(target->keys[slot]);
          evicted_value = detail::load_relaxed(target->values[slot]);
        }
        detail::store_relaxed(target->values[slot], value);
        detail::store_relaxed(score, Policy::on_insert(tick));
        detail::store_relaxed(target->keys[slot], key);
      }
      detail::store_release(v.versions[hi], vhi + 1);
      detail::store_release(v.versions[lo], vlo + 1);
    }
    if (status == op_status::inserted_evicted) {
      evicted_key = tile.shfl(evicted_key, 0);
      evicted_value = tile.shfl(evicted_value, 0);
    }
    return status;
  }

  /// Removes @p key if present. @return true when it was removed
  template <class Tile>
  CCHT_HOST_DEVICE static bool erase(Tile const& tile, view_type const& v, key_type key) noexcept {
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    std::uint32_t const lo = cb.first < cb.second ? cb.first : cb.second;
    std::uint32_t const hi = cb.first < cb.second ? cb.second : cb.first;
    std::uint32_t vlo = 0, vhi = 0;
    if (tile.thread_rank() == 0) {
      vlo = detail::lock_bucket(v.versions[lo]);
      vhi = detail::lock_bucket(v.versions[hi]);
      detail::fence_release();
    }
    tile.sync();
    detail::fence_acquire();
    bucket<BucketSize>* target = &v.buckets[cb.first];
    int slot = detail::find_slot(tile, *target, key);
    if (slot < 0) {
      target = &v.buckets[cb.second];
      slot = detail::find_slot(tile, *target, key);
    }
    if (tile.thread_rank() == 0) {
      if (slot >= 0) { detail::store_relaxed(target->keys[slot], empty_key); }
      detail::store_release(v.versions[hi], vhi + 1);
      detail::store_release(v.versions[lo], vlo + 1);
    }
    return slot >= 0;
  }

  /// Prefetches what a find of @p key reads first (host only; a no-op on the device).
  /// Force-inlined: a function whose only effect is __builtin_prefetch is "pure" to GCC's IPA,
  /// so an out-of-line call to it is deleted as dead code and nothing is prefetched.
  CCHT_HOST_DEVICE CCHT_FORCEINLINE static void prefetch(view_type const& v, key_type key) noexcept {
#if !CCHT_DEVICE_CODE
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    __builtin_prefetch(&v.versions[cb.first]);
    __builtin_prefetch(&v.buckets[cb.first].keys[0]);
    if constexpr (BucketSize * sizeof(key_type) > 64) {
      __builtin_prefetch(&v.buckets[cb.first].keys[64 / sizeof(key_type)]);
    }
#else
    (void)v;
    (void)key;
#endif
  }

  /// Prefetches, for writing, what an upsert or erase of @p key may touch in both buckets.
  /// Force-inlined for the same reason as prefetch().
  CCHT_HOST_DEVICE CCHT_FORCEINLINE static void prefetch_for_update(view_type const& v, key_type key) noexcept {
#if !CCHT_DEVICE_CODE
    candidate_buckets const cb = candidates(key, v.seed, v.num_buckets);
    for (std::uint32_t bi : {cb.first, cb.second}) {
      __builtin_prefetch(&v.versions[bi], 1);
      auto const* p = reinterpret_cast<char const*>(&v.buckets[bi]);
      for (std::size_t off = 0; off < sizeof(bucket<BucketSize>); off += 64) {
        __builtin_prefetch(p + off, 1);
      }
    }
#else
    (void)v;
    (void)key;
#endif
  }
};

}  // namespace ccht
