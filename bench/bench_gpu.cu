// ccht_bench_gpu: throughput of the CUDA backend's bulk operations, through the public `_async`
// API (validation kernel included), against the memory-bandwidth bound.
//
// Workloads (table of 2^log2_slots slots, default 2^26 = 1.6 GB of buckets):
//   find, all hits       keys resident in a table at load factor 0.9
//   find, half misses    every other key absent
//   insert into full     fresh keys into a 100% full table: every insert evicts
//   mixed 50/50          execute(): finds of resident keys interleaved with evicting inserts
//   page cache           acquire + release and lookup + release of resident pages (--policy
//                        page-cache, or all): see run_page_cache()
// Each is timed with CUDA events (median of --reps runs after one warm-up) and checked (hit
// counts, eviction counts); a failed check exits with 1. Without a GPU it prints a line and exits 0.
//
// Bytes per operation follow the layout comment in include/ccht/core/bucket.hpp (32-byte sectors):
//   find hit   192 B read (version 32 + keys 128 + value 32) + 32 B score write if the policy
//              promotes + 8 B key in + 8 B value out + 1 B flag out
//   find miss  2 x (32 + 128) = 320 B read + 8 B key in + 1 B flag out
//   evicting insert  2 x 288 B read (version, keys, scores of both buckets) + 32 B victim value
//              + 3 x 32 B written (key, value, score) + 16 B pair in + 16 B victim out
// The bound is the GPU's peak memory bandwidth, read at run time (2 x memory clock x bus width:
// about 3.35 TB/s on an H100 SXM, 4.9 TB/s on an H200; --bandwidth-gbs to override); a
// device-to-device copy is also timed and printed as the achievable ceiling.
#include <ccht/ccht.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

using ccht::key_type;
using ccht::op_code;
using ccht::op_status;
using ccht::value_type;

void check(cudaError_t e, char const* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "ccht_bench_gpu: %s failed: %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

// ---- device helpers ------------------------------------------------------------------------------

/// Bijective 64-bit mixer (splitmix64 finaliser): distinct inputs give distinct keys.
__host__ __device__ constexpr std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/// Key i of stream @p salt; streams never overlap for i < 2^40.
__host__ __device__ constexpr key_type make_key(std::uint64_t i, std::uint64_t salt) {
  key_type k = mix(i + (salt << 40));
  if (k >= ccht::claimed_key) { k ^= 0x8000000000000000ull; }  // never a reserved key
  return k;
}

__host__ __device__ constexpr value_type value_of(key_type k) { return k ^ 0x5bd1e9955bd1e995ull; }

__global__ void gen_keys(key_type* keys, value_type* values, std::size_t n, std::uint64_t salt) {
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    key_type const k = make_key(i, salt);
    keys[i] = k;
    if (values != nullptr) { values[i] = value_of(k); }
  }
}

/// Compacts keys[i] with found[i] into out (order within a warp kept; keys are random anyway).
__global__ void compact_found(key_type const* keys, bool const* found, std::size_t n,
                              key_type* out, unsigned long long* count) {
  for (std::size_t base = std::size_t{blockIdx.x} * blockDim.x; base < n;
       base += std::size_t{gridDim.x} * blockDim.x) {
    std::size_t const i = base + threadIdx.x;
    bool const take = i < n && found[i];
    unsigned const mask = __ballot_sync(0xffffffffu, take);
    unsigned long long at = 0;
    int const lane = static_cast<int>(threadIdx.x % 32);
    if (lane == 0 && mask != 0) { at = atomicAdd(count, static_cast<unsigned long long>(__popc(mask))); }
    at = __shfl_sync(0xffffffffu, at, 0);
    if (take) { out[at + __popc(mask & ((1u << lane) - 1u))] = keys[i]; }
  }
}

/// Counts found flags, and found values that differ from value_of(key).
__global__ void count_hits(key_type const* keys, bool const* found, value_type const* values,
                           std::size_t n, unsigned long long* hits, unsigned long long* wrong) {
  unsigned long long h = 0, w = 0;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    if (found[i]) {
      ++h;
      w += values[i] != value_of(keys[i]);
    }
  }
  if (h != 0) { atomicAdd(hits, h); }
  if (w != 0) { atomicAdd(wrong, w); }
}

/// Interleaves: out[2j] = a[j], out[2j+1] = b[j].
__global__ void interleave(key_type const* a, key_type const* b, std::size_t half, key_type* out) {
  for (std::size_t j = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; j < half;
       j += std::size_t{gridDim.x} * blockDim.x) {
    out[2 * j] = a[j];
    out[2 * j + 1] = b[j];
  }
}

/// Mixed batch: even elements find a resident key, odd elements upsert a fresh one.
__global__ void make_mixed(key_type const* resident, key_type const* fresh, std::size_t half,
                           op_code* ops, key_type* keys, value_type* values) {
  for (std::size_t j = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; j < half;
       j += std::size_t{gridDim.x} * blockDim.x) {
    ops[2 * j] = op_code::find;
    keys[2 * j] = resident[j];
    values[2 * j] = 0;
    ops[2 * j + 1] = op_code::insert_or_assign;
    keys[2 * j + 1] = fresh[j];
    values[2 * j + 1] = value_of(fresh[j]);
  }
}

__global__ void count_status(op_status const* status, std::size_t n, unsigned long long* counts) {
  unsigned long long c[5] = {0, 0, 0, 0, 0};
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    auto const s = static_cast<unsigned>(status[i]);
    if (s < 5) { ++c[s]; }
  }
  for (int s = 0; s < 5; ++s) {
    if (c[s] != 0) { atomicAdd(&counts[s], c[s]); }
  }
}

constexpr unsigned grid = 1024;
constexpr unsigned block = 256;

// ---- host helpers --------------------------------------------------------------------------------

template <class T>
struct dev {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dev(std::size_t count) : n(count) {
    p = static_cast<T*>(ccht::cuda_backend::allocate((count > 0 ? count : 1) * sizeof(T)));
  }
  ~dev() { ccht::cuda_backend::deallocate(p); }
  dev(dev const&) = delete;
  dev& operator=(dev const&) = delete;
  std::span<T> span(std::size_t count) const { return {p, count}; }
  std::span<T const> cspan(std::size_t count) const { return {p, count}; }
};

unsigned long long read_u64(unsigned long long const* d) {
  unsigned long long h = 0;
  check(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return h;
}

/// Median time in ms of @p reps runs of @p launch (after one warm-up run).
template <class Setup, class Launch>
double median_ms(int reps, cudaStream_t stream, Setup&& setup, Launch&& launch) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> ms;
  for (int r = -1; r < reps; ++r) {
    setup(r);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    launch(r);
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    if (r >= 0) { ms.push_back(t); }
  }
  check(cudaEventDestroy(start), "cudaEventDestroy");
  check(cudaEventDestroy(stop), "cudaEventDestroy");
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct options {
  int log2_slots = 26;
  int reps = 10;
  double bandwidth_gbs = 0;  ///< 0: the GPU's own peak (peak_bandwidth_gbs)
  std::string policy = "lru";
};

struct row {
  std::string name;
  std::size_t n;
  double ms;
  double bytes_per_op;
  std::string note;
};

bool g_failed = false;

void expect(bool ok, std::string const& what) {
  if (!ok) {
    std::printf("CHECK FAILED: %s\n", what.c_str());
    g_failed = true;
  }
}

template <class Policy>
void run(options const& o) {
  using table_t = ccht::table<ccht::cuda_backend, Policy>;
  std::size_t const slots = std::size_t{1} << o.log2_slots;
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  table_t t(slots);
  std::size_t const n_fill = slots / 10 * 9;  // load factor 0.9
  std::size_t const n_batch = slots / 4;      // evicting-insert and mixed batches

  dev<key_type> keys(n_fill), evk(n_fill), q(n_fill), fresh(n_fill);
  dev<value_type> vals(n_fill), evv(n_fill), vout(n_fill);
  dev<bool> found(n_fill);
  dev<op_code> ops(n_batch);
  dev<op_status> status(n_batch);
  dev<std::size_t> count(1);
  dev<unsigned long long> ctr(8);
  std::vector<row> rows;

  auto zero_ctr = [&] { check(cudaMemsetAsync(ctr.p, 0, 8 * sizeof(unsigned long long), stream), "memset"); };

  // Device-to-device copy: the achievable bandwidth (bytes read + written).
  {
    std::size_t const bytes = n_fill * sizeof(key_type);
    double const ms = median_ms(
        o.reps, stream, [](int) {},
        [&](int) { check(cudaMemcpyAsync(q.p, keys.p, bytes, cudaMemcpyDeviceToDevice, stream), "copy"); });
    std::printf("device-to-device copy: %.0f GB/s (read + write), bound used: %.0f GB/s\n",
                2.0 * bytes / ms / 1e6, o.bandwidth_gbs);
  }

  // ---- fill to load 0.9 -----------------------------------------------------------------------
  gen_keys<<<grid, block, 0, stream>>>(keys.p, vals.p, n_fill, 1);
  check(cudaGetLastError(), "gen_keys");
  double const fill_ms = median_ms(
      1, stream, [&](int) { t.clear(stream); },
      [&](int) {
        t.insert_or_assign_async(keys.cspan(n_fill), vals.cspan(n_fill), evk.span(n_fill),
                                 evv.span(n_fill), count.p, stream);
      });
  std::size_t evicted_fill = 0;
  ccht::cuda_backend::copy_to_host(&evicted_fill, count.p, sizeof(std::size_t), stream);
  std::size_t const size_fill = t.size(stream);
  expect(size_fill + evicted_fill == n_fill, "size + evictions == inserted keys after the fill");
  rows.push_back({"insert, empty to load 0.9", n_fill, fill_ms, 0,
                  std::to_string(evicted_fill) + " evicted"});

  // Resident keys in random order: the fill keys that a find hits.
  t.find_async(keys.cspan(n_fill), vout.span(n_fill), found.span(n_fill), stream);
  zero_ctr();
  compact_found<<<grid, block, 0, stream>>>(keys.p, found.p, n_fill, q.p, ctr.p);
  check(cudaGetLastError(), "compact_found");
  check(cudaStreamSynchronize(stream), "sync");
  std::size_t const n_hit = read_u64(ctr.p);
  expect(n_hit == size_fill, "every resident fill key is found");

  bool const promotes = Policy::promotes_on_hit;
  double const hit_bytes = 192 + (promotes ? 32 : 0) + 8 + 8 + 1;
  double const miss_bytes = 320 + 8 + 1;

  // ---- find, all hits -------------------------------------------------------------------------
  {
    double const ms = median_ms(o.reps, stream, [](int) {}, [&](int) {
      t.find_async(q.cspan(n_hit), vout.span(n_hit), found.span(n_hit), stream);
    });
    zero_ctr();
    count_hits<<<grid, block, 0, stream>>>(q.p, found.p, vout.p, n_hit, ctr.p, ctr.p + 1);
    check(cudaStreamSynchronize(stream), "sync");
    std::size_t const hits = read_u64(ctr.p), wrong = read_u64(ctr.p + 1);
    expect(hits == n_hit && wrong == 0, "find (all hits): every key found with its value");
    rows.push_back({"find, all hits (load 0.9)", n_hit, ms, hit_bytes,
                    std::to_string(hits) + " hits"});
  }

  // ---- find, half misses ----------------------------------------------------------------------
  {
    std::size_t const half = n_hit / 2;
    gen_keys<<<grid, block, 0, stream>>>(fresh.p, nullptr, half, 2);
    interleave<<<grid, block, 0, stream>>>(q.p, fresh.p, half, keys.p);  // keys.p reused
    check(cudaGetLastError(), "interleave");
    double const ms = median_ms(o.reps, stream, [](int) {}, [&](int) {
      t.find_async(keys.cspan(2 * half), vout.span(2 * half), found.span(2 * half), stream);
    });
    zero_ctr();
    count_hits<<<grid, block, 0, stream>>>(keys.p, found.p, vout.p, 2 * half, ctr.p, ctr.p + 1);
    check(cudaStreamSynchronize(stream), "sync");
    std::size_t const hits = read_u64(ctr.p), wrong = read_u64(ctr.p + 1);
    expect(hits == half && wrong == 0, "find (half misses): exactly the resident half found");
    rows.push_back({"find, half misses (load 0.9)", 2 * half, ms, (hit_bytes + miss_bytes) / 2,
                    std::to_string(hits) + " hits"});
  }

  // ---- fill to 100%, then evicting inserts ----------------------------------------------------
  for (std::uint64_t round = 0; round < 16 && t.size(stream) < t.num_slots(); ++round) {
    gen_keys<<<grid, block, 0, stream>>>(fresh.p, vals.p, n_batch, 100 + round);
    t.insert_or_assign(fresh.cspan(n_batch), vals.cspan(n_batch), evk.span(n_batch),
                       evv.span(n_batch), stream);
  }
  expect(t.size(stream) == t.num_slots(), "table is full before the evicting inserts");
  double const evict_bytes = 2 * 288 + 32 + 3 * 32 + 16 + 16;
  {
    std::size_t evicted_last = 0;
    double const ms = median_ms(
        o.reps, stream,
        [&](int r) {
          gen_keys<<<grid, block, 0, stream>>>(fresh.p, vals.p, n_batch,
                                               static_cast<std::uint64_t>(200 + r + 1));
        },
        [&](int) {
          t.insert_or_assign_async(fresh.cspan(n_batch), vals.cspan(n_batch), evk.span(n_batch),
                                   evv.span(n_batch), count.p, stream);
        });
    ccht::cuda_backend::copy_to_host(&evicted_last, count.p, sizeof(std::size_t), stream);
    expect(evicted_last == n_batch, "every insert into the full table evicts");
    rows.push_back({"insert_or_assign, full table", n_batch, ms, evict_bytes,
                    std::to_string(evicted_last) + " evicted"});
  }

  // ---- mixed 50/50: finds of the last batch's keys, evicting inserts of fresh keys --------------
  {
    std::size_t const half = n_batch / 2;
    // fresh.p holds the last inserted batch: those keys are resident (newest ticks).
    check(cudaMemcpyAsync(q.p, fresh.p, half * sizeof(key_type), cudaMemcpyDeviceToDevice, stream),
          "copy");
    std::size_t hits = 0, evicted = 0;
    double const ms = median_ms(
        o.reps, stream,
        [&](int r) {
          gen_keys<<<grid, block, 0, stream>>>(fresh.p, nullptr, half,
                                               static_cast<std::uint64_t>(300 + r + 1));
          make_mixed<<<grid, block, 0, stream>>>(q.p, fresh.p, half, ops.p, keys.p, vals.p);
        },
        [&](int) {
          t.execute_async(ops.cspan(2 * half), keys.cspan(2 * half), vals.cspan(2 * half),
                          vout.span(2 * half), status.span(2 * half), evk.span(2 * half),
                          evv.span(2 * half), count.p, stream);
        });
    zero_ctr();
    count_status<<<grid, block, 0, stream>>>(status.p, 2 * half, ctr.p);
    check(cudaStreamSynchronize(stream), "sync");
    hits = read_u64(ctr.p + static_cast<int>(op_status::hit));
    evicted = read_u64(ctr.p + static_cast<int>(op_status::inserted_evicted));
    expect(evicted == half, "every insert of the mixed batch evicts");
    rows.push_back({"execute, 50% find / 50% insert (full)", 2 * half, ms,
                    (hit_bytes + evict_bytes) / 2 + 2,
                    std::to_string(hits) + " find hits, " + std::to_string(evicted) + " evicted"});
  }

  cudaDeviceProp prop{};
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  std::printf("\n### ccht_bench_gpu: %s, policy %s, %zu slots (2^%d), %d reps (median)\n\n",
              prop.name, Policy::name, t.num_slots(), o.log2_slots, o.reps);
  std::printf("| workload | ops | median ms | Mops/s | B/op (model) | GB/s (model) | of %.1f TB/s | check |\n",
              o.bandwidth_gbs / 1000);
  std::printf("|---|---:|---:|---:|---:|---:|---:|---|\n");
  for (row const& r : rows) {
    double const mops = r.n / r.ms / 1e3;
    if (r.bytes_per_op > 0) {
      double const gbs = mops * r.bytes_per_op / 1e3;
      std::printf("| %s | %zu | %.3f | %.0f | %.0f | %.0f | %.1f%% | %s |\n", r.name.c_str(), r.n,
                  r.ms, mops, r.bytes_per_op, gbs, 100 * gbs / o.bandwidth_gbs, r.note.c_str());
    } else {
      std::printf("| %s | %zu | %.3f | %.0f | - | - | - | %s |\n", r.name.c_str(), r.n, r.ms, mops,
                  r.note.c_str());
    }
  }
  std::printf("\n");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

/// Counts page statuses (acquire / lookup outputs).
__global__ void count_page_status(ccht::page_status const* status, std::size_t n,
                                  unsigned long long* counts) {
  unsigned long long c[6] = {0, 0, 0, 0, 0, 0};
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    auto const s = static_cast<unsigned>(status[i]);
    if (s < 6) { ++c[s]; }
  }
  for (int s = 0; s < 6; ++s) {
    if (c[s] != 0) { atomicAdd(&counts[s], c[s]); }
  }
}

/**
 * The page cache: acquire + release of resident pages (all hits), and lookup + release, at
 * 2^20-key batches over 2^(log2_slots - 4) pages of 64 bytes. Bytes per acquire+release (model):
 * two locked single-bucket operations, each a version read (32) + keys (128) + lock CAS and
 * unlock (32) + score atomic (32) + value (32), plus 8 B key in twice, 4 B page + 1 B status out.
 */
void run_page_cache(options const& o) {
  using cache_t = ccht::page_cache<ccht::cuda_backend, ccht::double_lru>;
  std::size_t const pages = std::size_t{1} << (o.log2_slots - 4);
  std::size_t const batch = std::min<std::size_t>(pages, std::size_t{1} << 20);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cache_t pc(pages * 64, 64);
  dev<key_type> keys(pages), evk(pages);
  dev<ccht::page_id> pid(pages), evp(pages);
  dev<ccht::page_status> st(pages);
  dev<std::size_t> count(1);
  dev<unsigned long long> ctr(8);
  // Fill every page: acquire (fills), publish, release.
  gen_keys<<<grid, block, 0, stream>>>(keys.p, nullptr, pages, 77);
  pc.acquire_async(keys.cspan(pages), pid.span(pages), st.span(pages), evk.span(pages),
                   evp.span(pages), count.p, stream);
  pc.publish_async(keys.cspan(pages), {}, stream);
  pc.release_async(keys.cspan(pages), {}, stream);
  check(cudaStreamSynchronize(stream), "sync");
  std::vector<row> rows;
  double const pair_bytes = 2 * (32 + 128 + 32 + 32 + 32) + 16 + 5;
  for (bool use_lookup : {false, true}) {
    double const ms = median_ms(
        o.reps, stream, [&](int) {},
        [&](int) {
          if (use_lookup) {
            pc.lookup_async(keys.cspan(batch), pid.span(batch), st.span(batch), stream);
          } else {
            pc.acquire_async(keys.cspan(batch), pid.span(batch), st.span(batch),
                             evk.span(batch), evp.span(batch), count.p, stream);
          }
          pc.release_async(keys.cspan(batch), {}, stream);
        });
    check(cudaMemsetAsync(ctr.p, 0, 8 * sizeof(unsigned long long), stream), "memset");
    count_page_status<<<grid, block, 0, stream>>>(st.p, batch, ctr.p);
    check(cudaStreamSynchronize(stream), "sync");
    std::size_t const hits = read_u64(ctr.p + static_cast<int>(ccht::page_status::hit));
    expect(hits == batch, std::string(use_lookup ? "lookup" : "acquire") +
                              ": every resident page hits (" + std::to_string(hits) + " of " +
                              std::to_string(batch) + ")");
    rows.push_back({use_lookup ? "page lookup + release (resident)" : "page acquire + release (resident)",
                    batch, ms, pair_bytes, std::to_string(hits) + " hits"});
  }
  auto const s = pc.stats(stream);
  expect(s.pages_pinned == 0, "no page left pinned");
  expect(s.pages_resident == pages, "every page resident");
  cudaDeviceProp prop{};
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  std::printf("\n### ccht_bench_gpu: %s, page cache (double LRU, ratio 0.9), %zu pages of 64 B, "
              "batch %zu, %d reps (median)\n\n", prop.name, pages, batch, o.reps);
  std::printf("| workload | pages | median ms | Mpages/s | B/page (model) | GB/s (model) | of %.1f TB/s | check |\n",
              o.bandwidth_gbs / 1000);
  std::printf("|---|---:|---:|---:|---:|---:|---:|---|\n");
  for (row const& r : rows) {
    double const mops = r.n / r.ms / 1e3;
    double const gbs = mops * r.bytes_per_op / 1e3;
    std::printf("| %s | %zu | %.3f | %.0f | %.0f | %.0f | %.1f%% | %s |\n", r.name.c_str(), r.n,
                r.ms, mops, r.bytes_per_op, gbs, 100 * gbs / o.bandwidth_gbs, r.note.c_str());
  }
  std::printf("\n");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

/**
 * Peak memory bandwidth of the current GPU in GB/s: double data rate x the memory clock
 * (cudaDevAttrMemoryClockRate, kHz; cudaDeviceProp lost its field in CUDA 13) x the bus width in
 * bytes. It prints where the figure came from, since the table's percentages depend on it.
 */
double peak_bandwidth_gbs() {
  int device = 0, khz = 0, bits = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device),
        "cudaDeviceGetAttribute");
  double const gbs = 2.0 * khz * 1e3 * (bits / 8.0) / 1e9;
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  std::printf("bandwidth bound: %.0f GB/s, the peak of the %s (memory clock %d MHz x %d-bit bus, "
              "double data rate)\n",
              gbs, p.name, khz / 1000, bits);
  return gbs;
}

void usage() {
  std::printf(
      "usage: ccht_bench_gpu [--log2-slots N (26)] [--reps N (10)]\n"
      "                      [--policy lru|fifo|lfu|page-cache|all]\n"
      "                      [--bandwidth-gbs X (default: the GPU's peak, read at run time)]\n");
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    auto next = [&]() -> char const* {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--log2-slots") {
      o.log2_slots = std::atoi(next());
    } else if (a == "--reps") {
      o.reps = std::max(1, std::atoi(next()));
    } else if (a == "--policy") {
      o.policy = next();
    } else if (a == "--bandwidth-gbs") {
      o.bandwidth_gbs = std::atof(next());
    } else {
      usage();
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (o.log2_slots < 8 || o.log2_slots > 34) {
    std::fprintf(stderr, "--log2-slots must be in [8, 34]\n");
    return 2;
  }
  // Checked before the GPU is looked for, so a typo is an error on any machine, never a run that
  // measures nothing.
  constexpr std::string_view runs[] = {"lru", "fifo", "lfu", "page-cache", "all"};
  if (std::find(std::begin(runs), std::end(runs), o.policy) == std::end(runs)) {
    std::fprintf(stderr,
                 "ccht_bench_gpu: --policy must be one of lru, fifo, lfu, page-cache, all; got '%s'\n",
                 o.policy.c_str());
    return 2;
  }
  if (!ccht::cuda_backend::available()) {
    std::printf("ccht_bench_gpu: no usable CUDA GPU on this machine; nothing measured\n");
    return 0;
  }
  if (o.bandwidth_gbs <= 0) {
    o.bandwidth_gbs = peak_bandwidth_gbs();
    if (o.bandwidth_gbs <= 0) {
      std::fprintf(stderr, "ccht_bench_gpu: the GPU reports no memory clock or bus width; "
                           "give the bound with --bandwidth-gbs\n");
      return 2;
    }
  }
  try {
    if (o.policy == "lru" || o.policy == "all") { run<ccht::lru>(o); }
    if (o.policy == "fifo" || o.policy == "all") { run<ccht::fifo>(o); }
    if (o.policy == "lfu" || o.policy == "all") { run<ccht::lfu>(o); }
    if (o.policy == "page-cache" || o.policy == "all") { run_page_cache(o); }
  } catch (ccht::error const& e) {
    std::fprintf(stderr, "ccht_bench_gpu: %s\n", e.what());
    return 2;
  }
  return g_failed ? 1 : 0;
}
