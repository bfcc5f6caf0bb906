// Releases that follow asynchronous readers on a GPU (weight_cache.hpp "Stream-ordered release",
// page_cache.hpp "Release in stream order"). A host function blocks the readers' stream until the
// test opens it, so the "kernel" surely still runs when its caller releases. Skips without a GPU;
// not yet run on one (no GPU has been lent to this project).
#include <ccht/cache/page_cache.hpp>
#include <ccht/cache/weight_cache.hpp>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace {

using ccht::key_type;
using ccht::object_lease;
using ccht::object_request;
using ccht::object_status;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

/// Blocks @p stream at the point of construction until open(), which a thread calls after a delay.
class stream_gate {
 public:
  stream_gate(cudaStream_t stream, std::chrono::milliseconds delay) : stream_(stream) {
    ok_ = cudaLaunchHostFunc(stream, &hold, this) == cudaSuccess;
    opener_ = std::thread([this, delay] {
      std::this_thread::sleep_for(delay);
      open();
    });
  }
  ~stream_gate() {
    open();
    opener_.join();
    (void)cudaStreamSynchronize(stream_);  // the host function is done with *this
  }
  stream_gate(stream_gate const&) = delete;
  stream_gate& operator=(stream_gate const&) = delete;
  bool launched() const { return ok_; }
  bool opened() const { return opened_; }

 private:
  void open() {
    {
      std::lock_guard lock(mu_);
      opened_ = true;
    }
    cv_.notify_all();
  }
  static void CUDART_CB hold(void* p) {
    auto* g = static_cast<stream_gate*>(p);
    std::unique_lock lock(g->mu_);
    g->cv_.wait(lock, [g] { return g->opened_.load(); });
  }
  cudaStream_t stream_;
  bool ok_ = false;
  std::atomic<bool> opened_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread opener_;
};

std::vector<std::byte> pattern(key_type k, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t j = 0; j < n; ++j) {
    std::uint64_t const h = (k + 1) * 0x9E3779B97F4A7C15ull + j * 0xD1B54A32D192ED03ull;
    v[j] = static_cast<std::byte>(h >> 56);
  }
  return v;
}

// A copy enqueued before release(keys, stream) reads the object after the release returned, and
// another acquire evicts the object meanwhile: the eviction must wait, or the copy reads unmapped
// memory (cudaErrorIllegalAddress, which loses the context).
TEST(WeightCacheCuda, ReleaseOnAStreamKeepsPagesMappedForItsWork) {
  if (!ccht::cuda_backend::available()) { GTEST_SKIP() << "no usable GPU"; }
  std::size_t const page = std::size_t{2} << 20, bytes = 2 * page;
  ccht::weight_cache<ccht::cuda_backend> cache(2 * page, page);
  key_type const a = 1, b = 2;
  auto const want = pattern(a, bytes);
  object_request const ra{a, bytes}, rb{b, bytes};
  object_lease la, lb;
  cache.acquire({&ra, 1}, {&la, 1});
  ASSERT_EQ(la.status, object_status::fill);
  CUDA_OK(cudaMemcpy(la.data, want.data(), bytes, cudaMemcpyHostToDevice));
  cache.publish({&a, 1});

  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* back = nullptr;
  CUDA_OK(cudaMallocHost(&back, bytes));
  {
    stream_gate gate(s, std::chrono::milliseconds(500));
    ASSERT_TRUE(gate.launched());
    CUDA_OK(cudaMemcpyAsync(back, la.data, bytes, cudaMemcpyDeviceToHost, s));
    cache.release({&a, 1}, s);
    cache.acquire({&rb, 1}, {&lb, 1});  // needs a's pages
    EXPECT_EQ(lb.status, object_status::fill);
    EXPECT_TRUE(gate.opened()) << "a's pages were taken while a copy still had to read them";
    CUDA_OK(cudaStreamSynchronize(s));
  }
  EXPECT_EQ(std::memcmp(back, want.data(), bytes), 0);
  if (lb.status == object_status::fill) { cache.abandon({&b, 1}); }
  std::printf("release_waits %llu\n", static_cast<unsigned long long>(cache.stats().release_waits));
  CUDA_OK(cudaFreeHost(back));
  CUDA_OK(cudaStreamDestroy(s));
}

// The page cache needs no event: a release on the readers' stream drops its pin only after them,
// so another caller's acquire finds the page pinned until then.
TEST(PageCacheCuda, ReleaseOnTheReadersStreamKeepsThePagePinnedUntilTheyFinish) {
  if (!ccht::cuda_backend::available()) { GTEST_SKIP() << "no usable GPU"; }
  std::size_t const page = 4096;
  ccht::page_cache<ccht::cuda_backend> pc(page, page);  // one page
  // Every device buffer up front: no allocation or free while the stream is held.
  auto* keys = static_cast<key_type*>(ccht::cuda_backend::allocate(2 * sizeof(key_type)));
  auto* pages = static_cast<ccht::page_id*>(ccht::cuda_backend::allocate(sizeof(ccht::page_id)));
  auto* status =
      static_cast<ccht::page_status*>(ccht::cuda_backend::allocate(sizeof(ccht::page_status)));
  auto* ev_keys = static_cast<key_type*>(ccht::cuda_backend::allocate(sizeof(key_type)));
  auto* ev_pages = static_cast<ccht::page_id*>(ccht::cuda_backend::allocate(sizeof(ccht::page_id)));
  key_type const host_keys[2] = {1, 2};
  CUDA_OK(cudaMemcpy(keys, host_keys, sizeof(host_keys), cudaMemcpyHostToDevice));
  std::span<key_type const> const k1(keys, 1), k2(keys + 1, 1);
  auto acquire = [&](std::span<key_type const> k) {
    pc.acquire(k, {pages, 1}, {status, 1}, {ev_keys, 1}, {ev_pages, 1});
    ccht::page_status st{};
    EXPECT_EQ(cudaMemcpy(&st, status, sizeof(st), cudaMemcpyDeviceToHost), cudaSuccess);
    return st;
  };
  // Warm up every batch kind once, so nothing loads lazily while the stream is held.
  ASSERT_EQ(acquire(k2), ccht::page_status::fill);
  pc.publish(k2);
  pc.release(k2);
  EXPECT_EQ(pc.erase(k2), 1u);
  ASSERT_EQ(acquire(k1), ccht::page_status::fill);
  pc.publish(k1);

  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    stream_gate gate(s, std::chrono::milliseconds(2000));
    ASSERT_TRUE(gate.launched());
    pc.release_async(k1, {}, s);  // after the readers (the gate)
    EXPECT_EQ(acquire(k2), ccht::page_status::no_space)
        << "the page was free before its readers finished";
    EXPECT_FALSE(gate.opened()) << "the acquire came too late to tell";
  }
  CUDA_OK(cudaStreamSynchronize(s));
  EXPECT_EQ(acquire(k2), ccht::page_status::fill);  // now it evicts key 1
  pc.abandon(k2);
  CUDA_OK(cudaStreamDestroy(s));
  for (void* p : {static_cast<void*>(keys), static_cast<void*>(pages), static_cast<void*>(status),
                  static_cast<void*>(ev_keys), static_cast<void*>(ev_pages)}) {
    ccht::cuda_backend::deallocate(p);
  }
}

}  // namespace
