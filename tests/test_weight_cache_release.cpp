// Stream-ordered release of ccht::weight_cache (weight_cache.hpp, "Stream-ordered release"), on
// the real CPU cache and memfd pool. The backend's events are replaced by host work that the test
// finishes (the cache's Events parameter), standing in for a kernel that still reads an object
// after its caller released it. Without the wait before an unmap these tests fail: the eviction
// or erase never waits, and the pages go while the "kernel" still reads them.
#include <ccht/cache/weight_cache.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

using ccht::key_type;
using ccht::object_lease;
using ccht::object_request;
using ccht::object_status;

/// Work still enqueued on a stream at its release: the test decides when it is done. It is the
/// event the cache keeps, so it must outlive the cache (declare it first).
struct host_work {
  std::atomic<bool> done{false};
  std::atomic<int> waits{0};
  std::function<void()> on_wait;  ///< runs when the cache starts to wait (under its lock)
  std::mutex mu;
  std::condition_variable cv;
  void finish() {
    {
      std::lock_guard lock(mu);
      done = true;
    }
    cv.notify_all();
  }
};

/// The weight cache's Events: a stream names the work before the release; an event is that work.
struct test_events {
  struct stream_type {
    host_work* work = nullptr;
  };
  using event_type = host_work*;
  static inline std::atomic<int> recorded{0}, freed{0};
  static event_type record_event(stream_type s) {
    ++recorded;
    return s.work;
  }
  static bool event_done(event_type e) { return e == nullptr || e->done; }
  static void wait_event(event_type e) {
    ++e->waits;
    if (e->on_wait) { e->on_wait(); }
    std::unique_lock lock(e->mu);
    e->cv.wait(lock, [&] { return e->done.load(); });
  }
  static void free_event(event_type) noexcept { ++freed; }
  static int live() { return recorded - freed; }
};

using cache_t = ccht::weight_cache<ccht::cpu_backend, test_events>;
using stream_t = test_events::stream_type;

constexpr std::size_t page = 4096;

std::byte pattern(key_type k, std::size_t j) {
  std::uint64_t const h = (k + 1) * 0x9E3779B97F4A7C15ull + j * 0xD1B54A32D192ED03ull;
  return static_cast<std::byte>(h >> 56);
}

std::size_t wrong_bytes(std::byte const* p, key_type k, std::size_t bytes) {
  std::size_t bad = 0;
  for (std::size_t j = 0; j < bytes; ++j) { bad += p[j] != pattern(k, j); }
  return bad;
}

/// The bytes at [p, p + n), or nullopt where any of them cannot be read: the kernel copies them
/// through a pipe, so an unmapped page fails the write(2) with EFAULT instead of faulting here.
std::optional<std::vector<std::byte>> peek(std::byte const* p, std::size_t n) {
  int fd[2];
  if (::pipe(fd) != 0) { return std::nullopt; }
  std::vector<std::byte> out(n);
  bool ok = true;
  for (std::size_t at = 0; ok && at < n; at += page) {  // one page at a time: the pipe holds it
    std::size_t const len = std::min(page, n - at);
    ok = ::write(fd[1], p + at, len) == static_cast<ssize_t>(len) &&
         ::read(fd[0], out.data() + at, len) == static_cast<ssize_t>(len);
  }
  ::close(fd[0]);
  ::close(fd[1]);
  if (!ok) { return std::nullopt; }
  return out;
}

/// Whether [p, p + n) can be read and holds object @p k's bytes.
bool intact(std::byte const* p, key_type k, std::size_t n) {
  auto const b = peek(p, n);
  return b && wrong_bytes(b->data(), k, n) == 0;
}

object_lease acquire_one(cache_t& c, key_type k, std::size_t bytes) {
  object_request const r{k, bytes};
  object_lease l;
  c.acquire({&r, 1}, {&l, 1});
  return l;
}

/// Acquires @p k, fills what is missing and publishes it.
object_lease load_one(cache_t& c, key_type k, std::size_t bytes) {
  object_lease l = acquire_one(c, k, bytes);
  if (l.status == object_status::fill) {
    for (std::uint32_t i : l.fill_pages) {
      std::size_t const end = std::min((std::size_t{i} + 1) * page, bytes);
      for (std::size_t j = std::size_t{i} * page; j < end; ++j) { l.data[j] = pattern(k, j); }
    }
    c.publish({&k, 1});
  }
  return l;
}

class WeightCacheRelease : public ::testing::Test {
 protected:
  void SetUp() override {
    test_events::recorded = 0;
    test_events::freed = 0;
  }
};

TEST_F(WeightCacheRelease, EvictionWaitsForTheReleasedStreamBeforeUnmapping) {
  key_type const a = 1, b = 2;
  std::size_t const bytes = 4 * page;
  host_work kernel;  // still reads a after a's release
  {
    cache_t c(4 * page, page, {.cpu_threads = 1});
    object_lease const la = load_one(c, a, bytes);
    ASSERT_EQ(la.status, object_status::fill);
    bool mapped_during_wait = false;
    kernel.on_wait = [&] {
      mapped_during_wait = intact(la.data, a, bytes);
      kernel.finish();  // the kernel ends while the cache waits
    };
    c.release({&a, 1}, stream_t{&kernel});
    EXPECT_EQ(kernel.waits, 0) << "a release never waits";
    EXPECT_EQ(c.stats().objects_pinned, 0u);
    EXPECT_TRUE(intact(la.data, a, bytes));

    object_lease const lb = load_one(c, b, bytes);  // takes every page of a
    ASSERT_EQ(lb.status, object_status::fill);
    EXPECT_EQ(kernel.waits, 1) << "a's pages were unmapped without waiting for its stream";
    EXPECT_TRUE(mapped_during_wait) << "a's pages were gone before the wait";
    EXPECT_FALSE(peek(la.data, page)) << "a's stale view still reads after its eviction";
    EXPECT_EQ(wrong_bytes(lb.data, b, bytes), 0u);
    EXPECT_EQ(c.stats().release_waits, 1u);
    EXPECT_EQ(c.stats().objects, 1u);  // a is forgotten once its last page went
  }
  EXPECT_EQ(test_events::recorded, 1);
  EXPECT_EQ(test_events::live(), 0);
}

TEST_F(WeightCacheRelease, FinishedWorkIsEvictedWithoutWaiting) {
  host_work done_before, done_later;
  cache_t c(4 * page, page, {.cpu_threads = 1});
  key_type const a = 1, b = 2, d = 3;
  // Done before the release: the event goes back at once, nothing is kept.
  done_before.finish();
  load_one(c, a, 2 * page);
  c.release({&a, 1}, stream_t{&done_before});
  EXPECT_EQ(test_events::recorded, 1);
  EXPECT_EQ(test_events::live(), 0);
  // Pending at the release, done before the eviction: no wait either.
  load_one(c, b, 2 * page);
  c.release({&b, 1}, stream_t{&done_later});
  EXPECT_EQ(test_events::live(), 1);
  done_later.finish();
  ASSERT_EQ(load_one(c, d, 4 * page).status, object_status::fill);  // evicts a and b
  EXPECT_EQ(done_before.waits + done_later.waits, 0);
  EXPECT_EQ(c.stats().release_waits, 0u);
  EXPECT_EQ(c.stats().pages_evicted, 4u);
  EXPECT_EQ(test_events::live(), 0);
}

TEST_F(WeightCacheRelease, ReleaseWithoutAStreamRecordsNothingAndNeverWaits) {
  cache_t c(4 * page, page, {.cpu_threads = 1});
  key_type const a = 1, b = 2;
  object_lease const la = load_one(c, a, 4 * page);
  c.release({&a, 1});  // the caller's work on a is done: today's release
  EXPECT_EQ(test_events::recorded, 0);
  ASSERT_EQ(load_one(c, b, 4 * page).status, object_status::fill);
  EXPECT_FALSE(peek(la.data, page));
  EXPECT_EQ(c.stats().release_waits, 0u);
  EXPECT_EQ(test_events::recorded, 0);
}

TEST_F(WeightCacheRelease, EveryHoldersStreamIsWaitedFor) {
  host_work k1, k2;
  cache_t c(4 * page, page, {.cpu_threads = 1});
  key_type const a = 1, b = 2;
  load_one(c, a, 4 * page);
  ASSERT_EQ(acquire_one(c, a, 4 * page).status, object_status::hit);  // a second holder
  std::vector<int> order;
  k1.on_wait = [&] { order.push_back(1); k1.finish(); };
  k2.on_wait = [&] { order.push_back(2); k2.finish(); };
  c.release({&a, 1}, stream_t{&k1});
  c.release({&a, 1}, stream_t{&k2});
  EXPECT_EQ(test_events::live(), 2);
  ASSERT_EQ(load_one(c, b, 4 * page).status, object_status::fill);
  EXPECT_EQ(order, (std::vector<int>{1, 2})) << "a holder's stream was not waited for";
  EXPECT_EQ(test_events::live(), 0);
}

TEST_F(WeightCacheRelease, OneEventPerBatchWaitedForOnce) {
  host_work kernel;
  cache_t c(4 * page, page, {.cpu_threads = 1});
  key_type const objs[3] = {1, 2, 3};
  for (key_type k : objs) { load_one(c, k, page); }
  kernel.on_wait = [&] { kernel.finish(); };
  c.release(objs, stream_t{&kernel});
  EXPECT_EQ(test_events::recorded, 1);
  key_type const big = 9;
  ASSERT_EQ(load_one(c, big, 4 * page).status, object_status::fill);  // evicts all three
  EXPECT_EQ(kernel.waits, 1);
  EXPECT_EQ(c.stats().release_waits, 1u);
  EXPECT_EQ(test_events::live(), 0);
}

TEST_F(WeightCacheRelease, EraseAndDestructionWaitForTheReleasedStream) {
  key_type const a = 1, b = 2;
  host_work k1, k2;
  bool mapped_during_wait = false;
  object_lease la;
  k1.on_wait = [&] {
    mapped_during_wait = intact(la.data, a, 2 * page);
    k1.finish();
  };
  k2.on_wait = [&] { k2.finish(); };
  {
    cache_t c(4 * page, page, {.cpu_threads = 1});
    la = load_one(c, a, 2 * page);
    c.release({&a, 1}, stream_t{&k1});
    EXPECT_EQ(c.erase({&a, 1}), 1u);
    EXPECT_EQ(k1.waits, 1) << "erase unmapped without waiting for the stream";
    EXPECT_TRUE(mapped_during_wait);
    EXPECT_FALSE(peek(la.data, page));
    load_one(c, b, 2 * page);
    c.release({&b, 1}, stream_t{&k2});
    EXPECT_EQ(k2.waits, 0);
  }  // the destructor waits before the pool goes
  EXPECT_EQ(k2.waits, 1);
  EXPECT_EQ(test_events::live(), 0);
}

TEST_F(WeightCacheRelease, FinishedEventsAreGivenBackByLaterReleases) {
  std::vector<host_work> works(50);
  host_work last;
  cache_t c(8 * page, page, {.cpu_threads = 1});
  key_type const a = 1, b = 2;
  load_one(c, a, page);
  for (auto& w : works) {
    ASSERT_EQ(acquire_one(c, a, page).status, object_status::hit);
    c.release({&a, 1}, stream_t{&w});
  }
  c.release({&a, 1});
  EXPECT_EQ(test_events::live(), 50);
  for (auto& w : works) { w.finish(); }
  load_one(c, b, page);
  c.release({&b, 1}, stream_t{&last});  // polls: a is never evicted, yet keeps no event
  EXPECT_EQ(test_events::live(), 1);
  last.finish();
}

TEST(WeightCacheReleaseCpu, StreamReleaseOnTheCpuBackendIsARelease) {
  ccht::weight_cache<ccht::cpu_backend> c(4 * page, page, {.cpu_threads = 1});
  key_type const a = 1;
  object_request const r{a, page};
  object_lease l;
  c.acquire({&r, 1}, {&l, 1});
  ASSERT_EQ(l.status, object_status::fill);
  c.publish({&a, 1});
  c.release({&a, 1}, ccht::host_stream{});
  EXPECT_EQ(c.stats().objects_pinned, 0u);
  EXPECT_EQ(c.stats().releases, 1u);
  EXPECT_THROW(c.release({&a, 1}, ccht::host_stream{}), ccht::error);  // no pin left
}

// A reader keeps reading an object after its release while another thread evicts it over and
// over: the reader must never lose a page or see another object's bytes.
TEST(Concurrency, WeightCacheReaderAfterReleaseKeepsItsPages) {
  std::deque<host_work> kernels;  // one per round, alive as long as the cache
  cache_t c(8 * page, page, {.cpu_threads = 1});
  std::size_t const bytes = 4 * page;
  key_type const a = 1;
  std::atomic<bool> stop{false};
  std::thread evictor([&] {
    for (key_type k = 2; !stop; k = k == 2 ? 3 : 2) {
      object_lease const l = load_one(c, k, bytes);
      if (l.status == object_status::hit || l.status == object_status::fill) { c.release({&k, 1}); }
    }
  });
  int lost = 0, rounds = 0;
  auto const end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (rounds < 30 || std::chrono::steady_clock::now() < end) {
    if (rounds >= 300) { break; }
    object_lease la = load_one(c, a, bytes);
    if (la.status != object_status::hit && la.status != object_status::fill) {
      std::this_thread::yield();
      continue;
    }
    ++rounds;
    host_work& kernel = kernels.emplace_back();
    std::thread reader([&] {
      auto const until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3);
      while (std::chrono::steady_clock::now() < until) { lost += !intact(la.data, a, bytes); }
      kernel.finish();
    });
    c.release({&a, 1}, stream_t{&kernel});
    reader.join();
  }
  stop = true;
  evictor.join();
  EXPECT_EQ(lost, 0) << "reads after the release found the pages gone or replaced";
  EXPECT_GT(c.stats().release_waits, 0u) << "no eviction overlapped a reader: nothing was tested";
}

}  // namespace
