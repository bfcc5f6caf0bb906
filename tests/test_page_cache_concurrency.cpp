// Pin safety of ccht::page_cache under concurrency (CPU backend, host threads; also built under
// ThreadSanitizer). Every page is filled with a pattern derived from its key; every access checks
// it. A filler writes garbage first and the pattern in slow steps, so a reader that got a page
// before its publish, or a page that changed while pinned (evicted, erased or handed to another
// key), shows up as a wrong byte.
#include <ccht/cache/page_cache.hpp>

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace {

using ccht::key_type;
using ccht::page_id;
using ccht::page_result;
using ccht::page_status;

unsigned char pattern_byte(key_type k, std::size_t j) {
  std::uint64_t const h = (k + 1) * 0xD1B54A32D192ED03ull;
  return static_cast<unsigned char>((h >> (8 * (j % 8))) ^ (j / 8));
}

template <class Policy>
void pin_safety_run(std::uint64_t seed) {
  constexpr std::size_t pages = 48, page_bytes = 192, universe = 160;
  int const threads = 4;
  int const ops = 6000 / ccht_test::work_scale;
  ccht::page_cache<ccht::cpu_backend, Policy> pc(pages * page_bytes, page_bytes,
                                                  {.cpu_threads = 1});
  std::atomic<int> bad_bytes{0}, bad_erase{0}, bad_status{0};
  std::atomic<std::uint64_t> hits{0}, fills{0};

  auto check = [&](page_id p, key_type k) {
    std::byte const* b = pc.page_data(p);
    for (std::size_t j = 0; j < page_bytes; ++j) {
      if (static_cast<unsigned char>(b[j]) != pattern_byte(k, j)) {
        bad_bytes.fetch_add(1);
        return;
      }
    }
  };

  auto worker = [&](int id) {
    std::mt19937_64 rng(seed * 131 + id);
    std::vector<std::pair<key_type, page_id>> held;
    auto release_one = [&](std::size_t i) {
      auto [k, p] = held[i];
      check(p, k);  // unchanged while pinned
      if (rng() % 2) {
        pc.release(std::span<key_type const>(&k, 1));
      } else {
        pc.release_pages(std::span<page_id const>(&p, 1));
      }
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    };
    for (int op = 0; op < ops; ++op) {
      key_type k = 1 + rng() % universe;
      unsigned const what = rng() % 10;
      if (held.size() >= 6 || (what == 0 && !held.empty())) {
        release_one(rng() % held.size());
        continue;
      }
      if (what <= 4) {  // acquire
        page_id p;
        page_status s;
        key_type ek[1];
        page_id ep[1];
        pc.acquire(std::span<key_type const>(&k, 1), std::span(&p, 1), std::span(&s, 1), ek, ep);
        if (s == page_status::hit) {
          check(p, k);
          held.emplace_back(k, p);
          hits.fetch_add(1, std::memory_order_relaxed);
        } else if (s == page_status::fill) {
          std::byte* b = pc.page_data(p);
          std::memset(b, 0xAA, page_bytes);  // garbage a premature reader would see
          for (std::size_t j = 0; j < page_bytes; ++j) {
            b[j] = static_cast<std::byte>(pattern_byte(k, j));
            if (j % 64 == 63) { std::this_thread::yield(); }
          }
          fills.fetch_add(1, std::memory_order_relaxed);
          if (rng() % 8 == 0) {
            pc.abandon(std::span<key_type const>(&k, 1));
          } else {
            pc.publish(std::span<key_type const>(&k, 1));
            held.emplace_back(k, p);
          }
        } else if (s != page_status::pending && s != page_status::no_space) {
          bad_status.fetch_add(1);
        }
      } else if (what <= 6) {  // lookup, or a prefix of three keys
        if (what == 5) {
          page_id p;
          page_status s;
          pc.lookup(std::span<key_type const>(&k, 1), std::span(&p, 1), std::span(&s, 1));
          if (s == page_status::hit) {
            check(p, k);
            held.emplace_back(k, p);
          } else if (s != page_status::miss && s != page_status::pending) {
            bad_status.fetch_add(1);
          }
        } else {
          key_type chain[3] = {k, k % universe + 1, (k + 1) % universe + 1};
          page_id got[3];
          std::size_t const n = pc.match_prefix(chain, got);
          for (std::size_t i = 0; i < n; ++i) {
            check(got[i], chain[i]);
            held.emplace_back(chain[i], got[i]);
          }
        }
      } else {  // erase: never succeeds on a page this thread holds
        bool mine = false;
        for (auto& h : held) { mine |= h.first == k; }
        page_result r;
        std::size_t const n = pc.erase(std::span<key_type const>(&k, 1), std::span(&r, 1));
        if (mine && (n != 0 || r == page_result::ok)) { bad_erase.fetch_add(1); }
      }
    }
    while (!held.empty()) { release_one(held.size() - 1); }
  };

  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) { pool.emplace_back(worker, t); }
  for (auto& t : pool) { t.join(); }

  EXPECT_EQ(bad_bytes.load(), 0) << "a page changed while pinned, or was read before its publish";
  EXPECT_EQ(bad_erase.load(), 0) << "erase removed a pinned page";
  EXPECT_EQ(bad_status.load(), 0);
  EXPECT_GT(hits.load(), 0u);
  EXPECT_GT(fills.load(), 0u);

  // Quiescent: nothing pinned or filling, and every resident key's page holds its pattern.
  auto const s = pc.stats();
  EXPECT_EQ(s.pages_pinned, 0u);
  EXPECT_EQ(s.pages_filling, 0u);
  EXPECT_EQ(s.pages_resident + s.pages_free, pages);
  std::vector<key_type> keys(pc.index().num_slots());
  std::vector<ccht::value_type> values(keys.size());
  std::size_t const n = pc.index().export_entries(keys, values);
  EXPECT_EQ(n, s.pages_resident);
  std::set<page_id> distinct;
  for (std::size_t i = 0; i < n; ++i) {
    page_id const p = ccht::detail::page_of(values[i]);
    EXPECT_FALSE(ccht::detail::is_filling(values[i]));
    distinct.insert(p);
    check(p, keys[i]);
  }
  EXPECT_EQ(distinct.size(), n) << "two keys share a page";
  EXPECT_EQ(bad_bytes.load(), 0);
}

TEST(Concurrency, PageCachePinSafetyDoubleLru) { pin_safety_run<ccht::double_lru>(1); }
TEST(Concurrency, PageCachePinSafetyCoarseLru) { pin_safety_run<ccht::coarse_lru>(2); }

/// Many threads acquiring one hot key at once: exactly one fill, the rest hits or pending, and
/// the pin count returns to zero.
TEST(Concurrency, PageCacheOneFillPerKey) {
  ccht::page_cache<ccht::cpu_backend> pc(32 * 64, 64, {.cpu_threads = 1});
  for (key_type round = 1; round <= 50 / ccht_test::work_scale; ++round) {
    std::atomic<int> fills{0}, bad{0};
    std::atomic<bool> published{false};
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) {
      ts.emplace_back([&, t] {
        key_type k = round;
        for (int i = 0; i < 20; ++i) {
          page_id p;
          page_status s;
          key_type ek[1];
          page_id ep[1];
          pc.acquire(std::span<key_type const>(&k, 1), std::span(&p, 1), std::span(&s, 1), ek, ep);
          if (s == page_status::fill) {
            fills.fetch_add(1);
            std::memset(pc.page_data(p), static_cast<int>(round), 64);
            published.store(true);  // before the publish: a hit must already see it
            pc.publish(std::span<key_type const>(&k, 1));
            pc.release(std::span<key_type const>(&k, 1));
          } else if (s == page_status::hit) {
            if (!published.load() || static_cast<unsigned char>(pc.page_data(p)[63]) != round) {
              bad.fetch_add(1);
            }
            pc.release(std::span<key_type const>(&k, 1));
          } else if (s != page_status::pending) {
            bad.fetch_add(1);
          }
          (void)t;
        }
      });
    }
    for (auto& t : ts) { t.join(); }
    EXPECT_EQ(fills.load(), 1) << "round " << round;
    EXPECT_EQ(bad.load(), 0) << "round " << round;
  }
  EXPECT_EQ(pc.stats().pages_pinned, 0u);
}

}  // namespace
