// Three tiers: ccht::tiered_page_cache over a ccht::redis_tier on a real redis-server (CPU
// backend). Pages go down and come back byte for byte; a second process shares them by prefix;
// a dead or corrupting server never costs a local page; the KV replay survives a server killed
// and restarted under it. Also the weight cache's loads through the remote tier.
#include "redis_server.hpp"

#include <ccht/cache/redis_tier.hpp>
#include <ccht/cache/tiered_page_cache.hpp>

#if CCHT_TEST_HAVE_SIM
#include "sim/kv_replay.hpp"
#include "sim/model_runtime.hpp"
#endif

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

namespace {

using namespace std::chrono_literals;
using ccht::key_type;
using ccht::page_id;
using ccht::page_status;
using ccht::test::redis_server;
using tiered = ccht::tiered_page_cache<ccht::cpu_backend>;

constexpr std::size_t page_bytes = 512;

void pattern(key_type k, std::byte* p) {
  for (std::size_t i = 0; i < page_bytes; ++i) { p[i] = std::byte((k * 131 + i * 7 + (k >> 8)) & 0xff); }
}
bool has_pattern(key_type k, std::byte const* p) {
  std::byte want[page_bytes];
  pattern(k, want);
  return std::memcmp(want, p, page_bytes) == 0;
}

ccht::redis_options remote_opts(std::string url, std::string prefix) {
  ccht::redis_options o;
  o.url = std::move(url);
  o.prefix = std::move(prefix);
  o.timeout = 500ms;
  o.backoff_min = 20ms;
  o.backoff_max = 100ms;
  return o;
}

/// Where each acquire of a batch was served from.
struct served {
  std::size_t upper = 0, lower = 0, remote = 0, filled = 0, bad = 0, other = 0;
};

/// Acquires @p keys in batches of @p batch: hits are checked against the pattern, fills are
/// written and published; everything is released.
served use(tiered& c, std::vector<key_type> const& keys, std::size_t batch) {
  served s;
  for (std::size_t b = 0; b < keys.size(); b += batch) {
    std::size_t const n = std::min(batch, keys.size() - b);
    std::span<key_type const> ks(keys.data() + b, n);
    std::vector<page_id> pages(n);
    std::vector<page_status> st(n);
    std::unique_ptr<bool[]> fl(new bool[n]), fr(new bool[n]);
    c.acquire(ks, pages, st, std::span<bool>(fl.get(), n), std::span<bool>(fr.get(), n));
    std::vector<key_type> fills, pinned;
    for (std::size_t i = 0; i < n; ++i) {
      if (st[i] == page_status::hit) {
        if (!has_pattern(ks[i], c.upper().page_data(pages[i]))) { ++s.bad; }
        (fr[i] ? s.remote : fl[i] ? s.lower : s.upper) += 1;
        pinned.push_back(ks[i]);
      } else if (st[i] == page_status::fill) {
        pattern(ks[i], c.upper().page_data(pages[i]));
        fills.push_back(ks[i]);
        pinned.push_back(ks[i]);
        ++s.filled;
      } else {
        ++s.other;
      }
    }
    if (!fills.empty()) { c.publish(fills); }
    if (!pinned.empty()) { c.release(pinned); }
  }
  return s;
}

std::vector<key_type> keys_from(key_type first, std::size_t n) {
  std::vector<key_type> k(n);
  for (std::size_t i = 0; i < n; ++i) { k[i] = first + i * 977; }
  return k;
}

class ThreeTiers : public ::testing::Test {
 protected:
  void SetUp() override { START_OR_SKIP(server_); }
  redis_server server_;
};

TEST_F(ThreeTiers, EvictedPagesComeBackFromTheRemoteTierByteForByte) {
  ccht::redis_tier remote(remote_opts(server_.url(), "3t:"));
  tiered c(16 * page_bytes, 32 * page_bytes, page_bytes);
  c.attach_remote(&remote);
  auto const keys = keys_from(1, 400);
  served const first = use(c, keys, 8);
  EXPECT_EQ(first.filled, 400u);
  EXPECT_EQ(first.bad, 0u);
  ASSERT_TRUE(remote.flush());
  auto const st = c.stats();
  EXPECT_GT(st.remote_writes, 300u);  // everything the 48 local pages could not hold
  EXPECT_EQ(st.remote_write_drops, 0u);
  served const second = use(c, keys, 8);  // nothing is lost: every page is somewhere
  EXPECT_EQ(second.bad, 0u);
  EXPECT_EQ(second.filled, 0u) << "remote errors: " << remote.last_error();
  EXPECT_EQ(second.upper + second.lower + second.remote, 400u);
  EXPECT_GT(second.remote, 300u);
  auto const st2 = c.stats();
  EXPECT_EQ(st2.remote_hits, second.remote);
  EXPECT_EQ(st2.remote.integrity_failures, 0u);
  EXPECT_EQ(st2.remote.errors, 0u);
}

TEST_F(ThreeTiers, ASecondProcessHitsThePagesTheFirstWrote) {
  auto const keys = keys_from(50'000, 120);
  pid_t const child = ::fork();
  if (child == 0) {  // the first node: computes the pages, writes them through, exits
    int rc = 1;
    try {
      ccht::redis_tier remote(remote_opts(server_.url(), "shared:"));
      tiered c(16 * page_bytes, 16 * page_bytes, page_bytes);
      c.attach_remote(&remote, ccht::remote_write::through);
      served const s = use(c, keys, 12);
      rc = (s.filled == keys.size() && remote.flush() && remote.stats().puts >= keys.size()) ? 0 : 3;
    } catch (...) {
      rc = 2;
    }
    ::_exit(rc);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the first process failed";
  // the second node: nothing local, every page from the remote tier
  ccht::redis_tier remote(remote_opts(server_.url(), "shared:"));
  tiered c(256 * page_bytes, 256 * page_bytes, page_bytes);
  c.attach_remote(&remote);
  served const s = use(c, keys, 12);
  EXPECT_EQ(s.remote, keys.size());
  EXPECT_EQ(s.bad, 0u);
  EXPECT_EQ(s.filled, 0u);
  // another prefix shares nothing
  ccht::redis_tier other(remote_opts(server_.url(), "other:"));
  tiered d(256 * page_bytes, 256 * page_bytes, page_bytes);
  d.attach_remote(&other);
  EXPECT_EQ(use(d, keys, 12).filled, keys.size());
}

TEST_F(ThreeTiers, CorruptRemotePagesAreRefilledByTheCaller) {
  ccht::redis_tier remote(remote_opts(server_.url(), "bad:"));
  tiered c(8 * page_bytes, 8 * page_bytes, page_bytes);
  c.attach_remote(&remote, ccht::remote_write::through);
  auto const keys = keys_from(7, 40);
  use(c, keys, 8);
  ASSERT_TRUE(remote.flush());
  redisContext* raw = server_.connect();
  for (std::size_t i = 0; i < 10; ++i) {  // flip one payload byte of ten values
    std::string const k = remote.stored_key(keys[i]);
    freeReplyObject(redisCommand(raw, "SETRANGE %s %d %b", k.c_str(),
                                 int(sizeof(ccht::remote_value_header) + 3), "\x5a", std::size_t{1}));
  }
  redisFree(raw);
  tiered fresh(64 * page_bytes, 64 * page_bytes, page_bytes);
  fresh.attach_remote(&remote);
  served const s = use(fresh, keys, 8);
  EXPECT_EQ(s.bad, 0u);  // never a wrong byte handed out
  EXPECT_EQ(s.filled, 10u);
  EXPECT_EQ(s.remote, 30u);
  EXPECT_EQ(remote.stats().integrity_failures, 10u);
}

TEST(ThreeTiersFaults, DeadServerCostsNoLocalPage) {
  redis_server server;  // never started
  auto o = remote_opts(server.url(), "dead:");
  o.connect_timeout = 50ms;
  ccht::redis_tier remote(o);
  tiered c(16 * page_bytes, 32 * page_bytes, page_bytes);
  c.attach_remote(&remote, ccht::remote_write::through);
  auto const keys = keys_from(3, 24);  // fits the local tiers (an LRU loop of 48 would not)
  served const a = use(c, keys, 8);
  served const b = use(c, keys, 8);
  EXPECT_EQ(a.filled, 24u);
  EXPECT_EQ(b.filled, 0u);
  EXPECT_EQ(b.bad, 0u);
  EXPECT_EQ(b.upper + b.lower, 24u);
  auto const st = c.stats();
  EXPECT_GT(st.remote.errors + st.remote.skipped, 0u);
  EXPECT_EQ(st.remote.hits, 0u);
}

#if CCHT_TEST_HAVE_SIM
TEST_F(ThreeTiers, KvReplaySurvivesAServerKilledAndRestartedMidRun) {
  auto const reqs = ccht::sim::synthetic_kv_trace(4000, 64, 11);
  ccht::sim::kv_replay_options o;
  o.pages = 64;
  o.host_pages = 128;
  o.page_bytes = 1024;
  auto ro = remote_opts(server_.url(), "kill:");
  ro.timeout = 200ms;
  ccht::redis_tier remote(ro);
  o.remote = &remote;
  ccht::sim::kv_replay_result r;
  std::atomic<bool> done{false};
  std::thread run([&] {
    r = ccht::sim::kv_replay(reqs, o);
    done = true;
  });
  std::this_thread::sleep_for(300ms);
  bool const killed_mid_run = !done;
  server_.stop(/*kill=*/true);
  std::this_thread::sleep_for(300ms);
  std::string const why = server_.start();
  run.join();
  ASSERT_TRUE(why.empty()) << why;
  EXPECT_EQ(r.check_failures, 0u);  // every hit's bytes were the key's
  EXPECT_EQ(r.invariant_failures, 0u) << r.invariant_message;
  EXPECT_EQ(r.page_hits + r.page_misses + r.no_space + r.pending, r.page_refs);
  EXPECT_GT(r.remote_hits, 0u);
  EXPECT_EQ(r.remote_counters.hit_bytes, r.remote_counters.hits * o.page_bytes);
  if (killed_mid_run) {
    EXPECT_GT(r.remote_counters.errors, 0u);
    EXPECT_GE(r.remote_counters.connects, 2u);  // it came back after the restart
  } else {
    std::printf("note: the replay ended before the kill; the fault path was not exercised\n");
  }
}

TEST_F(ThreeTiers, WeightsLoadFromTheRemoteTierOnAnotherCache) {
  // files the real safetensors package wrote (tests/weights/write_fixtures.py)
  std::filesystem::path const dir = CCHT_ST_FIXTURES_DIR;
  std::vector<std::string> files;
  for (char const* f : {"small_model.safetensors", "all_dtypes.safetensors"}) {
    if (!std::filesystem::exists(dir / f)) {
      GTEST_SKIP() << "no safetensors fixtures in " << dir << " (tools/dev.sh setup makes .venv)";
    }
    files.push_back((dir / f).string());
  }
  ccht::redis_tier remote(remote_opts(server_.url(), "w:"));
  ccht::sim::weights_options o;
  o.files = files;
  o.budget = std::size_t{2} << 20;
  o.page_bytes = 4096;
  o.invocations = 6;
  o.remote = &remote;
  o.huge = ccht::huge_pages::off;
  auto const first = ccht::sim::run_weights(o);  // a cache of its own: reads files, writes chunks
  EXPECT_EQ(first.verify_failures, 0u);
  EXPECT_GT(first.remote_writes, 0u);
  EXPECT_EQ(first.remote_pages, 0u);
  auto const second = ccht::sim::run_weights(o);  // a new cache: the chunks come from Redis
  EXPECT_EQ(second.verify_failures, 0u);  // compared with the files, tensor by tensor
  EXPECT_GT(second.remote_pages, 0u);
  EXPECT_EQ(second.bytes_loaded, 0u);
  EXPECT_EQ(second.remote_loads, second.misses);
  EXPECT_EQ(second.remote.integrity_failures, 0u);
}
#endif

}  // namespace
