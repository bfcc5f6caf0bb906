// ccht::page_cache (cache/page_cache.hpp), backend-neutral: compiled into ccht_tests_cpu and
// ccht_tests_cuda (CCHT_TEST_BACKEND). Serial runs are checked against models written here: a
// resident-set model driven by what the cache reports (every hit, fill and eviction must be
// consistent with it), and an exact LRU over unpinned pages for the hit ratio. The threaded pin-
// safety run is CPU-only (host threads) and runs under ThreadSanitizer too.
#include <ccht/cache/page_cache.hpp>

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#ifndef CCHT_TEST_BACKEND
#error "CCHT_TEST_BACKEND must name the backend under test"
#endif

namespace {

using Backend = CCHT_TEST_BACKEND;
using ccht::key_type;
using ccht::page_id;
using ccht::page_result;
using ccht::page_status;
using ccht_test::buffer;
using ccht_test::host_array;
using cache = ccht::page_cache<Backend>;

class PageCache : public ccht_test::backend_test<Backend> {};

/// Byte j of the page that holds key k (never the same page image for two keys).
unsigned char pattern_byte(key_type k, std::size_t j) {
  std::uint64_t const h = (k + 1) * 0x9E3779B97F4A7C15ull;
  return static_cast<unsigned char>((h >> (8 * (j % 8))) + j / 8);
}
std::vector<unsigned char> pattern(key_type k, std::size_t bytes) {
  std::vector<unsigned char> v(bytes);
  for (std::size_t j = 0; j < bytes; ++j) { v[j] = pattern_byte(k, j); }
  return v;
}

/// Host-side driver: uploads inputs, runs one synchronous call, downloads outputs.
template <class Cache>
struct driver {
  Cache& pc;
  struct acquired {
    std::vector<page_id> pages;
    std::vector<page_status> status;
    std::vector<std::pair<key_type, page_id>> evicted;
  };

  acquired acquire(std::vector<key_type> const& keys) {
    std::size_t const n = keys.size();
    auto k = buffer<Backend, key_type>::from_host(keys);
    buffer<Backend, page_id> p(n), ep(n);
    buffer<Backend, page_status> s(n);
    buffer<Backend, key_type> ek(n);
    std::size_t const ne = pc.acquire(k.cspan(), p.span(), s.span(), ek.span(), ep.span());
    acquired a;
    auto hp = p.to_host(), hep = ep.to_host(n);
    auto hs = s.to_host();
    auto hek = ek.to_host(n);
    a.pages.assign(hp.begin(), hp.end());
    a.status.assign(hs.begin(), hs.end());
    for (std::size_t i = 0; i < ne; ++i) { a.evicted.emplace_back(hek[i], hep[i]); }
    return a;
  }
  acquired lookup(std::vector<key_type> const& keys) {
    std::size_t const n = keys.size();
    auto k = buffer<Backend, key_type>::from_host(keys);
    buffer<Backend, page_id> p(n);
    buffer<Backend, page_status> s(n);
    pc.lookup(k.cspan(), p.span(), s.span());
    acquired a;
    auto hp = p.to_host();
    auto hs = s.to_host();
    a.pages.assign(hp.begin(), hp.end());
    a.status.assign(hs.begin(), hs.end());
    return a;
  }
  std::pair<std::size_t, std::vector<page_id>> match_prefix(std::vector<key_type> const& keys) {
    auto k = buffer<Backend, key_type>::from_host(keys);
    buffer<Backend, page_id> p(keys.size());
    std::size_t const len = pc.match_prefix(k.cspan(), p.span());
    auto hp = p.to_host(len);
    return {len, std::vector<page_id>(hp.begin(), hp.end())};
  }
  void publish(std::vector<key_type> const& keys) {
    auto k = buffer<Backend, key_type>::from_host(keys);
    pc.publish(k.cspan());
  }
  void abandon(std::vector<key_type> const& keys) {
    auto k = buffer<Backend, key_type>::from_host(keys);
    pc.abandon(k.cspan());
  }
  void release(std::vector<key_type> const& keys) {
    auto k = buffer<Backend, key_type>::from_host(keys);
    pc.release(k.cspan());
  }
  void release_pages(std::vector<page_id> const& pages) {
    auto p = buffer<Backend, page_id>::from_host(pages);
    pc.release_pages(p.cspan());
  }
  std::vector<page_result> release_async(std::vector<key_type> const& keys) {
    auto k = buffer<Backend, key_type>::from_host(keys);
    buffer<Backend, page_result> r(keys.size());
    pc.release_async(k.cspan(), r.span());
    Backend::synchronize();
    auto h = r.to_host();
    return {h.begin(), h.end()};
  }
  std::pair<std::size_t, std::vector<page_result>> erase(std::vector<key_type> const& keys) {
    auto k = buffer<Backend, key_type>::from_host(keys);
    buffer<Backend, page_result> r(keys.size());
    std::size_t const n = pc.erase(k.cspan(), r.span());
    auto h = r.to_host();
    return {n, {h.begin(), h.end()}};
  }
  void write(page_id p, key_type k) {
    auto const bytes = pattern(k, pc.page_bytes());
    Backend::copy_from_host(pc.page_data(p), bytes.data(), bytes.size());
  }
  bool holds(page_id p, key_type k) {
    std::vector<unsigned char> got(pc.page_bytes());
    Backend::copy_to_host(got.data(), pc.page_data(p), got.size());
    return got == pattern(k, pc.page_bytes());
  }
};

template <class Cache>
driver<Cache> drive(Cache& pc) {
  return driver<Cache>{pc};
}

std::vector<key_type> iota_keys(key_type first, std::size_t n) {
  std::vector<key_type> v(n);
  for (std::size_t i = 0; i < n; ++i) { v[i] = first + i; }
  return v;
}

TEST_F(PageCache, BadGeometryIsAnErrorAndAllocatesNothing) {
  EXPECT_CCHT_ERROR(cache(0, 4096), ccht::error_code::invalid_size);
  EXPECT_CCHT_ERROR(cache(4096, 0), ccht::error_code::invalid_size);
  EXPECT_CCHT_ERROR(cache(10000, 4096), ccht::error_code::invalid_size);
  EXPECT_CCHT_ERROR(cache(std::size_t{1} << 32, 1), ccht::error_code::invalid_size);
  EXPECT_CCHT_ERROR(cache(std::size_t{1} << 62, std::size_t{1} << 40), ccht::error_code::out_of_memory);
  for (double bad : {0.0, -0.5, 1.01, std::nan("")}) {
    EXPECT_CCHT_ERROR(cache(4096, 512, {.table_ratio = bad}), ccht::error_code::invalid_argument);
  }
  cache ok(8 * 512, 512, {.table_ratio = 1.0});
  EXPECT_EQ(ok.num_pages(), 8u);
  EXPECT_EQ(ok.index().capacity(), 8u);
  cache dflt(900 * 64, 64);
  EXPECT_GE(dflt.index().num_slots(), 1000u);  // 900 pages at 0.9: at least 1000 slots
  EXPECT_EQ(dflt.index().capacity(), 900u);
}

TEST_F(PageCache, FillPublishHitRelease) {
  cache pc(16 * 256, 256);
  auto d = drive(pc);
  auto keys = iota_keys(100, 5);
  auto a = d.acquire(keys);
  std::set<page_id> pages;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(a.status[i], page_status::fill);
    ASSERT_LT(a.pages[i], 16u);
    pages.insert(a.pages[i]);
    d.write(a.pages[i], keys[i]);
  }
  EXPECT_EQ(pages.size(), keys.size()) << "a page was handed out twice";
  EXPECT_TRUE(a.evicted.empty());
  auto s = pc.stats();
  EXPECT_EQ(s.pages_filling, 5u);
  EXPECT_EQ(s.pages_pinned, 5u);
  EXPECT_EQ(s.pages_resident, 5u);
  EXPECT_EQ(s.pages_free, 11u);
  d.publish(keys);
  d.release(keys);
  s = pc.stats();
  EXPECT_EQ(s.pages_filling, 0u);
  EXPECT_EQ(s.pages_pinned, 0u);
  auto h = d.acquire(keys);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(h.status[i], page_status::hit);
    EXPECT_EQ(h.pages[i], a.pages[i]);
    EXPECT_TRUE(d.holds(h.pages[i], keys[i]));
  }
  auto l = d.lookup({keys[0], 999});
  EXPECT_EQ(l.status[0], page_status::hit);
  EXPECT_EQ(l.status[1], page_status::miss);
  EXPECT_EQ(l.pages[1], ccht::no_page);
  EXPECT_EQ(pc.stats().pages_pinned, 5u);  // two pins on keys[0] count as one pinned page
  d.release(keys);
  d.release_pages({l.pages[0]});  // the lookup's pin, by page id
  s = pc.stats();
  EXPECT_EQ(s.pages_pinned, 0u);
  EXPECT_EQ(s.hits, 6u);
  EXPECT_EQ(s.fills, 5u);
  EXPECT_EQ(s.misses, 6u);  // 5 fills + 1 lookup miss
  EXPECT_EQ(s.publishes, 5u);
  EXPECT_EQ(s.releases, 11u);  // 5 after the fills, 5 after the hits, 1 by page id
  EXPECT_EQ(s.bytes_resident, 5u * 256u);
}

TEST_F(PageCache, PendingUntilPublishedNeverHalfFilled) {
  cache pc(8 * 128, 128);
  auto d = drive(pc);
  auto a = d.acquire({7});
  ASSERT_EQ(a.status[0], page_status::fill);
  // Another caller sees the fill in progress: no page, no pin.
  auto b = d.acquire({7});
  EXPECT_EQ(b.status[0], page_status::pending);
  EXPECT_EQ(b.pages[0], ccht::no_page);
  EXPECT_EQ(d.lookup({7}).status[0], page_status::pending);
  EXPECT_EQ(d.match_prefix({7, 8}).first, 0u);
  auto s = pc.stats();
  EXPECT_EQ(s.pending, 3u);  // the acquire, the lookup, and the prefix walk's first key
  EXPECT_EQ(s.pages_pinned, 1u);
  // The filler cannot release a page it has not published or abandoned.
  EXPECT_CCHT_ERROR(d.release({7}), ccht::error_code::invalid_argument);
  d.write(a.pages[0], 7);
  d.publish({7});
  EXPECT_CCHT_ERROR(d.publish({7}), ccht::error_code::invalid_argument);  // twice
  auto c = d.lookup({7});
  EXPECT_EQ(c.status[0], page_status::hit);
  EXPECT_TRUE(d.holds(c.pages[0], 7));
  d.release({7, 7});
  EXPECT_EQ(pc.stats().pages_pinned, 0u);
}

TEST_F(PageCache, AbandonFreesThePageAndNoReaderSawIt) {
  cache pc(4 * 64, 64);
  auto d = drive(pc);
  auto a = d.acquire({1, 2});
  d.abandon({1});
  EXPECT_EQ(d.lookup({1}).status[0], page_status::miss);
  auto s = pc.stats();
  EXPECT_EQ(s.pages_resident, 1u);
  EXPECT_EQ(s.pages_free, 3u);
  EXPECT_EQ(s.pages_pinned, 1u);
  EXPECT_EQ(s.abandons, 1u);
  EXPECT_CCHT_ERROR(d.abandon({1}), ccht::error_code::invalid_argument);  // gone
  d.publish({2});
  EXPECT_CCHT_ERROR(d.abandon({2}), ccht::error_code::invalid_argument);  // published
  d.release({2});
  // The freed page goes to the next fill; all four pages are usable.
  auto b = d.acquire({3, 4, 5});
  std::set<page_id> all{a.pages[1]};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(b.status[i], page_status::fill);
    all.insert(b.pages[i]);
  }
  EXPECT_EQ(all.size(), 4u);
  EXPECT_TRUE(b.evicted.empty());
}

TEST_F(PageCache, BadReleasesAreErrorsThatChangeNothing) {
  cache pc(8 * 64, 64);
  auto d = drive(pc);
  auto a = d.acquire({10, 11});
  d.publish({10, 11});
  d.release({10});
  auto const before = pc.stats();
  EXPECT_CCHT_ERROR(d.release({10}), ccht::error_code::invalid_argument);     // double release
  EXPECT_CCHT_ERROR(d.release({12345}), ccht::error_code::invalid_argument);  // unknown key
  EXPECT_CCHT_ERROR(d.release_pages({a.pages[0]}), ccht::error_code::invalid_argument);  // no pin
  EXPECT_CCHT_ERROR(d.release_pages({7}), ccht::error_code::invalid_argument);    // free page
  EXPECT_CCHT_ERROR(d.release_pages({800}), ccht::error_code::invalid_argument);  // out of range
  EXPECT_CCHT_ERROR(d.publish({12345}), ccht::error_code::invalid_argument);
  auto const after = pc.stats();
  EXPECT_EQ(after.pages_pinned, before.pages_pinned);
  EXPECT_EQ(after.releases, before.releases);
  EXPECT_EQ(after.pages_resident, before.pages_resident);
  // A batch with one bad element: the message names it, the good ones are applied.
  try {
    d.release({11, 10});
    ADD_FAILURE() << "no error";
  } catch (ccht::error const& e) {
    EXPECT_EQ(e.code(), ccht::error_code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("element 1 (key 10) is not_pinned"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(pc.stats().pages_pinned, 0u);
  // The async form reports per element and throws nothing.
  auto r = d.release_async({10, 11, 99});
  EXPECT_EQ(r[0], page_result::not_pinned);
  EXPECT_EQ(r[1], page_result::not_pinned);
  EXPECT_EQ(r[2], page_result::unknown_key);
  // Reserved keys fail the batch before anything happens.
  EXPECT_CCHT_ERROR(d.acquire({20, ccht::empty_key}), ccht::error_code::reserved_key);
  EXPECT_EQ(d.lookup({20}).status[0], page_status::miss);
  EXPECT_CCHT_ERROR(d.release({ccht::claimed_key}), ccht::error_code::reserved_key);
}

TEST_F(PageCache, EraseRefusesPinnedPages) {
  cache pc(8 * 64, 64);
  auto d = drive(pc);
  d.acquire({1, 2, 3});
  d.publish({1, 2});
  d.release({2});
  auto [n, r] = d.erase({1, 2, 3, 4});
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(r[0], page_result::pinned);
  EXPECT_EQ(r[1], page_result::ok);
  EXPECT_EQ(r[2], page_result::filling);
  EXPECT_EQ(r[3], page_result::unknown_key);  // absent: not an error
  EXPECT_EQ(d.lookup({2}).status[0], page_status::miss);
  auto s = pc.stats();
  EXPECT_EQ(s.pages_resident, 2u);
  EXPECT_EQ(s.erases, 1u);
  d.release({1});
  d.abandon({3});
  EXPECT_EQ(d.erase({1}).first, 1u);
  EXPECT_EQ(pc.stats().pages_free, 8u);
}

TEST_F(PageCache, AllPinnedMeansNoSpaceNothingEvictedThenRecovers) {
  std::size_t const pages = 64;
  cache pc(pages * 128, 128);
  auto d = drive(pc);
  auto held = iota_keys(1, pages);
  auto a = d.acquire(held);
  for (std::size_t i = 0; i < pages; ++i) {
    ASSERT_EQ(a.status[i], page_status::fill) << i;
    d.write(a.pages[i], held[i]);
  }
  d.publish(held);
  auto more = iota_keys(1000, 50);
  auto b = d.acquire(more);
  for (auto s : b.status) { EXPECT_EQ(s, page_status::no_space); }
  EXPECT_TRUE(b.evicted.empty());
  auto s = pc.stats();
  EXPECT_EQ(s.no_space, 50u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.pages_resident, pages);
  EXPECT_EQ(d.lookup(more).status[0], page_status::miss) << "a refused key left an entry";
  for (std::size_t i = 0; i < pages; ++i) { ASSERT_TRUE(d.holds(a.pages[i], held[i])) << i; }
  // Release half: new keys now evict exactly those, reported with their bytes intact.
  std::vector<key_type> half(held.begin(), held.begin() + pages / 2);
  d.release(half);
  auto c = d.acquire(std::vector<key_type>(more.begin(), more.begin() + 20));
  std::set<key_type> released(half.begin(), half.end());
  std::size_t fills = 0;
  for (auto st : c.status) { fills += st == page_status::fill; }
  EXPECT_EQ(fills, c.evicted.size());
  EXPECT_GE(fills, 1u);
  for (auto [k, p] : c.evicted) {
    EXPECT_TRUE(released.count(k)) << "evicted " << k << ", which was pinned";
    EXPECT_TRUE(d.holds(p, k)) << "the victim's bytes were not intact";
  }
}

TEST_F(PageCache, EvictionsHandTheVictimsPageWithItsBytes) {
  std::size_t const pages = 128;
  cache pc(pages * 64, 64);
  auto d = drive(pc);
  std::map<key_type, page_id> resident;
  for (key_type k = 1; k <= 600; ++k) {
    auto a = d.acquire({k});
    ASSERT_EQ(a.status[0], page_status::fill);
    for (auto [ek, ep] : a.evicted) {
      ASSERT_EQ(ep, a.pages[0]) << "the new key must own the victim's page";
      ASSERT_TRUE(resident.count(ek)) << ek;
      EXPECT_EQ(resident[ek], ep);
      EXPECT_TRUE(d.holds(ep, ek)) << "victim " << ek << "'s bytes changed before the fill";
      resident.erase(ek);
    }
    d.write(a.pages[0], k);
    d.publish({k});
    d.release({k});
    resident[k] = a.pages[0];
    ASSERT_LE(resident.size(), pages);
  }
  EXPECT_EQ(pc.stats().evictions, 600u - pages);
}

TEST_F(PageCache, AsyncVariantsReportThroughBackendWords) {
  cache pc(4 * 64, 64);
  auto d = drive(pc);
  std::vector<key_type> const keys{1, 2, 3, 4, 5, 6};
  auto k = buffer<Backend, key_type>::from_host(keys);
  buffer<Backend, page_id> p(6), ep(6);
  buffer<Backend, page_status> s(6);
  buffer<Backend, key_type> ek(6);
  buffer<Backend, std::size_t> word(1);
  // Four fills, published and released; then two more keys evict two of them.
  pc.acquire_async(k.cspan(4), p.span(4), s.span(4), ek.span(4), ep.span(4), word.data());
  pc.publish_async(k.cspan(4), {});
  pc.release_async(k.cspan(4), {});
  Backend::synchronize();
  EXPECT_EQ(word.to_host()[0], 0u);
  pc.acquire_async(k.cspan().subspan(4), p.span(2), s.span(2), ek.span(2), ep.span(2),
                   word.data());
  Backend::synchronize();
  EXPECT_EQ(word.to_host()[0], 2u);
  d.publish({5, 6});
  d.release({5, 6});
  // The prefix run of the chain 5, 6, (evicted) ...
  std::vector<key_type> chain{5, 6, 1, 2, 3, 4};
  auto c = buffer<Backend, key_type>::from_host(chain);
  buffer<Backend, page_id> cp(6);
  pc.match_prefix_async(c.cspan(), cp.span(), word.data());
  Backend::synchronize();
  std::size_t const run = word.to_host()[0];
  EXPECT_GE(run, 2u);
  EXPECT_LE(run, 4u);
  d.release(std::vector<key_type>(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(run)));
  buffer<Backend, page_result> r(6);
  pc.erase_async(c.cspan(), r.span(), word.data());
  Backend::synchronize();
  EXPECT_EQ(word.to_host()[0], 4u);  // the four resident keys
  EXPECT_EQ(pc.stats().pages_free, 4u);
  EXPECT_CCHT_ERROR(pc.acquire_async(k.cspan(), p.span(), s.span(), ek.span(), ep.span(), nullptr),
                    ccht::error_code::null_pointer);
  EXPECT_CCHT_ERROR(pc.lookup(k.cspan(), p.span(3), s.span()), ccht::error_code::invalid_size);
}

/// Exact LRU over unpinned pages: the reference for the page cache's hit ratio.
class exact_lru_pages {
 public:
  explicit exact_lru_pages(std::size_t capacity) : cap_(capacity) {}
  /// Returns hit / fill / no_space; pins the key on hit or fill.
  page_status acquire(key_type k) {
    auto it = map_.find(k);
    if (it != map_.end()) {
      order_.splice(order_.end(), order_, it->second.pos);
      ++it->second.pins;
      return page_status::hit;
    }
    if (map_.size() == cap_) {
      auto victim = std::find_if(order_.begin(), order_.end(),
                                 [&](key_type x) { return map_[x].pins == 0; });
      if (victim == order_.end()) { return page_status::no_space; }
      map_.erase(*victim);
      order_.erase(victim);
    }
    order_.push_back(k);
    map_[k] = {std::prev(order_.end()), 1};
    return page_status::fill;
  }
  void release(key_type k) {
    auto& e = map_.at(k);
    if (--e.pins == 0) { order_.splice(order_.end(), order_, e.pos); }  // a release is a use
  }
  bool resident(key_type k) const { return map_.count(k) != 0; }

 private:
  struct entry {
    std::list<key_type>::iterator pos;
    int pins = 0;
  };
  std::size_t cap_;
  std::list<key_type> order_;
  std::unordered_map<key_type, entry> map_;
};

TEST_F(PageCache, SerialRequestsTrackExactLruOverUnpinnedPages) {
  // Requests of 1-12 distinct keys drawn from a zipf-like distribution, each acquired as one
  // batch, filled, published and released, as a KV cache serves a request's pages. The cache's
  // reports must agree with the resident set they imply, and its hit ratio must stay close to an
  // exact LRU over unpinned pages of the same size.
  std::size_t const pages = 512;
  cache pc(pages * 32, 32, {.cpu_threads = 1});
  auto d = drive(pc);
  exact_lru_pages ref(pages);
  std::mt19937_64 rng(42);
  std::size_t const universe = 6000;
  std::vector<double> w(universe);
  for (std::size_t i = 0; i < universe; ++i) { w[i] = 1.0 / std::pow(double(i + 1), 0.9); }
  std::discrete_distribution<std::size_t> zipf(w.begin(), w.end());
  std::map<key_type, page_id> resident;
  std::size_t hits = 0, ref_hits = 0, refs = 0;
  for (int r = 0; r < 4000; ++r) {
    std::set<key_type> uniq;
    std::size_t const len = 1 + rng() % 12;
    while (uniq.size() < len) { uniq.insert(1 + zipf(rng)); }
    std::vector<key_type> keys(uniq.begin(), uniq.end());
    std::shuffle(keys.begin(), keys.end(), rng);
    auto a = d.acquire(keys);
    std::set<key_type> batch(keys.begin(), keys.end());
    std::set<page_id> fill_pages;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (a.status[i] == page_status::fill) { fill_pages.insert(a.pages[i]); }
    }
    std::set<key_type> evicted_now;
    for (auto [ek, ep] : a.evicted) {
      ASSERT_TRUE(resident.count(ek)) << "evicted a key that was not resident";
      EXPECT_EQ(resident[ek], ep);
      EXPECT_TRUE(fill_pages.count(ep)) << "a victim's page must go to one of the fills";
      evicted_now.insert(ek);
      resident.erase(ek);
    }
    std::vector<key_type> filled;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      ++refs;
      ref_hits += ref.acquire(keys[i]) == page_status::hit;
      if (a.status[i] == page_status::hit) {
        // A key of this request evicted by an earlier element (index order, one thread) is
        // filled again, never hit: pinned keys are never victims.
        ASSERT_FALSE(evicted_now.count(keys[i])) << "hit on a key evicted in the same batch";
        ++hits;
        ASSERT_TRUE(resident.count(keys[i]));
        ASSERT_EQ(resident[keys[i]], a.pages[i]);
        ASSERT_TRUE(d.holds(a.pages[i], keys[i]));
      } else {
        ASSERT_EQ(a.status[i], page_status::fill);
        ASSERT_FALSE(resident.count(keys[i]));
        resident[keys[i]] = a.pages[i];
        d.write(a.pages[i], keys[i]);
        filled.push_back(keys[i]);
      }
    }
    ASSERT_LE(resident.size(), pages);
    std::set<page_id> distinct;
    for (auto& [k, p] : resident) { distinct.insert(p); }
    ASSERT_EQ(distinct.size(), resident.size()) << "two keys share a page";
    d.publish(filled);
    d.release(keys);
    for (auto k : keys) { ref.release(k); }
  }
  double const ratio = double(hits) / double(refs), ref_ratio = double(ref_hits) / double(refs);
  std::printf("page cache hit ratio %.4f, exact LRU %.4f (%zu refs)\n", ratio, ref_ratio, refs);
  EXPECT_NEAR(ratio, ref_ratio, 0.005);  // the goal: within 0.5 points
  auto s = pc.stats();
  EXPECT_EQ(s.hits, hits);
  EXPECT_EQ(s.pages_resident, resident.size());
  EXPECT_EQ(s.pages_pinned, 0u);
  // match_prefix agrees with the resident set: the leading run of resident keys.
  std::vector<key_type> chain;
  for (key_type k = 1; k <= 40; ++k) { chain.push_back(k); }
  std::size_t expect = 0;
  while (expect < chain.size() && resident.count(chain[expect])) { ++expect; }
  auto [len, got] = d.match_prefix(chain);
  EXPECT_EQ(len, expect);
  for (std::size_t i = 0; i < len; ++i) { EXPECT_EQ(got[i], resident[chain[i]]); }
  d.release(std::vector<key_type>(chain.begin(), chain.begin() + len));
  EXPECT_EQ(pc.stats().pages_pinned, 0u);
}

TEST_F(PageCache, AccountingHoldsAfterLongRandomRuns) {
  // Random single-key operations of every kind against a model of pins and fill states; after
  // every step resident + free = pages, and the pinned and filling gauges match the model.
  for (bool coarse : {false, true}) {
    std::size_t const pages = 48;
    std::mt19937_64 rng(coarse ? 7 : 11);
    auto body = [&](auto& pc) {
      auto d = drive(pc);
      struct entry { int pins = 0; bool filling = false; page_id page = 0; };
      std::map<key_type, entry> m;
      for (int step = 0; step < 3000; ++step) {
        key_type const k = 1 + rng() % 120;
        auto it = m.find(k);
        switch (rng() % 6) {
          case 0:
          case 1: {
            auto a = d.acquire({k});
            for (auto [ek, ep] : a.evicted) {
              ASSERT_TRUE(m.count(ek));
              ASSERT_EQ(m[ek].pins, 0) << "evicted a pinned page";
              m.erase(ek);
            }
            if (a.status[0] == page_status::hit) {
              ASSERT_TRUE(it != m.end() && !it->second.filling);
              ++m[k].pins;
            } else if (a.status[0] == page_status::fill) {
              ASSERT_TRUE(m.find(k) == m.end());
              m[k] = {1, true, a.pages[0]};
              d.write(a.pages[0], k);
            } else if (a.status[0] == page_status::pending) {
              ASSERT_TRUE(it != m.end() && it->second.filling);
            } else {
              ASSERT_EQ(a.status[0], page_status::no_space);
              std::size_t pinned = 0;
              for (auto& [kk, e] : m) { pinned += e.pins > 0; }
              // Only when nothing evictable is reachable: here, every page is pinned or the
              // key's two buckets are full of pinned entries; never with most pages free.
              ASSERT_GE(pinned, 2u);
            }
            break;
          }
          case 2:
            if (it != m.end() && it->second.filling) {
              d.publish({k});
              it->second.filling = false;
            } else {
              EXPECT_CCHT_ERROR(d.publish({k}), ccht::error_code::invalid_argument);
            }
            break;
          case 3:
            if (it != m.end() && !it->second.filling && it->second.pins > 0) {
              ASSERT_TRUE(d.holds(it->second.page, k));
              d.release({k});
              --it->second.pins;
            } else {
              EXPECT_CCHT_ERROR(d.release({k}), ccht::error_code::invalid_argument);
            }
            break;
          case 4:
            if (it != m.end() && it->second.filling) {
              d.abandon({k});
              m.erase(it);
            }
            break;
          case 5: {
            auto [n, r] = d.erase({k});
            if (it == m.end()) {
              EXPECT_EQ(r[0], page_result::unknown_key);
            } else if (it->second.pins > 0) {
              EXPECT_EQ(n, 0u);
            } else {
              EXPECT_EQ(n, 1u);
              m.erase(it);
            }
            break;
          }
        }
        auto s = pc.stats();
        std::size_t pinned = 0, filling = 0;
        for (auto& [kk, e] : m) {
          pinned += e.pins > 0;
          filling += e.filling;
        }
        ASSERT_EQ(s.pages_resident + s.pages_free, pages);
        ASSERT_EQ(s.pages_resident, m.size()) << "step " << step;
        ASSERT_EQ(s.pages_pinned, pinned) << "step " << step;
        ASSERT_EQ(s.pages_filling, filling) << "step " << step;
      }
    };
    if (coarse) {
      ccht::page_cache<Backend, ccht::coarse_lru> pc(pages * 16, 16);
      body(pc);
    } else {
      cache pc(pages * 16, 16);
      body(pc);
    }
  }
}

}  // namespace
