// Kick-out baselines (ccht::lru_cht, ccht::random_cht) on the device, at the core level over a
// bucket array in device memory:
// - one 16-lane tile running a sequence of upserts must leave exactly the bucket array, statuses,
//   evicted pairs and access counts that the one-thread host path (scalar_tile) leaves: the
//   tile-generic code (lane 0 locks and stores, the tile scans and ranks) is the same algorithm;
// - many tiles upserting and finding at once: no key twice, no key lost without a report, the
//   live count equals the entries, and a find never returns another key's value.
// Every test skips, with a message, where no GPU is present.
#include <ccht/ccht.hpp>
#include <ccht/core/kickout.hpp>

#include <cooperative_groups.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

namespace {

namespace cg = cooperative_groups;
using ccht::access_counts;
using ccht::key_type;
using ccht::op_status;
using ccht::tick_type;
using ccht::value_type;

constexpr int Bs = 16;
constexpr int tile_size = 16;
constexpr int block_threads = 128;

/// Host copy of a bucket array plus versions and live word, and its device twin.
struct arrays {
  std::vector<ccht::bucket<Bs>> buckets;
  std::vector<std::uint32_t> versions;
  std::uint64_t live = 0;

  explicit arrays(std::uint32_t nb) : buckets(nb), versions(nb, 0) {
    for (auto& b : buckets) {
      for (int s = 0; s < Bs; ++s) {
        b.keys[s] = ccht::empty_key;
        b.values[s] = 0;
        b.scores[s] = 0;
      }
    }
  }
  ccht::bucket_array_view<Bs> host_view(std::uint64_t capacity, std::uint32_t max_kicks) {
    ccht::bucket_array_view<Bs> v;
    v.buckets = buckets.data();
    v.versions = versions.data();
    v.num_buckets = static_cast<std::uint32_t>(buckets.size());
    v.seed = 0x1234;
    v.live = &live;
    v.capacity = capacity;
    v.max_kicks = max_kicks;
    return v;
  }
};

/// Device copy of an `arrays`; freed on destruction.
struct device_arrays {
  ccht::bucket_array_view<Bs> view;
  explicit device_arrays(arrays const& h, std::uint64_t capacity, std::uint32_t max_kicks) {
    auto const nb = static_cast<std::uint32_t>(h.buckets.size());
    view.buckets = static_cast<ccht::bucket<Bs>*>(
        ccht::cuda_backend::allocate(nb * sizeof(ccht::bucket<Bs>)));
    view.versions =
        static_cast<std::uint32_t*>(ccht::cuda_backend::allocate(nb * sizeof(std::uint32_t)));
    view.live = static_cast<std::uint64_t*>(ccht::cuda_backend::allocate(sizeof(std::uint64_t)));
    ccht::cuda_backend::copy_from_host(view.buckets, h.buckets.data(),
                                       nb * sizeof(ccht::bucket<Bs>));
    ccht::cuda_backend::copy_from_host(view.versions, h.versions.data(),
                                       nb * sizeof(std::uint32_t));
    ccht::cuda_backend::copy_from_host(view.live, &h.live, sizeof(std::uint64_t));
    view.num_buckets = nb;
    view.seed = 0x1234;
    view.capacity = capacity;
    view.max_kicks = max_kicks;
  }
  ~device_arrays() {
    ccht::cuda_backend::deallocate(view.buckets);
    ccht::cuda_backend::deallocate(view.versions);
    ccht::cuda_backend::deallocate(view.live);
  }
  device_arrays(device_arrays const&) = delete;
  device_arrays& operator=(device_arrays const&) = delete;
  void to_host(arrays& h) const {
    ccht::cuda_backend::copy_to_host(h.buckets.data(), view.buckets,
                                     h.buckets.size() * sizeof(ccht::bucket<Bs>));
    ccht::cuda_backend::copy_to_host(h.versions.data(), view.versions,
                                     h.versions.size() * sizeof(std::uint32_t));
    ccht::cuda_backend::copy_to_host(&h.live, view.live, sizeof(std::uint64_t));
  }
};

template <class T>
struct device_vec {
  T* p = nullptr;
  std::size_t n = 0;
  explicit device_vec(std::size_t count) : n(count) {
    p = static_cast<T*>(ccht::cuda_backend::allocate((n > 0 ? n : 1) * sizeof(T)));
  }
  explicit device_vec(std::vector<T> const& h) : device_vec(h.size()) {
    ccht::cuda_backend::copy_from_host(p, h.data(), n * sizeof(T));
  }
  ~device_vec() { ccht::cuda_backend::deallocate(p); }
  device_vec(device_vec const&) = delete;
  device_vec& operator=(device_vec const&) = delete;
  std::vector<T> to_host() const {
    std::vector<T> h(n);
    ccht::cuda_backend::copy_to_host(h.data(), p, n * sizeof(T));
    return h;
  }
};

/// One tile runs every upsert in order (ticks 1..n); lane 0 records what happened.
template <class Policy>
__global__ void serial_upserts(ccht::bucket_array_view<Bs> view, key_type const* keys,
                               std::size_t n, op_status* status, key_type* ek_out,
                               value_type* ev_out, access_counts* counts) {
  auto const tile = cg::tiled_partition<tile_size>(cg::this_thread_block());
  if (blockIdx.x != 0 || threadIdx.x >= tile_size) { return; }
  access_counts acc;  // per lane: every lane counts the same events
  for (std::size_t i = 0; i < n; ++i) {
    key_type ek = 0;
    value_type ev = 0;
    op_status const st = ccht::bucket_ops<Policy, Bs>::insert_or_assign(
        tile, view, keys[i], keys[i] ^ 0x5555, i + 1, ek, ev, &acc);
    if (tile.thread_rank() == 0) {
      status[i] = st;
      ek_out[i] = st == op_status::inserted_evicted ? ek : ccht::empty_key;
      ev_out[i] = st == op_status::inserted_evicted ? ev : 0;
    }
  }
  if (tile.thread_rank() == 0) { *counts = acc; }
}

/// One tile per element: even elements upsert keys[i], odd ones find it.
template <class Policy>
__global__ void concurrent_ops(ccht::bucket_array_view<Bs> view, key_type const* keys,
                               std::size_t n, op_status* status, key_type* ek_out,
                               value_type* ev_out, value_type* found) {
  auto const tile = cg::tiled_partition<tile_size>(cg::this_thread_block());
  std::size_t const i = (std::size_t{blockIdx.x} * blockDim.x + threadIdx.x) / tile_size;
  if (i >= n) { return; }
  key_type const k = keys[i];
  if (i % 2 == 0) {
    key_type ek = 0;
    value_type ev = 0;
    op_status const st =
        ccht::bucket_ops<Policy, Bs>::insert_or_assign(tile, view, k, k << 20, i + 1, ek, ev);
    if (tile.thread_rank() == 0) {
      status[i] = st;
      ek_out[i] = st == op_status::inserted_evicted ? ek : ccht::empty_key;
      ev_out[i] = st == op_status::inserted_evicted ? ev : 0;
    }
  } else {
    value_type v = 0;
    bool const hit = ccht::bucket_ops<Policy, Bs>::find(tile, view, k, i + 1, v);
    if (tile.thread_rank() == 0) {
      status[i] = hit ? op_status::hit : op_status::miss;
      found[i] = hit ? v : 0;
    }
  }
}

class DeviceKickout : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ccht::cuda_backend::available()) {
      GTEST_SKIP() << "no usable CUDA GPU on this machine: device kick-out tests skipped";
    }
  }
};

template <class Policy>
void tile_matches_scalar(std::uint32_t nb, std::uint64_t capacity, std::uint32_t max_kicks,
                         std::size_t n) {
  std::vector<key_type> keys(n);
  for (std::size_t i = 0; i < n; ++i) {  // new keys, with some repeats (updates)
    keys[i] = (i % 7 == 3 ? i / 2 : i) * 0x9E3779B97F4A7C15ull % 1000003 + 1;
  }
  arrays host(nb), dev_result(nb);
  std::uint64_t const cap = capacity ? capacity : std::uint64_t{nb} * Bs;
  device_arrays dev(host, cap, max_kicks);

  auto const hv = host.host_view(cap, max_kicks);
  std::vector<op_status> hs(n);
  std::vector<key_type> hek(n, ccht::empty_key);
  std::vector<value_type> hev(n, 0);
  access_counts hacc;
  for (std::size_t i = 0; i < n; ++i) {
    key_type ek = 0;
    value_type ev = 0;
    hs[i] = ccht::bucket_ops<Policy, Bs>::insert_or_assign(ccht::scalar_tile{}, hv, keys[i],
                                                           keys[i] ^ 0x5555, i + 1, ek, ev, &hacc);
    if (hs[i] == op_status::inserted_evicted) {
      hek[i] = ek;
      hev[i] = ev;
    }
  }

  device_vec<key_type> dkeys(keys);
  device_vec<op_status> ds(n);
  device_vec<key_type> dek(n);
  device_vec<value_type> dev_v(n);
  device_vec<access_counts> dacc(1);
  serial_upserts<Policy><<<1, tile_size>>>(dev.view, dkeys.p, n, ds.p, dek.p, dev_v.p, dacc.p);
  ccht::cuda_backend::synchronize();
  dev.to_host(dev_result);

  auto const s = ds.to_host();
  auto const ek = dek.to_host();
  auto const ev = dev_v.to_host();
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(s[i], hs[i]) << Policy::name << " op " << i;
    ASSERT_EQ(ek[i], hek[i]) << Policy::name << " op " << i;
    ASSERT_EQ(ev[i], hev[i]) << Policy::name << " op " << i;
  }
  EXPECT_EQ(std::memcmp(dev_result.buckets.data(), host.buckets.data(),
                        nb * sizeof(ccht::bucket<Bs>)),
            0)
      << "the 16-lane tile left a different bucket array than the scalar path";
  EXPECT_EQ(dev_result.versions, host.versions);
  EXPECT_EQ(dev_result.live, host.live);
  access_counts const dcounts = dacc.to_host()[0];
  EXPECT_EQ(dcounts.bucket_reads, hacc.bucket_reads);
  EXPECT_EQ(dcounts.bucket_writes, hacc.bucket_writes);
  EXPECT_EQ(dcounts.bytes_read, hacc.bytes_read);
  EXPECT_EQ(dcounts.bytes_written, hacc.bytes_written);
  EXPECT_EQ(dcounts.kicks, hacc.kicks);
  EXPECT_GT(hacc.kicks, 0u) << "the sequence never kicked";
}

TEST_F(DeviceKickout, TileMatchesScalarLruChtFull) {
  tile_matches_scalar<ccht::lru_cht>(64, 0, ccht::kick_threshold, 4000);
}
TEST_F(DeviceKickout, TileMatchesScalarLruChtCapacity) {
  tile_matches_scalar<ccht::lru_cht>(64, 900, ccht::kick_threshold, 4000);
}
TEST_F(DeviceKickout, TileMatchesScalarRandomChtTinyThreshold) {
  tile_matches_scalar<ccht::random_cht>(64, 0, 3, 4000);
}
TEST_F(DeviceKickout, TileMatchesScalarRandomChtCapacity) {
  tile_matches_scalar<ccht::random_cht>(64, 800, ccht::kick_threshold, 4000);
}

template <class Policy>
void concurrent_no_loss(std::uint32_t nb, std::uint64_t capacity, std::size_t n,
                        key_type universe) {
  std::vector<key_type> keys(n);
  for (std::size_t i = 0; i < n; ++i) { keys[i] = (i * 0x2545F4914F6CDD1Dull >> 17) % universe + 1; }
  arrays host(nb);
  std::uint64_t const cap = capacity ? capacity : std::uint64_t{nb} * Bs;
  device_arrays dev(host, cap, ccht::kick_threshold);
  device_vec<key_type> dkeys(keys);
  device_vec<op_status> ds(n);
  device_vec<key_type> dek(n);
  device_vec<value_type> dev_v(n), dfound(n);
  unsigned const blocks = static_cast<unsigned>((n * tile_size + block_threads - 1) / block_threads);
  concurrent_ops<Policy><<<blocks, block_threads>>>(dev.view, dkeys.p, n, ds.p, dek.p, dev_v.p,
                                                    dfound.p);
  ccht::cuda_backend::synchronize();
  dev.to_host(host);
  auto const s = ds.to_host();
  auto const ek = dek.to_host();
  auto const ev = dev_v.to_host();
  auto const found = dfound.to_host();

  std::map<key_type, long> net;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 2 == 1) {
      if (s[i] == op_status::hit) { EXPECT_EQ(found[i] >> 20, keys[i]) << "foreign value"; }
      continue;
    }
    if (s[i] == op_status::inserted || s[i] == op_status::inserted_evicted) { ++net[keys[i]]; }
    if (s[i] == op_status::inserted_evicted) {
      EXPECT_EQ(ev[i] >> 20, ek[i]) << "evicted pair mismatch";
      --net[ek[i]];
    }
  }
  std::map<key_type, value_type> present;
  for (std::uint32_t b = 0; b < nb; ++b) {
    EXPECT_EQ(host.versions[b] % 2, 0u);
    for (int sl = 0; sl < Bs; ++sl) {
      key_type const k = host.buckets[b].keys[sl];
      if (k == ccht::empty_key) { continue; }
      EXPECT_TRUE(present.emplace(k, host.buckets[b].values[sl]).second) << "key " << k << " twice";
      auto const c = ccht::candidates(k, 0x1234, nb);
      EXPECT_TRUE(b == c.first || b == c.second);
    }
  }
  EXPECT_EQ(host.live, present.size());
  for (auto const& [k, c] : net) {
    EXPECT_EQ(c, present.count(k) ? 1 : 0) << "key " << k << ": inserts - evictions";
  }
  for (auto const& [k, v] : present) { EXPECT_TRUE(net.count(k)) << "key " << k << " never inserted"; }
}

TEST_F(DeviceKickout, ConcurrentLruChtFull) {
  concurrent_no_loss<ccht::lru_cht>(64, 0, 200000, 3000);
}
TEST_F(DeviceKickout, ConcurrentLruChtCapacity) {
  concurrent_no_loss<ccht::lru_cht>(64, 900, 200000, 3000);
}
TEST_F(DeviceKickout, ConcurrentRandomChtFull) {
  concurrent_no_loss<ccht::random_cht>(64, 0, 200000, 3000);
}

}  // namespace
