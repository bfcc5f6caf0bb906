// ccht::tiered_page_cache (cache/tiered_page_cache.hpp) on the CPU backend: both tiers in host
// memory, as on CI. Every page a caller gets, from either tier, must hold its key's pattern.
#include <ccht/cache/tiered_page_cache.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace {

using ccht::key_type;
using ccht::page_id;
using ccht::page_status;
using tiered = ccht::tiered_page_cache<ccht::cpu_backend>;

constexpr std::size_t page_bytes = 96;

unsigned char pattern_byte(key_type k, std::size_t j) {
  return static_cast<unsigned char>(((k + 3) * 0x9E3779B97F4A7C15ull >> (8 * (j % 8))) + j);
}
void write(std::byte* p, key_type k) {
  for (std::size_t j = 0; j < page_bytes; ++j) { p[j] = std::byte{pattern_byte(k, j)}; }
}
bool holds(std::byte const* p, key_type k) {
  for (std::size_t j = 0; j < page_bytes; ++j) {
    if (static_cast<unsigned char>(p[j]) != pattern_byte(k, j)) { return false; }
  }
  return true;
}

/// Acquires @p keys as one request, fills what is missing, checks every hit, releases all.
struct request_result {
  std::size_t upper_hits = 0, lower_hits = 0, fills = 0, bad = 0;
};
request_result serve(tiered& c, std::vector<key_type> const& keys) {
  std::size_t const n = keys.size();
  std::vector<page_id> pages(n);
  std::vector<page_status> st(n);
  std::unique_ptr<bool[]> from(new bool[n]);
  c.acquire(keys, pages, st, std::span<bool>(from.get(), n));
  request_result r;
  std::vector<key_type> filled;
  for (std::size_t i = 0; i < n; ++i) {
    if (st[i] == page_status::hit) {
      (from[i] ? r.lower_hits : r.upper_hits) += 1;
      r.bad += !holds(c.upper().page_data(pages[i]), keys[i]);
    } else if (st[i] == page_status::fill) {
      ++r.fills;
      write(c.upper().page_data(pages[i]), keys[i]);
      filled.push_back(keys[i]);
    } else {
      ++r.bad;  // a serial run has room: no pending, no no_space
    }
  }
  c.publish(filled);
  c.release(keys);
  return r;
}

TEST(TieredPageCache, VictimsSpillDownAndComeBackWithTheirBytes) {
  tiered c(16 * page_bytes, 128 * page_bytes, page_bytes);
  std::vector<key_type> first;
  for (key_type k = 1; k <= 40; ++k) {
    auto r = serve(c, {k});
    ASSERT_EQ(r.fills, 1u);
    ASSERT_EQ(r.bad, 0u);
  }
  auto s = c.stats();
  EXPECT_EQ(s.upper.evictions, 40u - 16u);
  EXPECT_EQ(s.spills, 40u - 16u);
  EXPECT_EQ(s.spill_failures, 0u);
  EXPECT_EQ(s.lower.pages_resident, 40u - 16u);
  // The oldest keys left the upper tier; they come back from the host tier, bytes intact.
  auto r = serve(c, {1, 2, 3, 4});
  EXPECT_EQ(r.lower_hits, 4u);
  EXPECT_EQ(r.fills, 0u);
  EXPECT_EQ(r.bad, 0u);
  EXPECT_EQ(c.stats().lower_hits, 4u);
  EXPECT_EQ(c.stats().upper.pages_pinned, 0u);
  EXPECT_EQ(c.stats().lower.pages_pinned, 0u);
}

TEST(TieredPageCache, RandomRequestsServeTheRightBytesAndBeatOneTier) {
  // A zipf-like stream of 1-8 key requests over 400 keys: the tiered cache (32 + 256 pages)
  // must hit at least as often as the upper tier alone would, with every byte right.
  std::mt19937_64 rng(5);
  std::vector<double> w(400);
  for (std::size_t i = 0; i < w.size(); ++i) { w[i] = 1.0 / (1.0 + double(i)); }
  std::discrete_distribution<key_type> zipf(w.begin(), w.end());
  tiered two(32 * page_bytes, 256 * page_bytes, page_bytes);
  tiered one(32 * page_bytes, 1 * page_bytes, page_bytes);  // a one-page host tier: nearly none
  std::size_t two_hits = 0, one_hits = 0, refs = 0, bad = 0;
  for (int q = 0; q < 3000; ++q) {
    std::set<key_type> uniq;
    std::size_t const len = 1 + rng() % 8;
    while (uniq.size() < len) { uniq.insert(1 + zipf(rng)); }
    std::vector<key_type> keys(uniq.begin(), uniq.end());
    auto a = serve(two, keys);
    auto b = serve(one, keys);
    two_hits += a.upper_hits + a.lower_hits;
    one_hits += b.upper_hits;
    bad += a.bad + b.bad;
    refs += keys.size();
  }
  std::printf("tiered hit ratio %.3f, upper tier alone %.3f\n", double(two_hits) / double(refs),
              double(one_hits) / double(refs));
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(two_hits, one_hits + refs / 10) << "the host tier should add at least 10 points";
  auto s = two.stats();
  EXPECT_EQ(s.upper.pages_pinned + s.lower.pages_pinned, 0u);
  EXPECT_EQ(s.upper.pages_resident + s.upper.pages_free, 32u);
  EXPECT_EQ(s.lower.pages_resident + s.lower.pages_free, 256u);
  EXPECT_GT(s.lower_hits, 0u);
}

}  // namespace
