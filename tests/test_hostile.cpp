// Hostile and careless use of the library (issue 31; docs/hostile-use.md lists every case): what a
// long-running runtime, a careless caller or a hostile file does to the weight cache, the model
// loader and the memory checks. Each test failed before the fix it names.
#include <ccht/cache/model_loader.hpp>
#include <ccht/cache/page_cache.hpp>
#include <ccht/cache/weight_cache.hpp>
#include <ccht/detail/system.hpp>
#include <ccht/table.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using ccht::key_type;
using ccht::object_lease;
using ccht::object_request;
using ccht::object_status;
using cache_t = ccht::weight_cache<ccht::cpu_backend>;
using loader_t = ccht::model_loader<ccht::cpu_backend>;

constexpr std::size_t page = 4096;

/// @p prefix followed by @p i (appended: GCC 12 warns falsely on "literal" + std::string&&).
std::string numbered(char const* prefix, long long i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    char tmpl[] = "/tmp/ccht-hostile-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() { fs::remove_all(path); }
  std::string file(std::string const& name) const { return (path / name).string(); }
};

/// Lines of /proc/self/maps: the kernel mappings of this process.
std::size_t mappings() {
  std::ifstream in("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) { ++n; }
  return n;
}

/// Acquires object @p k of @p bytes; a fill is written (byte = k) and published. Holds a pin.
object_lease load_object(cache_t& c, key_type k, std::size_t bytes) {
  object_request const r{k, bytes};
  object_lease l;
  c.acquire({&r, 1}, {&l, 1});
  if (l.status == object_status::fill) {
    for (std::uint32_t i : l.fill_pages) {
      std::size_t const end = std::min((std::size_t{i} + 1) * page, bytes);
      std::fill(l.data + std::size_t{i} * page, l.data + end, static_cast<std::byte>(k));
    }
    c.publish({&k, 1});
  }
  return l;
}

/// A safetensors file of @p tensors U8 tensors of @p bytes each (tensor t filled with t + seed).
void write_model(std::string const& path, int tensors, std::size_t bytes, int seed = 0) {
  std::vector<std::vector<std::byte>> data;
  std::vector<ccht::st_tensor_data> ts;
  data.reserve(tensors);
  for (int t = 0; t < tensors; ++t) {
    data.emplace_back(bytes, static_cast<std::byte>(t + seed));
    ts.push_back({numbered("layers.", t) + ".weight", ccht::st_dtype::U8, {bytes}, data.back()});
  }
  ccht::write_safetensors(path, ts);
}

/// The message of the ccht::error that @p f throws (fails the test when it throws none).
template <class F>
std::string error_of(F&& f, ccht::error_code expected) {
  try {
    f();
  } catch (ccht::error const& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no ccht::error was thrown";
  return {};
}

// Case 1: objects whose pages were all evicted were kept for ever, each with its address range
// (one kernel mapping), until every load failed at vm.max_map_count. Now an idle object with no
// resident page is forgotten: objects and mappings stay bounded by the pool.
TEST(HostileUse, EvictedObjectsAreForgottenAndMappingsStayBounded) {
  constexpr std::size_t pages = 64;
  cache_t c(pages * page, page, {.cpu_threads = 1});
  std::size_t const before = mappings();
  for (key_type k = 1; k <= 3000; ++k) {
    object_lease const l = load_object(c, k, 3 * page - 100);
    ASSERT_EQ(l.status, object_status::fill);
    c.release({&k, 1});
    auto const s = c.stats();
    ASSERT_LE(s.objects, pages) << "after " << k << " objects";
  }
  auto const s = c.stats();
  EXPECT_EQ(s.pages_pinned, 0u);
  EXPECT_GT(s.pages_evicted, 2900u);
  // Each resident object: its range plus at most two mappings per page it holds.
  EXPECT_LE(mappings(), before + s.objects + 2 * pages);
  // What is still resident is served intact.
  key_type const last = 3000;
  object_lease const l = load_object(c, last, 3 * page - 100);
  EXPECT_EQ(l.status, object_status::hit);
  EXPECT_EQ(l.data[3 * page - 101], static_cast<std::byte>(last));
  c.release({&last, 1});
}

// Case 1, through the model loader: hundreds of distinct models one after another.
TEST(HostileUse, ManyDistinctModelsKeepObjectsBounded) {
  temp_dir d;
  constexpr std::size_t pages = 256;
  cache_t c(pages * page, page, {.cpu_threads = 1});
  loader_t loader(c);
  std::size_t const before = mappings();
  for (int m = 0; m < 150; ++m) {
    std::string const p = d.file(numbered("m", m) + ".safetensors");
    write_model(p, 20, 1000 + 97 * (m % 7), m);
    auto model = loader.load(p);
    ASSERT_EQ(model.tensors().size(), 20u);
    EXPECT_EQ(model.tensors()[5].data[0], static_cast<std::byte>(5 + m));
    fs::remove(p);
  }
  auto const s = c.stats();
  EXPECT_LE(s.objects, pages);
  EXPECT_EQ(s.pages_pinned, 0u);
  EXPECT_LE(mappings(), before + s.objects + 2 * pages);
}

/// A write faulted: SIGSEGV, or a sanitizer's report of it (it catches the signal and exits with
/// its own code; 3 is the tests' "not the case under test").
bool faulted(int status) {
  if (WIFSIGNALED(status)) { return WTERMSIG(status) == SIGSEGV; }
  return WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3;
}

// Case 2: a holder wrote through its view of a published object and every later hit was served
// the changed bytes. Published pages are mapped read-only: the write faults.
TEST(HostileUseDeathTest, PublishedObjectIsReadOnly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto write_after_publish = [] {
    cache_t c(8 * page, page, {.cpu_threads = 1});
    object_lease const l = load_object(c, 5, 2 * page);
    l.data[10] = std::byte{0};
  };
  EXPECT_EXIT(write_after_publish(), faulted, "");
  auto write_a_hit = [] {
    cache_t c(8 * page, page, {.cpu_threads = 1});
    key_type const k = 5;
    load_object(c, k, 2 * page);
    c.release({&k, 1});
    object_lease const h = load_object(c, k, 2 * page);
    if (h.status != object_status::hit) { std::exit(3); }  // not the case under test
    h.data[page + 1] = std::byte{0};
  };
  EXPECT_EXIT(write_a_hit(), faulted, "");
}

// Case 2, the other side: the filler can write its fill pages, also those of a partly evicted
// object, whose kept pages stay read-only and intact.
TEST(HostileUse, FillPagesAreWritableAndKeptPagesIntact) {
  cache_t c(4 * page, page, {.cpu_threads = 1});
  key_type const a = 1, b = 2;
  load_object(c, a, 3 * page);
  c.release({&a, 1});
  load_object(c, b, 2 * page);  // evicts a's older pages
  c.release({&b, 1});
  object_request const r{a, 3 * page};
  object_lease l;
  c.acquire({&r, 1}, {&l, 1});  // a partial refill: the missing pages only
  ASSERT_EQ(l.status, object_status::fill);
  ASSERT_FALSE(l.fill_pages.empty());
  ASSERT_LT(l.fill_pages.size(), 3u);
  for (std::uint32_t i : l.fill_pages) {
    std::fill(l.data + std::size_t{i} * page, l.data + (std::size_t{i} + 1) * page,
              static_cast<std::byte>(a));
  }
  c.publish({&a, 1});
  for (std::size_t j = 0; j < 3 * page; ++j) { ASSERT_EQ(l.data[j], static_cast<std::byte>(a)) << j; }
  c.release({&a, 1});
  EXPECT_EQ(c.stats().pages_pinned, 0u);
}

// Case 6: an object of 2^64 - 1 bytes needed "0 pages" (the page count overflowed) and was a hit.
TEST(HostileUse, ObjectSizesNearTheLimitAreRejected) {
  cache_t c(8 * page, page);
  for (std::size_t bytes : {SIZE_MAX, SIZE_MAX - page + 2, SIZE_MAX / 2}) {
    object_request const r{9, bytes};
    object_lease l;
    std::string const msg =
        error_of([&] { c.acquire({&r, 1}, {&l, 1}); }, ccht::error_code::invalid_size);
    EXPECT_NE(msg.find("the budget holds 8"), std::string::npos) << msg;
  }
  EXPECT_EQ(c.stats().objects, 0u);
  EXPECT_EQ(c.stats().hits, 0u);
}

// Case 8: a budget (or table) larger than the machine's memory was populated until the OOM
// killer came. Now it is refused up front, naming both sizes.
TEST(HostileUse, SizesBeyondTheMachinesMemoryAreRefused) {
  std::size_t const avail = ccht::detail::host_memory_available();
  if (avail == SIZE_MAX) { GTEST_SKIP() << "neither /proc/meminfo nor a cgroup limit is readable"; }
  std::size_t const too_much = (avail / page + avail / page / 2 + 1) * page;
  std::string msg = error_of([&] { cache_t c(too_much, page, {.huge = ccht::huge_pages::off}); },
                             ccht::error_code::out_of_memory);
  EXPECT_NE(msg.find("available"), std::string::npos) << msg;
  msg = error_of([&] { ccht::page_cache<ccht::cpu_backend> pc(too_much, page); },
                 ccht::error_code::out_of_memory);
  EXPECT_NE(msg.find("available"), std::string::npos) << msg;
  msg = error_of([&] { ccht::table<ccht::cpu_backend, ccht::lru> t(too_much / 8); },
                 ccht::error_code::out_of_memory);
  EXPECT_NE(msg.find("available"), std::string::npos) << msg;
  // A budget that fits is still fine.
  cache_t ok(64 * page, page);
  EXPECT_EQ(ok.num_pages(), 64u);
}

/// Runs @p f on another thread; a FIFO's open() that blocks is released by opening its write end,
/// so a regression fails the test instead of hanging it.
template <class F>
void expect_returns_promptly(F f, std::string const& fifo) {
  auto done = std::async(std::launch::async, f);
  if (done.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked on " << fifo;
    int const w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) { ::close(w); }
  }
  done.get();
}

// Case 9 and 14: a FIFO given as a model blocked open() for ever; a directory was "4096 bytes,
// shorter than the 8-byte header length"; an embedded NUL loaded the file before it.
TEST(HostileUse, OnlyRegularFilesAreOpened) {
  temp_dir d;
  std::string const fifo = d.file("fifo"), good = d.file("good.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  write_model(good, 2, 100);
  cache_t c(16 * page, page);
  loader_t loader(c);
  expect_returns_promptly([&] {
    std::string const msg = error_of([&] { loader.load(fifo); }, ccht::error_code::invalid_argument);
    EXPECT_NE(msg.find("not a regular file (a FIFO)"), std::string::npos) << msg;
  }, fifo);
  expect_returns_promptly([&] {
    EXPECT_THROW(ccht::detail::open_regular_file(fifo), ccht::error);
    EXPECT_THROW(ccht::detail::require_regular_file(fifo), ccht::error);
  }, fifo);
  std::string msg = error_of([&] { loader.load(d.path.string()); }, ccht::error_code::invalid_argument);
  EXPECT_NE(msg.find("not a regular file (a directory)"), std::string::npos) << msg;
  msg = error_of([&] { loader.load(good + std::string("\0junk", 5)); },
                 ccht::error_code::invalid_argument);
  EXPECT_NE(msg.find("NUL"), std::string::npos) << msg;
  EXPECT_EQ(c.stats().objects, 0u);
  EXPECT_EQ(loader.load(good).tensors().size(), 2u);  // a regular file still loads
}

// Case 15: a tensor larger than the budget was reported as "object 16140953701308211180".
TEST(HostileUse, TooLargeTensorIsNamed) {
  temp_dir d;
  std::string const p = d.file("big.safetensors");
  write_model(p, 3, 3 * page);
  cache_t c(2 * page, page);
  loader_t loader(c);
  std::string const msg = error_of([&] { loader.load(p); }, ccht::error_code::invalid_size);
  EXPECT_NE(msg.find("tensor 'layers.0.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("raise the budget"), std::string::npos) << msg;
  EXPECT_EQ(c.stats().objects, 0u);
}

// Case 15: "the rest is pinned by other holders" was said when nothing was pinned.
TEST(HostileUse, NoSpaceSaysWhatIsInTheWay) {
  temp_dir d;
  std::string const p = d.file("m.safetensors");
  write_model(p, 6, 2 * page);  // 12 pages
  {
    cache_t c(8 * page, page);
    loader_t loader(c);
    std::string const msg = error_of([&] { loader.load(p); }, ccht::error_code::out_of_memory);
    EXPECT_EQ(msg.find("pinned by other holders"), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs 12 pages"), std::string::npos) << msg;
    EXPECT_EQ(c.stats().pages_pinned, 0u);
  }
  cache_t c(16 * page, page);
  key_type const k = 77;
  load_object(c, k, 10 * page);  // another holder pins 10 of 16 pages
  loader_t loader(c);
  std::string const msg = error_of([&] { loader.load(p); }, ccht::error_code::out_of_memory);
  EXPECT_NE(msg.find("10 of the budget's 16 pages are pinned by other holders"), std::string::npos)
      << msg;
  EXPECT_EQ(c.stats().pages_pinned, 10u);
  c.release({&k, 1});
}

// Batches that name an object twice: publish and abandon used to take the second for a second
// filler (abandon then gave back two pins for one).
TEST(HostileUse, PublishOrAbandonOfAKeyTwiceChangesNothing) {
  cache_t c(8 * page, page);
  key_type const k = 3;
  object_request const r{k, 2 * page};
  object_lease l;
  c.acquire({&r, 1}, {&l, 1});
  ASSERT_EQ(l.status, object_status::fill);
  key_type const twice[2] = {k, k};
  EXPECT_THROW(c.publish(twice), ccht::error);
  EXPECT_THROW(c.abandon(twice), ccht::error);
  EXPECT_EQ(c.stats().objects_filling, 1u);
  c.abandon({&k, 1});
  auto const s = c.stats();
  EXPECT_EQ(s.pages_pinned, 0u);
  EXPECT_EQ(s.objects, 0u);  // nothing resident: forgotten
}

// Case 12, in C++: a timeout near milliseconds::max() overflowed now() + timeout into the past,
// so wait_ready() returned false at once while the fill was still going on.
TEST(HostileUse, WaitReadyWithAHugeTimeoutWaitsForThePublish) {
  cache_t c(8 * page, page);
  key_type const k = 4;
  object_request const r{k, page};
  object_lease l;
  c.acquire({&r, 1}, {&l, 1});
  ASSERT_EQ(l.status, object_status::fill);
  std::thread filler([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    c.publish({&k, 1});
  });
  EXPECT_TRUE(c.wait_ready({&k, 1}, std::chrono::milliseconds::max()));
  EXPECT_EQ(c.stats().objects_filling, 0u);
  filler.join();
  c.release({&k, 1});
}

}  // namespace
