// CPU backend of ccht::table: the core's one-thread path over batches, on OpenMP threads.
//
// Batches are cut into chunks. Each chunk runs in index order on one thread with a software
// prefetch pipeline (the buckets of element i + prefetch_distance are requested while element i
// is processed): that memory-level parallelism is what a one-key-at-a-time map cannot have.
// Evictions are buffered per chunk and appended with one atomic add per chunk, so a full table
// (every insert evicts) has no shared counter on its hot path.
#include <ccht/core/bucket_ops.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/detail/launcher.hpp>
#include <ccht/detail/validate.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <span>

#if CCHT_WITH_OPENMP
#include <omp.h>
#endif

namespace ccht::detail {
namespace {

using cpu_launcher = launcher<cpu_backend>;
constexpr int B = default_bucket_size;
constexpr std::size_t chunk = 2048;
constexpr std::size_t prefetch_distance = 8;

/// Runs f(begin, end) over [0, n) in chunks; in parallel when there is more than one chunk.
template <class F>
void for_each_chunk(std::size_t n, int threads, F&& f) {
#if CCHT_WITH_OPENMP
  std::size_t const nchunks = (n + chunk - 1) / chunk;
  int const nt = threads > 0 ? threads : omp_get_max_threads();
  if (nchunks > 1 && nt > 1) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (std::size_t c = 0; c < nchunks; ++c) { f(c * chunk, std::min(n, (c + 1) * chunk)); }
    return;
  }
#else
  (void)threads;
#endif
  for (std::size_t b = 0; b < n; b += chunk) { f(b, std::min(n, b + chunk)); }
}

/// Per-chunk eviction buffer, flushed into the caller's output with one atomic add.
struct eviction_buffer {
  key_type keys[chunk];
  value_type values[chunk];
  std::size_t n = 0;

  void push(key_type k, value_type v) {
    keys[n] = k;
    values[n] = v;
    ++n;
  }
  void flush(key_type* out_keys, value_type* out_values, std::size_t* counter) {
    if (n == 0) { return; }
    std::size_t const at = std::atomic_ref<std::size_t>(*counter).fetch_add(n);
    std::memcpy(out_keys + at, keys, n * sizeof(key_type));
    std::memcpy(out_values + at, values, n * sizeof(value_type));
    n = 0;
  }
};

tick_type reserve_ticks(tick_type* clock, std::size_t n) {
  return std::atomic_ref<tick_type>(*clock).fetch_add(n, std::memory_order_relaxed) + 1;
}

template <class Policy>
using ops_t = bucket_ops<Policy, B>;

}  // namespace

void cpu_launcher::create(table_state& s, std::uint32_t num_buckets, std::uint64_t seed) {
  s.view.num_buckets = num_buckets;
  s.view.seed = seed;
  try {
    s.view.buckets = static_cast<bucket<B>*>(
        cpu_backend::allocate(std::size_t{num_buckets} * sizeof(bucket<B>)));
    s.view.versions = static_cast<std::uint32_t*>(
        cpu_backend::allocate(std::size_t{num_buckets} * sizeof(std::uint32_t)));
    s.clock = static_cast<tick_type*>(cpu_backend::allocate(sizeof(tick_type)));
  } catch (...) {
    destroy(s);
    throw;
  }
  for (std::uint32_t b = 0; b < num_buckets; ++b) {
    auto& bk = s.view.buckets[b];
    std::fill(std::begin(bk.keys), std::end(bk.keys), empty_key);
    std::fill(std::begin(bk.values), std::end(bk.values), value_type{0});
    std::fill(std::begin(bk.scores), std::end(bk.scores), score_type{0});
  }
  std::memset(s.view.versions, 0, std::size_t{num_buckets} * sizeof(std::uint32_t));
  *s.clock = 0;
}

void cpu_launcher::destroy(table_state& s) noexcept {
  cpu_backend::deallocate(s.view.buckets);
  cpu_backend::deallocate(s.view.versions);
  cpu_backend::deallocate(s.clock);
  s = {};
}

std::size_t cpu_launcher::size(table_state const& s, stream_type) {
  std::size_t n = 0;
  for (std::uint32_t b = 0; b < s.view.num_buckets; ++b) {
    for (key_type const& k : s.view.buckets[b].keys) { n += load_relaxed(k) != empty_key; }
  }
  return n;
}

void cpu_launcher::clear(table_state const& s, stream_type) {
  for (std::uint32_t b = 0; b < s.view.num_buckets; ++b) {
    std::uint32_t const v = lock_bucket(s.view.versions[b]);
    fence_release();
    for (key_type& k : s.view.buckets[b].keys) { store_relaxed(k, empty_key); }
    store_release(s.view.versions[b], v + 1);
  }
}

template <class Policy>
void cpu_launcher::find(table_state const& s, key_type const* keys, value_type* values,
                        bool* found, std::size_t n, std::size_t*, stream_type) {
  check_keys_host({keys, n}, "find");
  tick_type const base = reserve_ticks(s.clock, n);
  auto const v = s.view;
  for_each_chunk(n, s.cpu_threads, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      if (i + prefetch_distance < e) { ops_t<Policy>::prefetch(v, keys[i + prefetch_distance]); }
      value_type val;
      bool const hit = ops_t<Policy>::find(scalar_tile{}, v, keys[i], base + i, val);
      found[i] = hit;
      if (hit) { values[i] = val; }
    }
  });
}

void cpu_launcher::contains(table_state const& s, key_type const* keys, bool* found, std::size_t n,
                            std::size_t*, stream_type) {
  check_keys_host({keys, n}, "contains");
  auto const v = s.view;
  for_each_chunk(n, s.cpu_threads, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      if (i + prefetch_distance < e) { ops_t<lru>::prefetch(v, keys[i + prefetch_distance]); }
      found[i] = ops_t<lru>::contains(scalar_tile{}, v, keys[i]);
    }
  });
}

template <class Policy>
void cpu_launcher::insert_or_assign(table_state const& s, key_type const* keys,
                                    value_type const* values, std::size_t n,
                                    key_type* evicted_keys, value_type* evicted_values,
                                    std::size_t* num_evicted, std::size_t*, stream_type) {
  check_keys_host({keys, n}, "insert_or_assign");
  *num_evicted = 0;
  if (n == 0) { return; }
  tick_type const base = reserve_ticks(s.clock, n);
  auto const v = s.view;
  for_each_chunk(n, s.cpu_threads, [&](std::size_t b, std::size_t e) {
    auto buf = std::make_unique<eviction_buffer>();
    for (std::size_t i = b; i < e; ++i) {
      if (i + prefetch_distance < e) {
        ops_t<Policy>::prefetch_for_update(v, keys[i + prefetch_distance]);
      }
      key_type ek;
      value_type ev;
      if (ops_t<Policy>::insert_or_assign(scalar_tile{}, v, keys[i], values[i], base + i, ek, ev) ==
          op_status::inserted_evicted) {
        buf->push(ek, ev);
      }
    }
    buf->flush(evicted_keys, evicted_values, num_evicted);
  });
}

void cpu_launcher::erase(table_state const& s, key_type const* keys, std::size_t n,
                         std::size_t* num_erased, std::size_t*, stream_type) {
  check_keys_host({keys, n}, "erase");
  if (num_erased != nullptr) { *num_erased = 0; }
  if (n == 0) { return; }
  auto const v = s.view;
  for_each_chunk(n, s.cpu_threads, [&](std::size_t b, std::size_t e) {
    std::size_t local = 0;
    for (std::size_t i = b; i < e; ++i) {
      if (i + prefetch_distance < e) {
        ops_t<lru>::prefetch_for_update(v, keys[i + prefetch_distance]);
      }
      local += ops_t<lru>::erase(scalar_tile{}, v, keys[i]);
    }
    if (num_erased != nullptr) { std::atomic_ref<std::size_t>(*num_erased).fetch_add(local); }
  });
}

template <class Policy>
void cpu_launcher::execute(table_state const& s, op_code const* ops, key_type const* keys,
                           value_type const* values, value_type* values_out, op_status* status,
                           std::size_t n, key_type* evicted_keys, value_type* evicted_values,
                           std::size_t* num_evicted, std::size_t*, stream_type) {
  check_ops_host({ops, n}, "execute");
  check_keys_host({keys, n}, "execute");
  *num_evicted = 0;
  if (n == 0) { return; }
  tick_type const base = reserve_ticks(s.clock, n);
  auto const v = s.view;
  for_each_chunk(n, s.cpu_threads, [&](std::size_t b, std::size_t e) {
    auto buf = std::make_unique<eviction_buffer>();
    for (std::size_t i = b; i < e; ++i) {
      if (std::size_t const p = i + prefetch_distance; p < e) {
        if (ops[p] == op_code::find) {
          ops_t<Policy>::prefetch(v, keys[p]);
        } else {
          ops_t<Policy>::prefetch_for_update(v, keys[p]);
        }
      }
      switch (ops[i]) {
        case op_code::find: {
          value_type val;
          bool const hit = ops_t<Policy>::find(scalar_tile{}, v, keys[i], base + i, val);
          if (hit) { values_out[i] = val; }
          status[i] = hit ? op_status::hit : op_status::miss;
          break;
        }
        case op_code::insert_or_assign: {
          key_type ek;
          value_type ev;
          op_status const st =
              ops_t<Policy>::insert_or_assign(scalar_tile{}, v, keys[i], values[i], base + i, ek, ev);
          if (st == op_status::inserted_evicted) { buf->push(ek, ev); }
          status[i] = st;
          break;
        }
        case op_code::erase:
          status[i] = ops_t<Policy>::erase(scalar_tile{}, v, keys[i]) ? op_status::hit
                                                                      : op_status::miss;
          break;
      }
    }
    buf->flush(evicted_keys, evicted_values, num_evicted);
  });
}

std::size_t cpu_launcher::export_entries(table_state const& s, key_type* keys_out,
                                         value_type* values_out, std::size_t capacity,
                                         stream_type) {
  std::size_t count = 0;
  for (std::uint32_t b = 0; b < s.view.num_buckets; ++b) {
    auto const& bk = s.view.buckets[b];
    key_type k[B];
    value_type val[B];
    unsigned spins = 0;
    while (true) {  // optimistic copy of the bucket, validated like a find
      std::uint32_t const v1 = load_acquire(s.view.versions[b]);
      if ((v1 & 1u) == 0) {
        for (int i = 0; i < B; ++i) {
          k[i] = load_relaxed(bk.keys[i]);
          val[i] = load_relaxed(bk.values[i]);
        }
        fence_acquire();
        if (load_relaxed(s.view.versions[b]) == v1) { break; }
      }
      spin_wait(spins);
    }
    for (int i = 0; i < B; ++i) {
      if (k[i] == empty_key) { continue; }
      if (count < capacity) {
        keys_out[count] = k[i];
        values_out[count] = val[i];
      }
      ++count;
    }
  }
  return count;
}

void cpu_launcher::check_async_error(table_state const&, stream_type) {}

std::size_t* cpu_launcher::acquire_words(stream_type) {
  return new std::size_t[2]{0, no_reject};
}

void cpu_launcher::release_words(std::size_t* words, std::size_t host[2], stream_type) {
  host[0] = words[0];
  host[1] = words[1];
  delete[] words;
}

#define CCHT_INSTANTIATE_CPU(P)                                                                   \
  template void cpu_launcher::find<P>(table_state const&, key_type const*, value_type*, bool*,    \
                                      std::size_t, std::size_t*, stream_type);                    \
  template void cpu_launcher::insert_or_assign<P>(table_state const&, key_type const*,            \
                                                  value_type const*, std::size_t, key_type*,      \
                                                  value_type*, std::size_t*, std::size_t*,        \
                                                  stream_type);                                   \
  template void cpu_launcher::execute<P>(table_state const&, op_code const*, key_type const*,     \
                                         value_type const*, value_type*, op_status*, std::size_t, \
                                         key_type*, value_type*, std::size_t*, std::size_t*,      \
                                         stream_type);
CCHT_INSTANTIATE_CPU(lru)
CCHT_INSTANTIATE_CPU(fifo)
CCHT_INSTANTIATE_CPU(lfu)
#undef CCHT_INSTANTIATE_CPU

}  // namespace ccht::detail
