// Device-side refs: user kernels call table.ref() per key through a
// cooperative_groups::thread_block_tile<16> (and the one-thread ccht::scalar_tile), checked
// against a std::unordered_map. Every test skips, with a message, where no GPU is present.
#include <ccht/ccht.hpp>

#include <cooperative_groups.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

namespace cg = cooperative_groups;
using ccht::key_type;
using ccht::op_status;
using ccht::value_type;
using cuda_table = ccht::table<ccht::cuda_backend, ccht::lru>;
using ref_type = cuda_table::ref_type;

constexpr int tile_size = 16;
constexpr int block_threads = 128;

/// RAII device array (std::vector in and out).
template <class T>
class device_array {
 public:
  explicit device_array(std::size_t n) : n_(n) {
    p_ = static_cast<T*>(ccht::cuda_backend::allocate((n > 0 ? n : 1) * sizeof(T)));
  }
  explicit device_array(std::vector<T> const& h) : device_array(h.size()) {
    ccht::cuda_backend::copy_from_host(p_, h.data(), h.size() * sizeof(T));
  }
  ~device_array() { ccht::cuda_backend::deallocate(p_); }
  device_array(device_array const&) = delete;
  device_array& operator=(device_array const&) = delete;
  std::vector<T> to_host() const {
    std::unique_ptr<T[]> tmp(new T[n_ > 0 ? n_ : 1]);  // also for T = bool
    ccht::cuda_backend::copy_to_host(tmp.get(), p_, n_ * sizeof(T));
    return std::vector<T>(tmp.get(), tmp.get() + n_);
  }
  T* get() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

unsigned blocks_for_tiles(std::size_t tiles) {
  return static_cast<unsigned>((tiles * tile_size + block_threads - 1) / block_threads);
}

// ---- user kernels ------------------------------------------------------------------------------

/// One tile per key: upsert through the ref (tick from the table clock), record what happened.
__global__ void upsert_kernel(ref_type ref, key_type const* keys, value_type const* values,
                              std::size_t n, op_status* status, key_type* evicted_keys,
                              value_type* evicted_values) {
  auto const tile = cg::tiled_partition<tile_size>(cg::this_thread_block());
  std::size_t const i = (std::size_t{blockIdx.x} * blockDim.x + threadIdx.x) / tile_size;
  if (i >= n) { return; }  // the same i for the whole tile
  key_type ek = 0;
  value_type ev = 0;
  op_status const st = ref.insert_or_assign(tile, keys[i], values[i], ek, ev);
  if (tile.thread_rank() == 0) {
    status[i] = st;
    evicted_keys[i] = st == op_status::inserted_evicted ? ek : ccht::empty_key;
    evicted_values[i] = st == op_status::inserted_evicted ? ev : 0;
  }
}

/// One tile per key: find through the ref.
__global__ void find_kernel(ref_type ref, key_type const* keys, std::size_t n, bool* found,
                            value_type* values) {
  auto const tile = cg::tiled_partition<tile_size>(cg::this_thread_block());
  std::size_t const i = (std::size_t{blockIdx.x} * blockDim.x + threadIdx.x) / tile_size;
  if (i >= n) { return; }
  value_type v = 0;
  bool const hit = ref.find(tile, keys[i], v);
  if (tile.thread_rank() == 0) {
    found[i] = hit;
    values[i] = hit ? v : 0;
  }
}

/// One thread per key: the scalar path of the core, on the device.
__global__ void find_scalar_kernel(ref_type ref, key_type const* keys, std::size_t n, bool* found,
                                   value_type* values) {
  std::size_t const i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) { return; }
  value_type v = 0;
  bool const hit = ref.find(ccht::scalar_tile{}, keys[i], v, ref.next_ticks(ccht::scalar_tile{}));
  found[i] = hit;
  values[i] = hit ? v : 0;
}

/// Value written for @p key in round @p round: a reader can tell which key and round it is from.
__host__ __device__ constexpr value_type tagged(key_type key, std::uint32_t round) {
  return ((key * 0x9e3779b97f4a7c15ull) & ~0xffffffffull) | round;
}

/**
 * Even tiles upsert keys[i / 2 % m] with tagged(key, round), odd tiles find that key, all in one
 * launch: readers race with writers on the same buckets.
 */
__global__ void mixed_kernel(ref_type ref, key_type const* keys, std::size_t m, std::size_t n,
                             bool* found, value_type* values) {
  auto const tile = cg::tiled_partition<tile_size>(cg::this_thread_block());
  std::size_t const i = (std::size_t{blockIdx.x} * blockDim.x + threadIdx.x) / tile_size;
  if (i >= n) { return; }
  key_type const key = keys[(i / 2) % m];
  auto const round = static_cast<std::uint32_t>(i / 2 / m) + 1;
  if (i % 2 == 0) {
    key_type ek;
    value_type ev;
    (void)ref.insert_or_assign(tile, key, tagged(key, round), ek, ev);
  } else {
    value_type v = 0;
    bool const hit = ref.find(tile, key, v);
    if (tile.thread_rank() == 0) {
      found[i] = hit;
      values[i] = v;
    }
  }
}

// ---- helpers -----------------------------------------------------------------------------------

class DeviceRef : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ccht::cuda_backend::available()) {
      GTEST_SKIP() << "no usable CUDA GPU on this machine: device-ref tests skipped";
    }
  }
};

std::vector<key_type> distinct_keys(std::size_t n, std::uint64_t seed,
                                    std::unordered_set<key_type> const& avoid = {}) {
  std::mt19937_64 rng(seed);
  std::unordered_set<key_type> seen;
  std::vector<key_type> keys;
  keys.reserve(n);
  while (keys.size() < n) {
    key_type const k = rng();
    if (ccht::is_reserved_key(k) || avoid.count(k) || !seen.insert(k).second) { continue; }
    keys.push_back(k);
  }
  return keys;
}

struct upsert_outcome {
  std::vector<op_status> status;
  std::vector<key_type> evicted_keys;
  std::vector<value_type> evicted_values;
};

upsert_outcome upsert(cuda_table& t, std::vector<key_type> const& keys,
                      std::vector<value_type> const& values) {
  device_array<key_type> dk(keys), dek(keys.size());
  device_array<value_type> dv(values), dev(keys.size());
  device_array<op_status> ds(keys.size());
  upsert_kernel<<<blocks_for_tiles(keys.size()), block_threads>>>(
      t.ref(), dk.get(), dv.get(), keys.size(), ds.get(), dek.get(), dev.get());
  ccht::detail::check_cuda(cudaGetLastError(), "upsert_kernel launch");
  ccht::cuda_backend::synchronize();
  return {ds.to_host(), dek.to_host(), dev.to_host()};
}

/// Applies one launch of distinct-key upserts to the model and checks the statuses.
void apply_upserts(std::unordered_map<key_type, value_type>& model,
                   std::vector<key_type> const& keys, std::vector<value_type> const& values,
                   upsert_outcome const& out) {
  std::unordered_map<key_type, value_type> const before = model;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    bool const existed = before.count(keys[i]) != 0;
    switch (out.status[i]) {
      case op_status::assigned:
        // Present before the launch, or (re)inserted by a tile of this launch is impossible:
        // keys are distinct within a launch.
        EXPECT_TRUE(existed) << "assigned a key that was absent: " << keys[i];
        break;
      case op_status::inserted: EXPECT_FALSE(existed) << "inserted a present key"; break;
      case op_status::inserted_evicted: EXPECT_FALSE(existed) << "inserted a present key"; break;
      default: ADD_FAILURE() << "status " << int(out.status[i]) << " from insert_or_assign";
    }
    model[keys[i]] = values[i];
  }
  std::unordered_map<key_type, value_type> const written(model);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (out.status[i] != op_status::inserted_evicted) { continue; }
    key_type const victim = out.evicted_keys[i];
    auto it = written.find(victim);
    ASSERT_NE(it, written.end()) << "evicted a key that was never in the table: " << victim;
    // The victim holds its value before or after this launch's write to it (if any).
    auto const old = before.find(victim);
    bool const value_ok = out.evicted_values[i] == it->second ||
                          (old != before.end() && out.evicted_values[i] == old->second);
    EXPECT_TRUE(value_ok) << "evicted pair has another key's value: key " << victim;
    EXPECT_EQ(model.erase(victim), 1u) << "key evicted twice: " << victim;
  }
}

/// Finds @p keys through the ref and compares with the model.
void expect_finds_match(cuda_table& t, std::unordered_map<key_type, value_type> const& model,
                        std::vector<key_type> const& keys, bool scalar) {
  device_array<key_type> dk(keys);
  device_array<bool> df(keys.size());
  device_array<value_type> dv(keys.size());
  if (scalar) {
    find_scalar_kernel<<<static_cast<unsigned>((keys.size() + 127) / 128), 128>>>(
        t.ref(), dk.get(), keys.size(), df.get(), dv.get());
  } else {
    find_kernel<<<blocks_for_tiles(keys.size()), block_threads>>>(t.ref(), dk.get(), keys.size(),
                                                                  df.get(), dv.get());
  }
  ccht::detail::check_cuda(cudaGetLastError(), "find kernel launch");
  ccht::cuda_backend::synchronize();
  auto const found = df.to_host();
  auto const values = dv.to_host();
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto const it = model.find(keys[i]);
    bool const expected = it != model.end();
    if (found[i] != expected || (expected && values[i] != it->second)) {
      if (++mismatches <= 10) {
        ADD_FAILURE() << "key " << keys[i] << ": found " << found[i] << " value " << values[i]
                      << ", expected found " << expected
                      << (expected ? " value " + std::to_string(it->second) : std::string());
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << (scalar ? "scalar_tile" : "thread_block_tile<16>") << " finds";
}

// ---- tests -------------------------------------------------------------------------------------

TEST_F(DeviceRef, InsertThenFindMatchesUnorderedMap) {
  cuda_table t(std::size_t{1} << 16);
  std::unordered_map<key_type, value_type> model;
  auto const keys = distinct_keys(20000, 1);
  std::vector<value_type> values(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) { values[i] = tagged(keys[i], 1); }
  apply_upserts(model, keys, values, upsert(t, keys, values));
  EXPECT_EQ(t.size(), model.size());

  // Present keys, absent keys and keys evicted (if any), in one launch.
  auto probe = keys;
  auto const absent = distinct_keys(5000, 2, {keys.begin(), keys.end()});
  probe.insert(probe.end(), absent.begin(), absent.end());
  std::shuffle(probe.begin(), probe.end(), std::mt19937_64(3));
  expect_finds_match(t, model, probe, false);
  expect_finds_match(t, model, probe, true);
}

TEST_F(DeviceRef, UpdatesAssignAndReinsert) {
  cuda_table t(std::size_t{1} << 14);
  std::unordered_map<key_type, value_type> model;
  auto const keys = distinct_keys(8000, 4);
  for (std::uint32_t round = 1; round <= 3; ++round) {
    // Each round writes a different half-overlapping subset: assigns and fresh inserts mixed.
    std::vector<key_type> k(keys.begin() + (round - 1) * 2000, keys.begin() + (round - 1) * 2000 + 4000);
    std::vector<value_type> v(k.size());
    for (std::size_t i = 0; i < k.size(); ++i) { v[i] = tagged(k[i], round); }
    apply_upserts(model, k, v, upsert(t, k, v));
    expect_finds_match(t, model, keys, false);
  }
  EXPECT_EQ(t.size(), model.size());
}

TEST_F(DeviceRef, FullTableEvictsAndReportsEveryVictim) {
  // 4 buckets of 16 slots and 2000 concurrent distinct inserts: nearly all of them evict.
  cuda_table t(64);
  ASSERT_EQ(t.num_slots(), 64u);
  std::unordered_map<key_type, value_type> model;
  auto const keys = distinct_keys(2000, 5);
  std::vector<value_type> values(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) { values[i] = tagged(keys[i], 7); }
  auto const out = upsert(t, keys, values);
  std::size_t const inserted =
      static_cast<std::size_t>(std::count(out.status.begin(), out.status.end(), op_status::inserted));
  EXPECT_EQ(inserted, 64u) << "each free slot is taken exactly once";
  apply_upserts(model, keys, values, out);
  EXPECT_EQ(model.size(), 64u);
  EXPECT_EQ(t.size(), 64u);

  // The table holds exactly the keys never reported as evicted, with their values.
  device_array<key_type> dek(64);
  device_array<value_type> dev(64);
  EXPECT_EQ(t.export_entries({dek.get(), 64}, {dev.get(), 64}), 64u);
  auto const hk = dek.to_host();
  auto const hv = dev.to_host();
  for (std::size_t i = 0; i < 64; ++i) {
    auto const it = model.find(hk[i]);
    ASSERT_NE(it, model.end()) << "exported key was reported evicted or never inserted";
    EXPECT_EQ(hv[i], it->second);
  }
  expect_finds_match(t, model, keys, false);
}

TEST_F(DeviceRef, ConcurrentFindsSeeOnlyTheirKeysValues) {
  cuda_table t(std::size_t{1} << 12);  // 256 buckets: heavy contention on few lines
  auto const keys = distinct_keys(1500, 6);
  std::size_t const rounds = 8;
  std::size_t const n = keys.size() * 2 * rounds;
  device_array<key_type> dk(keys);
  device_array<bool> df(n);
  device_array<value_type> dv(n);
  mixed_kernel<<<blocks_for_tiles(n), block_threads>>>(t.ref(), dk.get(), keys.size(), n,
                                                       df.get(), dv.get());
  ccht::detail::check_cuda(cudaGetLastError(), "mixed_kernel launch");
  ccht::cuda_backend::synchronize();
  auto const found = df.to_host();
  auto const values = dv.to_host();
  std::size_t hits = 0, bad = 0;
  for (std::size_t i = 1; i < n; i += 2) {
    if (!found[i]) { continue; }
    ++hits;
    key_type const key = keys[(i / 2) % keys.size()];
    auto const round = static_cast<std::uint32_t>(values[i] & 0xffffffffu);
    if (values[i] != tagged(key, round) || round < 1 || round > rounds) {
      if (++bad <= 10) { ADD_FAILURE() << "find of " << key << " returned " << values[i]; }
    }
  }
  EXPECT_EQ(bad, 0u) << "torn values or another key's value among " << hits << " hits";
  EXPECT_LE(t.size(), keys.size());
}

}  // namespace

// ---- promotions and launch errors on the device (issue 12) ---------------------------------------

__global__ void misconfigured_kernel() {}

/// The score of @p key, read from a copy of the table's buckets (or nullopt when absent).
template <class Table>
std::optional<ccht::score_type> score_of(Table const& t, key_type key) {
  auto const view = t.ref().view();  // field copies only: fine on the host
  std::vector<ccht::bucket<ccht::default_bucket_size>> host(view.num_buckets);
  ccht::cuda_backend::copy_to_host(host.data(), view.buckets, host.size() * sizeof(host[0]));
  for (auto const& b : host) {
    for (int s = 0; s < b.size; ++s) {
      if (b.keys[s] == key) { return b.scores[s]; }
    }
  }
  return std::nullopt;
}

/// One batch of @p n finds of one key: thousands of tiles promote the same slot at once.
template <class Policy>
ccht::score_type hot_key_score(std::size_t n) {
  ccht::table<ccht::cuda_backend, Policy> t(4096);
  key_type const hot = 7;
  device_array<key_type> one(std::vector<key_type>{hot});
  device_array<value_type> one_value(std::vector<value_type>{tagged(hot, 1)});
  device_array<key_type> ek(1);
  device_array<value_type> ev(1);
  t.insert_or_assign({one.get(), 1}, {one_value.get(), 1}, {ek.get(), 1}, {ev.get(), 1});  // tick 1
  device_array<key_type> keys(std::vector<key_type>(n, hot));
  device_array<value_type> values(n);
  device_array<bool> found(n);
  t.find({keys.get(), n}, {values.get(), n}, {found.get(), n});  // ticks 2 .. n + 1
  auto const f = found.to_host();
  EXPECT_EQ(std::count(f.begin(), f.end(), true), static_cast<std::ptrdiff_t>(n));
  auto const s = score_of(t, hot);
  EXPECT_TRUE(s.has_value()) << "the hot key is gone";
  return s.value_or(0);
}

TEST_F(DeviceRef, HotKeyLfuCountsEveryConcurrentHit) {
  std::size_t const n = 60000;  // below LFU's 2^16-1 ceiling
  EXPECT_EQ(ccht::lfu::count(hot_key_score<ccht::lfu>(n)), 1 + n) << "concurrent hits were lost";
}

TEST_F(DeviceRef, HotKeyLruEndsAtTheLastTick) {
  std::size_t const n = 200000;
  EXPECT_EQ(hot_key_score<ccht::lru>(n), 1 + n) << "a slower promotion stored an older tick";
  EXPECT_EQ(hot_key_score<ccht::double_lru>(n), 1 + n);
}

TEST_F(DeviceRef, PendingErrorFromEarlierWorkIsReportedAsSuch) {
  cuda_table t(1024);
  device_array<key_type> keys(std::vector<key_type>{1, 2, 3});
  device_array<value_type> values(std::vector<value_type>{tagged(1, 1), tagged(2, 1), tagged(3, 1)});
  device_array<key_type> ek(3);
  device_array<value_type> ev(3);
  misconfigured_kernel<<<1, 4096>>>();  // more threads per block than any GPU allows
  ASSERT_NE(cudaPeekAtLastError(), cudaSuccess) << "the launch was expected to fail";
  try {
    t.insert_or_assign({keys.get(), 3}, {values.get(), 3}, {ek.get(), 3}, {ev.get(), 3});
    ADD_FAILURE() << "a pending error was not reported";
  } catch (ccht::error const& e) {
    EXPECT_NE(std::string(e.what()).find("pending from earlier work"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "the reported error is still pending";
  // The table was not touched and works.
  EXPECT_EQ(t.size(), 0u);
  t.insert_or_assign({keys.get(), 3}, {values.get(), 3}, {ek.get(), 3}, {ev.get(), 3});
  EXPECT_EQ(t.size(), 3u);
}

// ---- pins on the device (core/pin.hpp) -----------------------------------------------------------

__global__ void pin_kernel(ref_type ref, key_type key, std::size_t n, bool unpin, int* failures) {
  auto const tile = cg::tiled_partition<tile_size>(cg::this_thread_block());
  std::size_t const t = (std::size_t{blockIdx.x} * blockDim.x + threadIdx.x) / tile_size;
  if (t >= n) { return; }
  value_type v = 0;
  ccht::pin_status const st = unpin ? ref.unpin(tile, key) : ref.pin(tile, key, v);
  if (tile.thread_rank() == 0 && st != ccht::pin_status::done) { atomicAdd(failures, 1); }
}

TEST_F(DeviceRef, ConcurrentPinsCountAndProtect) {
  cuda_table t(std::size_t{1} << 10);
  key_type const hot = 11;
  upsert(t, {hot}, {tagged(hot, 1)});
  std::size_t const n = 1500;  // below max_pins
  device_array<int> failures(std::vector<int>{0});
  pin_kernel<<<blocks_for_tiles(n), block_threads>>>(t.ref(), hot, n, false, failures.get());
  ccht::detail::check_cuda(cudaGetLastError(), "pin_kernel launch");
  ccht::cuda_backend::synchronize();
  EXPECT_EQ(failures.to_host()[0], 0);
  auto s = score_of(t, hot);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(ccht::pins_of(*s), n) << "concurrent pins were lost";
  // A flood of distinct inserts, ten times the table, in one launch: the pinned key stays.
  auto const flood = distinct_keys(10 << 10, 41, {hot});
  std::vector<value_type> fv(flood.size());
  for (std::size_t i = 0; i < flood.size(); ++i) { fv[i] = tagged(flood[i], 2); }
  auto const out = upsert(t, flood, fv);
  for (std::size_t i = 0; i < flood.size(); ++i) {
    if (out.status[i] == op_status::inserted_evicted) { ASSERT_NE(out.evicted_keys[i], hot); }
  }
  std::unordered_map<key_type, value_type> const just_hot{{hot, tagged(hot, 1)}};
  expect_finds_match(t, just_hot, {hot}, false);
  pin_kernel<<<blocks_for_tiles(n), block_threads>>>(t.ref(), hot, n, true, failures.get());
  ccht::detail::check_cuda(cudaGetLastError(), "pin_kernel launch");
  ccht::cuda_backend::synchronize();
  EXPECT_EQ(failures.to_host()[0], 0);
  s = score_of(t, hot);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(ccht::pins_of(*s), 0u);
}
