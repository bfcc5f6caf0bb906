// Simulation library: exact reference policies (golden miss counts on the shared traces and a
// naive O(n) reference), synthetic workload generators, and the replay engine.
#include "reference_model.hpp"
#include "sim_test_support.hpp"

#include <sim/exact_policies.hpp>
#include <sim/replay.hpp>
#include <sim/traces.hpp>
#include <sim/workloads.hpp>

#include <ccht/ccht.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

using namespace ccht_sim_test;
namespace sim = ccht::sim;

// =================================================================================================
// Golden miss counts (shared/traces/README.md)
// =================================================================================================

struct golden_row {
  std::size_t capacity;
  std::uint64_t lru, fifo, lfu;
};

struct golden_trace {
  char const* file;
  sim::trace_format format;
  std::uint64_t requests;  // README "requests" (block refs for Mooncake)
  std::uint64_t unique;    // README "unique keys"
  std::vector<golden_row> rows;
};

std::vector<golden_trace> const& golden() {
  static std::vector<golden_trace> const g{
      {"sprite.trace", sim::trace_format::lirs, 133996, 7075,
       {{100, 105079, 104111, 125327}, {500, 29074, 35364, 99674},
        {1000, 12544, 17093, 51933}, {2000, 8741, 10779, 26574}}},
      {"multi2.trace", sim::trace_format::lirs, 26311, 5684,
       {{100, 24539, 24724, 24489}, {500, 16845, 18719, 16902},
        {1000, 13734, 16109, 12970}, {2000, 13419, 14664, 12908}}},
      {"multi3.trace", sim::trace_format::lirs, 30241, 7454,
       {{100, 28263, 28381, 27795}, {500, 20366, 22707, 20219},
        {1000, 18840, 20270, 18399}, {2000, 16756, 18249, 16120}}},
      {"zigzag.trace", sim::trace_format::lirs, 52001, 2001,
       {{100, 49526, 49526, 49526}, {500, 39526, 39526, 39526},
        {1000, 27026, 27026, 27026}, {2000, 2026, 26014, 2026}}},
      {"loop.trace", sim::trace_format::lirs, 505500, 1011,
       {{1000, 505500, 505500, 505500}, {2000, 1011, 1011, 1011}}},
      {"ps.trace", sim::trace_format::lirs, 10448, 3083,
       {{100, 9678, 9678, 9472}, {500, 5376, 6642, 4953}, {2000, 3084, 4230, 4953}}},
      {"2_pools.trace", sim::trace_format::lirs, 100000, 9939,
       {{100, 78054, 80621, 53135}, {500, 48938, 57299, 48138},
        {1000, 45585, 50043, 45639}, {2000, 40674, 42675, 40654}}},
      {"mooncake_synthetic.jsonl", sim::trace_format::mooncake, 121877, 43924,
       {{1000, 111827, 112280, 116992}, {4000, 93823, 93691, 103145},
        {16000, 57319, 61100, 55498}, {32000, 45323, 48610, 45195}}},
  };
  return g;
}

template <class Cache>
std::uint64_t misses_of(std::vector<std::uint64_t> const& keys, std::size_t capacity) {
  Cache c(capacity);
  for (auto k : keys) { c.access(k); }
  EXPECT_EQ(c.stats().requests, keys.size());
  EXPECT_EQ(c.stats().updates, 0u);
  EXPECT_LE(c.size(), capacity);
  // Every miss inserts; all but the resident ones were evicted.
  EXPECT_EQ(c.stats().misses(), c.stats().evictions + c.size()) << Cache::name;
  return c.stats().misses();
}

class GoldenMisses : public ::testing::TestWithParam<std::size_t> {};

TEST_P(GoldenMisses, ExactPoliciesReproduceTheReadmeTable) {
  CCHT_SKIP_WITHOUT_TRACES();
  golden_trace const& g = golden()[GetParam()];
  std::string const path = trace_path(g.file);
  if (HasFailure()) { return; }

  sim::trace const t = sim::read_trace(path);  // auto-detection must pick the right format
  EXPECT_EQ(t.format, g.format) << t.format_reason;
  ASSERT_EQ(t.keys.size(), g.requests) << path;
  EXPECT_EQ(std::unordered_set<std::uint64_t>(t.keys.begin(), t.keys.end()).size(), g.unique);

  for (golden_row const& r : g.rows) {
    SCOPED_TRACE(std::string(g.file) + " capacity " + std::to_string(r.capacity));
    EXPECT_EQ(misses_of<sim::exact_lru>(t.keys, r.capacity), r.lru) << "lru";
    EXPECT_EQ(misses_of<sim::exact_fifo>(t.keys, r.capacity), r.fifo) << "fifo";
    EXPECT_EQ(misses_of<sim::exact_lfu>(t.keys, r.capacity), r.lfu) << "lfu";
  }
}

INSTANTIATE_TEST_SUITE_P(SharedTraces, GoldenMisses, ::testing::Range<std::size_t>(0, 8),
                         [](auto const& info) {
                           std::string n = golden()[info.param].file;
                           n = n.substr(0, n.find('.'));
                           n.erase(std::remove(n.begin(), n.end(), '_'), n.end());
                           return n;
                         });

TEST(GoldenMissesReplay, ReplayByPolicyNameMatchesTheTable) {
  CCHT_SKIP_WITHOUT_TRACES();
  // The same numbers through sim::replay (the CLI's path), on two traces of different formats.
  for (std::size_t gi : {std::size_t{5}, std::size_t{7}}) {  // ps, mooncake_synthetic
    golden_trace const& g = golden()[gi];
    std::string const path = trace_path(g.file);
    if (HasFailure()) { return; }
    auto const reqs = sim::as_queries(sim::read_trace(path, g.format).keys);
    for (golden_row const& r : g.rows) {
      for (auto [policy, want] : {std::pair<char const*, std::uint64_t>{"lru", r.lru},
                                  {"fifo", r.fifo},
                                  {"lfu", r.lfu}}) {
        auto const res = sim::replay(reqs, policy, r.capacity, {});
        EXPECT_EQ(res.misses(), want) << g.file << " " << policy << " " << r.capacity;
        EXPECT_EQ(res.requests, g.requests);
        EXPECT_EQ(res.hits + res.misses(), res.requests);
        EXPECT_EQ(res.policy, policy);
        EXPECT_EQ(res.capacity, r.capacity);
        EXPECT_EQ(res.slots, 0u);
        EXPECT_EQ(res.backend, "host");
        EXPECT_NEAR(res.miss_ratio(), double(want) / double(g.requests), 1e-12);
      }
    }
  }
}

// =================================================================================================
// Exact policies against a naive O(n) reference
// =================================================================================================

enum class naive_kind { lru, fifo, lfu };

/// Vector-based reference: entries in insertion (fifo) or recency (lru) order; lfu scans for
/// the smallest (count, last use).
class naive_cache {
 public:
  naive_cache(naive_kind k, std::size_t capacity) : kind_(k), capacity_(capacity) {}

  struct outcome {
    bool hit;
    bool evicted;
  };

  outcome touch(std::uint64_t key) {
    ++clock_;
    auto it = std::find_if(v_.begin(), v_.end(), [&](entry const& e) { return e.key == key; });
    if (it != v_.end()) {
      if (kind_ == naive_kind::lru) {
        entry e = *it;
        v_.erase(it);
        v_.push_back(e);
      } else if (kind_ == naive_kind::lfu) {
        ++it->count;
        it->last = clock_;
      }
      return {true, false};
    }
    bool evicted = false;
    if (v_.size() >= capacity_) {
      auto victim = v_.begin();  // lru / fifo: the oldest position
      if (kind_ == naive_kind::lfu) {
        victim = std::min_element(v_.begin(), v_.end(), [](entry const& a, entry const& b) {
          return a.count != b.count ? a.count < b.count : a.last < b.last;
        });
      }
      v_.erase(victim);
      evicted = true;
    }
    v_.push_back({key, 1, clock_});
    return {false, evicted};
  }
  bool contains(std::uint64_t key) const {
    return std::any_of(v_.begin(), v_.end(), [&](entry const& e) { return e.key == key; });
  }
  std::size_t size() const { return v_.size(); }

 private:
  struct entry {
    std::uint64_t key, count, last;
  };
  naive_kind kind_;
  std::size_t capacity_;
  std::uint64_t clock_ = 0;
  std::vector<entry> v_;
};

struct op {
  std::uint64_t key;
  bool put;
};

/// Runs @p ops through Cache and the naive reference; returns the first difference, or "".
template <class Cache>
std::string first_difference(naive_kind kind, std::size_t capacity, std::vector<op> const& ops,
                             std::vector<std::uint64_t> const& universe) {
  Cache c(capacity);
  naive_cache ref(kind, capacity);
  std::uint64_t hits = 0, evictions = 0, gets = 0, puts = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    std::ostringstream where;
    where << Cache::name << " capacity " << capacity << " request " << i << " ("
          << (ops[i].put ? "put " : "get ") << ops[i].key << "): ";
    std::uint64_t const ev_before = c.stats().evictions;
    std::uint64_t const hits_before = c.stats().hits;
    auto const want = ref.touch(ops[i].key);
    if (ops[i].put) {
      c.put(ops[i].key);
      ++puts;
      if (c.stats().hits != hits_before) { return where.str() + "a put changed the hit count"; }
    } else {
      bool const hit = c.access(ops[i].key);
      ++gets;
      hits += hit;
      if (hit != want.hit) {
        return where.str() + "hit " + std::to_string(hit) + ", reference " +
               std::to_string(want.hit);
      }
      if (c.stats().hits - hits_before != std::uint64_t{hit}) {
        return where.str() + "hits counter disagrees with the returned value";
      }
    }
    bool const evicted = c.stats().evictions != ev_before;
    evictions += want.evicted;
    if (evicted != want.evicted || c.stats().evictions - ev_before > 1) {
      return where.str() + "evicted " + std::to_string(c.stats().evictions - ev_before) +
             ", reference " + std::to_string(want.evicted);
    }
    if (c.size() != ref.size()) {
      return where.str() + "size " + std::to_string(c.size()) + ", reference " +
             std::to_string(ref.size());
    }
    if (!c.contains(ops[i].key)) { return where.str() + "key not resident right after use"; }
    if (universe.size() <= 64 || i % 97 == 0) {
      for (auto k : universe) {
        if (c.contains(k) != ref.contains(k)) {
          return where.str() + "contains(" + std::to_string(k) + ") differs";
        }
      }
    }
  }
  if (c.stats().requests != gets || c.stats().updates != puts || c.stats().hits != hits ||
      c.stats().evictions != evictions) {
    return std::string(Cache::name) + ": final counters differ";
  }
  return "";
}

void check_all(std::size_t capacity, std::vector<op> const& ops,
               std::vector<std::uint64_t> const& universe, std::string const& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(first_difference<sim::exact_lru>(naive_kind::lru, capacity, ops, universe), "");
  EXPECT_EQ(first_difference<sim::exact_fifo>(naive_kind::fifo, capacity, ops, universe), "");
  EXPECT_EQ(first_difference<sim::exact_lfu>(naive_kind::lfu, capacity, ops, universe), "");
}

std::vector<std::uint64_t> make_universe(std::size_t n, std::uint64_t base) {
  std::vector<std::uint64_t> u(n);
  for (std::size_t i = 0; i < n; ++i) { u[i] = base + i * 0x9e3779b97f4a7c15ull; }
  return u;
}

TEST(ExactPolicies, MatchNaiveReferenceOnRandomStreams) {
  std::mt19937_64 rng(12345);
  for (std::size_t usize : {1u, 2u, 3u, 5u, 8u, 17u, 64u, 300u}) {
    auto const universe = make_universe(usize, rng());
    for (std::size_t cap : {1u, 2u, 3u, 4u, 7u, 16u, 64u, 100u}) {
      for (double put_fraction : {0.0, 0.3}) {
        std::uniform_int_distribution<std::size_t> pick(0, usize - 1);
        std::bernoulli_distribution is_put(put_fraction);
        std::vector<op> ops(1500);
        for (auto& o : ops) { o = {universe[pick(rng)], is_put(rng)}; }
        check_all(cap, ops, universe,
                  "uniform universe " + std::to_string(usize) + " capacity " +
                      std::to_string(cap) + " puts " + std::to_string(put_fraction));
      }
    }
  }
}

TEST(ExactPolicies, MatchNaiveReferenceOnSkewedStreams) {
  // Geometric popularity: frequency ties and repeated hot keys exercise LFU's tie rule.
  std::mt19937_64 rng(777);
  for (double p : {0.5, 0.2, 0.05}) {
    auto const universe = make_universe(200, 5);
    std::geometric_distribution<std::size_t> geo(p);
    for (std::size_t cap : {1u, 3u, 10u, 50u}) {
      std::vector<op> ops(3000);
      std::bernoulli_distribution is_put(0.1);
      for (auto& o : ops) { o = {universe[std::min<std::size_t>(geo(rng), 199)], is_put(rng)}; }
      check_all(cap, ops, universe, "geometric p " + std::to_string(p) + " capacity " +
                                        std::to_string(cap));
    }
  }
}

TEST(ExactPolicies, MatchNaiveReferenceOnAdversarialPatterns) {
  for (std::size_t cap : {1u, 2u, 5u, 16u}) {
    auto const universe = make_universe(cap + 1, 0);
    // A loop over capacity + 1 keys: LRU and FIFO miss every time.
    std::vector<op> loop;
    for (int round = 0; round < 6; ++round) {
      for (auto k : universe) { loop.push_back({k, false}); }
    }
    check_all(cap, loop, universe, "loop of capacity+1, capacity " + std::to_string(cap));
    sim::exact_lru lru(cap);
    sim::exact_fifo fifo(cap);
    for (auto const& o : loop) {
      lru.access(o.key);
      fifo.access(o.key);
    }
    EXPECT_EQ(lru.stats().hits, 0u);
    EXPECT_EQ(fifo.stats().hits, 0u);

    // Zigzag: forwards then backwards.
    std::vector<op> zig;
    for (int round = 0; round < 4; ++round) {
      for (auto k : universe) { zig.push_back({k, round % 2 == 1}); }
      for (auto it = universe.rbegin(); it != universe.rend(); ++it) { zig.push_back({*it, false}); }
    }
    check_all(cap, zig, universe, "zigzag, capacity " + std::to_string(cap));
  }

  // Capacity at least the universe: only compulsory misses, no evictions.
  {
    auto const universe = make_universe(20, 3);
    std::mt19937_64 rng(3);
    std::vector<op> ops(2000);
    for (auto& o : ops) { o = {universe[rng() % 20], rng() % 4 == 0}; }
    for (std::size_t cap : {20u, 21u, 1000u}) {
      check_all(cap, ops, universe, "capacity >= universe " + std::to_string(cap));
      sim::exact_lfu lfu(cap);
      for (auto const& o : ops) { o.put ? lfu.put(o.key) : void(lfu.access(o.key)); }
      EXPECT_EQ(lfu.stats().evictions, 0u);
    }
  }

  // LFU: a hot key accumulates a count, then a scan of fresh keys must not evict it; the LFU tie
  // goes to the least recently used of the least frequent.
  {
    std::vector<op> ops;
    for (int i = 0; i < 10; ++i) { ops.push_back({42, false}); }
    for (std::uint64_t k = 100; k < 140; ++k) { ops.push_back({k, false}); }
    ops.push_back({42, false});
    for (std::uint64_t k = 100; k < 104; ++k) { ops.push_back({k, k % 2 == 0}); }
    auto universe = make_universe(0, 0);
    universe.push_back(42);
    for (std::uint64_t k = 100; k < 140; ++k) { universe.push_back(k); }
    for (std::size_t cap : {1u, 2u, 3u, 8u}) { check_all(cap, ops, universe, "lfu hot key"); }
    sim::exact_lfu lfu(3);
    for (auto const& o : ops) { lfu.access(o.key); }
    EXPECT_TRUE(lfu.contains(42));
  }

  // Extreme key values (the exact policies take any 64-bit key).
  {
    std::vector<std::uint64_t> const universe{0, 1, std::numeric_limits<std::uint64_t>::max(),
                                              std::numeric_limits<std::uint64_t>::max() - 1,
                                              std::uint64_t{1} << 63};
    std::vector<op> ops;
    std::mt19937 rng(9);
    for (int i = 0; i < 500; ++i) { ops.push_back({universe[rng() % 5], rng() % 3 == 0}); }
    for (std::size_t cap : {1u, 2u, 4u}) { check_all(cap, ops, universe, "extreme keys"); }
  }
}

TEST(ExactPolicies, PutIsAnUpdateNotARequest) {
  sim::exact_lru c(2);
  c.put(1);
  c.put(2);
  EXPECT_EQ(c.stats().requests, 0u);
  EXPECT_EQ(c.stats().updates, 2u);
  EXPECT_EQ(c.stats().hits, 0u);
  EXPECT_TRUE(c.access(1));  // put inserted it
  c.put(3);                  // evicts 2, the least recently used
  EXPECT_FALSE(c.contains(2));
  EXPECT_TRUE(c.contains(1));
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.stats().misses(), 0u);
}

// =================================================================================================
// Workload generators
// =================================================================================================

sim::workload_options opts(sim::distribution d, std::uint64_t keys, std::uint64_t requests,
                           double read = 1.0, std::uint64_t seed = 1) {
  sim::workload_options o;
  o.dist = d;
  o.keys = keys;
  o.requests = requests;
  o.read_ratio = read;
  o.seed = seed;
  return o;
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> counts_desc(
    std::vector<sim::request> const& reqs) {
  std::unordered_map<std::uint64_t, std::uint64_t> m;
  for (auto const& r : reqs) { ++m[r.key]; }
  std::vector<std::pair<std::uint64_t, std::uint64_t>> v(m.begin(), m.end());
  std::sort(v.begin(), v.end(), [](auto a, auto b) { return a.second > b.second; });
  return v;
}

TEST(Workloads, ZipfianGeneratorTopRanksMatchTheory) {
  for (double theta : {0.5, 0.8, 0.99}) {
    sim::zipfian_generator z(1000, theta);
    std::mt19937_64 rng(2024);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    constexpr int n = 1000000;
    std::vector<std::uint64_t> count(1000);
    for (int i = 0; i < n; ++i) {
      std::uint64_t const r = z.next(u(rng));
      ASSERT_LT(r, 1000u);
      ++count[r];
    }
    // Gray et al.'s method is exact for ranks 0 and 1.
    for (std::uint64_t r : {0u, 1u}) {
      double const want = z.probability(r);
      double const got = double(count[r]) / n;
      EXPECT_NEAR(got / want, 1.0, 0.03) << "theta " << theta << " rank " << r;
    }
    // Probabilities sum to 1 and decrease.
    double sum = 0;
    for (std::uint64_t r = 0; r < 1000; ++r) { sum += z.probability(r); }
    EXPECT_NEAR(sum, 1.0, 1e-9);
    EXPECT_GT(z.probability(0), z.probability(1));
    EXPECT_GT(count[0], count[10]);
    EXPECT_GT(count[10], count[500]);
  }
}

TEST(Workloads, ZipfianGrowMatchesAFreshGenerator) {
  sim::zipfian_generator grown(10, 0.9);
  grown.grow(5000);
  sim::zipfian_generator fresh(5000, 0.9);
  EXPECT_EQ(grown.items(), 5000u);
  EXPECT_NEAR(grown.probability(0), fresh.probability(0), 1e-12);
  for (double u : {0.0, 0.1, 0.5, 0.9, 0.999999}) { EXPECT_EQ(grown.next(u), fresh.next(u)); }
  grown.grow(100);  // never shrinks
  EXPECT_EQ(grown.items(), 5000u);
  sim::zipfian_generator one(1, 0.99);
  EXPECT_EQ(one.next(0.99), 0u);
  EXPECT_THROW(sim::zipfian_generator(0, 0.5), std::invalid_argument);
  EXPECT_THROW(sim::zipfian_generator(10, 1.0), std::invalid_argument);
  EXPECT_THROW(sim::zipfian_generator(10, -0.1), std::invalid_argument);
}

TEST(Workloads, GeneratedZipfianTopKeyFrequency) {
  auto const o = opts(sim::distribution::zipfian, 1000, 1000000);
  auto const reqs = sim::generate(o);
  ASSERT_EQ(reqs.size(), 1000000u);
  auto const c = counts_desc(reqs);
  EXPECT_LE(c.size(), 1000u);
  double const want = sim::zipfian_generator(1000, o.zipf_theta).probability(0);
  double const got = double(c[0].second) / double(reqs.size());
  EXPECT_NEAR(got / want, 1.0, 0.03) << "top key frequency " << got << ", theory " << want;
  for (auto const& r : reqs) {
    EXPECT_FALSE(r.update);
    ASSERT_FALSE(ccht::is_reserved_key(r.key));
  }
}

TEST(Workloads, UniformIsRoughlyFlat) {
  constexpr std::uint64_t keys = 100, n = 200000;
  auto const reqs = sim::generate(opts(sim::distribution::uniform, keys, n, 1.0, 7));
  auto const c = counts_desc(reqs);
  ASSERT_EQ(c.size(), keys);  // every key drawn
  double const expected = double(n) / keys;
  double chi2 = 0;
  for (auto const& [k, cnt] : c) { chi2 += (double(cnt) - expected) * (double(cnt) - expected) / expected; }
  // 99 degrees of freedom: mean 99, sd 14; 200 is far in the tail. A zipfian fails by far.
  EXPECT_LT(chi2, 200.0);
  EXPECT_LT(double(c.front().second) / expected, 1.1);
  EXPECT_GT(double(c.back().second) / expected, 0.9);
}

TEST(Workloads, SeedsAreDeterministic) {
  for (auto d : {sim::distribution::zipfian, sim::distribution::uniform,
                 sim::distribution::latest, sim::distribution::scan,
                 sim::distribution::scan_mix}) {
    auto const a = sim::generate(opts(d, 500, 5000, 0.9, 11));
    auto const b = sim::generate(opts(d, 500, 5000, 0.9, 11));
    auto const c = sim::generate(opts(d, 500, 5000, 0.9, 12));
    ASSERT_EQ(a.size(), 5000u);
    std::size_t same_ab = 0, same_ac = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      same_ab += a[i].key == b[i].key && a[i].update == b[i].update;
      same_ac += a[i].key == c[i].key && a[i].update == c[i].update;
    }
    EXPECT_EQ(same_ab, a.size()) << sim::to_string(d);
    EXPECT_LT(same_ac, a.size() / 2) << sim::to_string(d);
  }
}

TEST(Workloads, ReadRatioIsRespected) {
  for (double read : {0.0, 0.5, 0.95, 1.0}) {
    auto const reqs = sim::generate(opts(sim::distribution::zipfian, 1000, 100000, read, 3));
    std::size_t updates = 0;
    for (auto const& r : reqs) { updates += r.update; }
    double const frac = double(updates) / double(reqs.size());
    EXPECT_NEAR(frac, 1.0 - read, 0.01) << "read ratio " << read;
    if (read == 1.0) { EXPECT_EQ(updates, 0u); }
    if (read == 0.0) { EXPECT_EQ(updates, reqs.size()); }
  }
}

TEST(Workloads, LatestFavoursTheNewestKeys) {
  // Updates insert new keys; a query's age = keys inserted since the key it asks for.
  auto o = opts(sim::distribution::latest, 1000, 200000, 0.9, 5);
  auto const reqs = sim::generate(o);
  std::unordered_map<std::uint64_t, std::uint64_t> insert_index;  // key -> update ordinal
  std::uint64_t updates = 0, aged = 0;
  std::map<std::uint64_t, std::uint64_t> age_count;
  for (auto const& r : reqs) {
    if (r.update) {
      EXPECT_TRUE(insert_index.emplace(r.key, updates).second) << "an update reused a key";
      ++updates;
    } else if (auto it = insert_index.find(r.key); it != insert_index.end()) {
      ++age_count[updates - 1 - it->second];
      ++aged;
    }
  }
  ASSERT_GT(updates, 15000u);
  ASSERT_GT(aged, 0u);
  // Age 0 (the newest key) is the most frequent, and far ahead of older keys.
  std::uint64_t const newest = age_count[0];
  for (auto const& [age, cnt] : age_count) {
    if (age > 0) { EXPECT_LT(cnt, newest) << "age " << age; }
  }
  EXPECT_GT(newest, 3 * age_count[20]);
  // Over all queries (not only those after an update), the newest key's share is zipfian's P(0)
  // for the item count at that time: between P(0) at the final and at the initial count.
  std::uint64_t queries = reqs.size() - updates;
  double const share = double(newest) / double(queries);
  double const lo = sim::zipfian_generator(1000 + updates, o.zipf_theta).probability(0);
  double const hi = sim::zipfian_generator(1000, o.zipf_theta).probability(0);
  EXPECT_GT(share, lo * 0.95);
  EXPECT_LT(share, hi * 1.05);

  // With no updates, the most frequent key has zipfian P(0).
  auto const reads = sim::generate(opts(sim::distribution::latest, 1000, 300000, 1.0, 5));
  auto const c = counts_desc(reads);
  EXPECT_NEAR(double(c[0].second) / 300000.0 / hi, 1.0, 0.04);
}

TEST(Workloads, ScanLoopsInOrder) {
  constexpr std::uint64_t keys = 100;
  auto const reqs = sim::generate(opts(sim::distribution::scan, keys, 1050));
  std::unordered_set<std::uint64_t> first(keys);
  for (std::uint64_t i = 0; i < keys; ++i) { first.insert(reqs[i].key); }
  EXPECT_EQ(first.size(), keys);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(reqs[i].key, reqs[i % keys].key) << i;
  }
  // A loop just larger than the cache: exact LRU misses every request.
  auto const r = sim::replay(reqs, "lru", keys - 1, {});
  EXPECT_EQ(r.hits, 0u);
}

TEST(Workloads, ScanMixColdKeysAppearOnce) {
  constexpr std::uint64_t keys = 1000, n = 100000;
  // The scan distribution with the same seed enumerates the hot key space.
  auto const hot_stream = sim::generate(opts(sim::distribution::scan, keys, keys, 1.0, 9));
  std::unordered_set<std::uint64_t> hot;
  for (auto const& r : hot_stream) { hot.insert(r.key); }
  ASSERT_EQ(hot.size(), keys);

  auto o = opts(sim::distribution::scan_mix, keys, n, 1.0, 9);
  o.scan_fraction = 0.3;
  auto const reqs = sim::generate(o);
  std::unordered_map<std::uint64_t, std::uint64_t> cold;
  std::uint64_t cold_requests = 0;
  for (auto const& r : reqs) {
    if (!hot.count(r.key)) {
      ++cold[r.key];
      ++cold_requests;
    }
  }
  for (auto const& [k, cnt] : cold) { ASSERT_EQ(cnt, 1u) << "cold key " << k << " repeated"; }
  EXPECT_NEAR(double(cold_requests) / n, 0.3, 0.01);

  o.scan_fraction = 1.0;
  auto const all_cold = sim::generate(o);
  std::unordered_set<std::uint64_t> distinct;
  for (auto const& r : all_cold) { distinct.insert(r.key); }
  EXPECT_EQ(distinct.size(), n);

  o.scan_fraction = 0.0;
  for (auto const& r : sim::generate(o)) { ASSERT_TRUE(hot.count(r.key)); }
}

TEST(Workloads, ValidateRejectsBadOptions) {
  auto expect_bad = [](sim::workload_options o, char const* what) {
    EXPECT_THROW(sim::validate(o), std::invalid_argument) << what;
    EXPECT_THROW(sim::generate(o), std::invalid_argument) << what;
  };
  sim::workload_options good;
  good.requests = 10;
  EXPECT_NO_THROW(sim::validate(good));
  EXPECT_EQ(sim::generate(good).size(), 10u);
  double const nan = std::numeric_limits<double>::quiet_NaN();
  auto o = good;
  o.keys = 0;
  expect_bad(o, "keys 0");
  for (double t : {1.0, 1.5, -0.01, nan}) {
    o = good;
    o.zipf_theta = t;
    expect_bad(o, "theta");
  }
  for (double r : {-0.1, 1.01, nan}) {
    o = good;
    o.read_ratio = r;
    expect_bad(o, "read ratio");
    o = good;
    o.scan_fraction = r;
    expect_bad(o, "scan fraction");
  }
  try {
    o = good;
    o.zipf_theta = 2;
    sim::validate(o);
    ADD_FAILURE() << "no throw";
  } catch (std::invalid_argument const& e) {
    EXPECT_NE(std::string(e.what()).find("zipf"), std::string::npos) << e.what();
  }
  o = good;
  o.requests = 0;
  EXPECT_TRUE(sim::generate(o).empty());
}

TEST(Workloads, NamesRoundTrip) {
  for (auto d : {sim::distribution::zipfian, sim::distribution::uniform,
                 sim::distribution::latest, sim::distribution::scan,
                 sim::distribution::scan_mix}) {
    EXPECT_EQ(sim::parse_distribution(sim::to_string(d)), d);
  }
  EXPECT_THROW(sim::parse_distribution("zipf"), std::invalid_argument);
  EXPECT_THROW(sim::parse_distribution(""), std::invalid_argument);
  auto o = opts(sim::distribution::scan_mix, 10, 20, 0.5, 3);
  std::string const d = sim::describe(o);
  EXPECT_NE(d.find("scan-mix"), std::string::npos) << d;
  EXPECT_NE(d.find("keys=10"), std::string::npos) << d;
  EXPECT_NE(d.find("requests=20"), std::string::npos) << d;
}

TEST(Workloads, ScrambleIsInjectiveAndAvoidsReservedKeys) {
  std::unordered_set<std::uint64_t> seen;
  for (std::uint64_t r = 0; r < 100000; ++r) {
    std::uint64_t const k = sim::scramble(r, 77);
    ASSERT_FALSE(ccht::is_reserved_key(k));
    ASSERT_TRUE(seen.insert(k).second) << "rank " << r;
  }
}

// =================================================================================================
// Replay
// =================================================================================================

std::vector<sim::request> mixed_stream(std::uint64_t n, double read, std::uint64_t seed) {
  return sim::generate(opts(sim::distribution::zipfian, 5000, n, read, seed));
}

/// Expected outcome of replaying @p reqs through a serial table, computed with the independent
/// reference model: per batch, the queries in order, then the updates and the misses upserted.
template <class Policy>
sim::replay_result model_replay(std::vector<sim::request> const& reqs, std::size_t slots,
                                std::size_t batch, std::uint64_t seed) {
  ccht_test::reference_model<Policy, ccht::default_bucket_size> m(
      static_cast<std::uint32_t>(slots / ccht::default_bucket_size), seed);
  sim::replay_result out;
  for (std::size_t b = 0; b < reqs.size(); b += batch) {
    std::size_t const e = std::min(reqs.size(), b + batch);
    std::vector<std::uint64_t> ups, misses;
    for (std::size_t i = b; i < e; ++i) {
      if (reqs[i].update) {
        ups.push_back(reqs[i].key);
        ++out.updates;
      }
    }
    for (std::size_t i = b; i < e; ++i) {
      if (reqs[i].update) { continue; }
      ++out.requests;
      if (m.find(reqs[i].key)) {
        ++out.hits;
      } else {
        misses.push_back(reqs[i].key);
      }
    }
    ups.insert(ups.end(), misses.begin(), misses.end());
    for (auto k : ups) {
      out.evictions += m.insert_or_assign(k, k).status == ccht::op_status::inserted_evicted;
    }
  }
  return out;
}

TEST(Replay, TablePoliciesMatchTheModelAtEveryBatchSize) {
  auto const reqs = mixed_stream(30000, 0.8, 21);
  std::uint64_t queries = 0;
  for (auto const& r : reqs) { queries += !r.update; }
  constexpr std::size_t capacity = 500;
  std::size_t const slots = sim::table_slots_for_capacity(capacity, 1.0);
  for (std::size_t batch : {1u, 7u, 256u, 5000u}) {
    sim::replay_options o;
    o.batch = batch;
    o.cpu_threads = 1;
    for (std::string const p : {"ccht-lru", "ccht-fifo", "ccht-lfu"}) {
      SCOPED_TRACE(p + " batch " + std::to_string(batch));
      auto const r = sim::replay(reqs, p, capacity, o);
      EXPECT_EQ(r.requests, queries);
      EXPECT_EQ(r.updates, reqs.size() - queries);
      EXPECT_EQ(r.hits + r.misses(), r.requests);
      EXPECT_LE(r.hits, r.requests);
      EXPECT_EQ(r.slots, slots);
      EXPECT_EQ(r.batch, batch);
      EXPECT_EQ(r.backend, "cpu");
      EXPECT_EQ(r.policy, p);
      EXPECT_LE(r.evictions, r.misses() + r.updates);
      sim::replay_result want;
      if (p == "ccht-lru") { want = model_replay<ccht::lru>(reqs, slots, batch, o.seed); }
      if (p == "ccht-fifo") { want = model_replay<ccht::fifo>(reqs, slots, batch, o.seed); }
      if (p == "ccht-lfu") { want = model_replay<ccht::lfu>(reqs, slots, batch, o.seed); }
      EXPECT_EQ(r.hits, want.hits);
      EXPECT_EQ(r.evictions, want.evictions);
    }
  }
}

TEST(Replay, TwoBucketTableIsTheExactPolicy) {
  // With two buckets every key's candidates are the whole table, so evicting the smaller of the
  // two buckets' minimum scores is the global policy: ccht-X at 32 slots must equal exact X.
  for (double read : {1.0, 0.8}) {
    auto const reqs = sim::generate(opts(sim::distribution::zipfian, 300, 20000, read, 31));
    for (std::string const p : {"lru", "fifo", "lfu"}) {
      auto const exact = sim::replay(reqs, p, 32, {});
      auto const table = sim::replay(reqs, "ccht-" + p, 32, {});
      EXPECT_EQ(table.slots, 32u);
      EXPECT_EQ(table.hits, exact.hits) << p << " read " << read;
      EXPECT_EQ(table.evictions, exact.evictions) << p << " read " << read;
      EXPECT_EQ(table.requests, exact.requests);
      EXPECT_EQ(table.updates, exact.updates);
    }
  }
}

TEST(Replay, MultiThreadedBatchesKeepTheCounts) {
  auto const reqs = mixed_stream(40000, 0.9, 4);
  sim::replay_options o;
  o.batch = 8192;
  o.cpu_threads = 2;
  auto const r = sim::replay(reqs, "ccht-lru", 1000, o);
  std::uint64_t queries = 0;
  for (auto const& q : reqs) { queries += !q.update; }
  EXPECT_EQ(r.requests, queries);
  EXPECT_EQ(r.updates, reqs.size() - queries);
  EXPECT_EQ(r.hits + r.misses(), r.requests);
  EXPECT_LE(r.evictions, r.misses() + r.updates);
  EXPECT_GT(r.hits, 0u);
}

TEST(Replay, ExactPoliciesIgnoreBatchAndMatchTheClasses) {
  auto const reqs = mixed_stream(20000, 0.7, 8);
  sim::exact_lfu lfu(300);
  for (auto const& r : reqs) { r.update ? lfu.put(r.key) : void(lfu.access(r.key)); }
  sim::replay_options o;
  o.batch = 1000;
  auto const r = sim::replay(reqs, "lfu", 300, o);
  EXPECT_EQ(r.requests, lfu.stats().requests);
  EXPECT_EQ(r.updates, lfu.stats().updates);
  EXPECT_EQ(r.hits, lfu.stats().hits);
  EXPECT_EQ(r.evictions, lfu.stats().evictions);
  EXPECT_EQ(r.backend, "host");
  EXPECT_GE(r.seconds, 0.0);
}

TEST(Replay, CchtLruIsCloseToExactLruOnSprite) {
  CCHT_SKIP_WITHOUT_TRACES();
  std::string const path = trace_path("sprite.trace");
  if (HasFailure()) { return; }
  auto const reqs = sim::as_queries(sim::read_trace(path).keys);
  auto const exact = sim::replay(reqs, "lru", 1000, {});
  auto const table = sim::replay(reqs, "ccht-lru", 1000, {});
  EXPECT_EQ(exact.misses(), 12544u);
  EXPECT_EQ(table.requests, exact.requests);
  EXPECT_NEAR(table.miss_ratio(), exact.miss_ratio(), 0.01)
      << "ccht-lru " << table.miss_ratio() << " vs exact lru " << exact.miss_ratio();
}

TEST(Replay, TableSlotsForCapacity) {
  EXPECT_EQ(sim::table_slots_for_capacity(32, 1.0), 32u);
  EXPECT_EQ(sim::table_slots_for_capacity(47, 1.0), 32u);
  EXPECT_EQ(sim::table_slots_for_capacity(48, 1.0), 48u);
  EXPECT_EQ(sim::table_slots_for_capacity(1000, 1.0), 992u);
  EXPECT_EQ(sim::table_slots_for_capacity(1024, 0.5), 1024u);
  for (std::size_t c : {0u, 1u, 16u, 31u}) {
    EXPECT_THROW(sim::table_slots_for_capacity(c, 1.0), std::invalid_argument) << c;
  }
  for (double r : {0.0, -1.0, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THROW(sim::table_slots_for_capacity(1000, r), std::invalid_argument) << r;
  }
  // replay follows it: a table never gets more slots than the capacity.
  auto const reqs = mixed_stream(1000, 1.0, 1);
  EXPECT_EQ(sim::replay(reqs, "ccht-fifo", 100, {}).slots, 96u);
  EXPECT_THROW(sim::replay(reqs, "ccht-lru", 31, {}), std::invalid_argument);
  EXPECT_NO_THROW(sim::replay(reqs, "lru", 1, {}));  // exact policies take any capacity >= 1
}

TEST(Replay, RejectsBadArguments) {
  auto const reqs = mixed_stream(100, 1.0, 1);
  EXPECT_THROW(sim::replay(reqs, "arc", 100, {}), std::invalid_argument);
  EXPECT_THROW(sim::replay(reqs, "ccht-", 100, {}), std::invalid_argument);
  EXPECT_THROW(sim::replay(reqs, "ccht-clock", 100, {}), std::invalid_argument);
  EXPECT_THROW(sim::replay(reqs, "LRU", 100, {}), std::invalid_argument);
  EXPECT_THROW(sim::replay(reqs, "lru", 0, {}), std::invalid_argument);
  sim::replay_options o;
  o.batch = 0;
  EXPECT_THROW(sim::replay(reqs, "ccht-lru", 100, o), std::invalid_argument);
  o = {};
  o.backend = "tpu";
  EXPECT_THROW(sim::replay(reqs, "ccht-lru", 100, o), std::invalid_argument);
  try {
    sim::replay(reqs, "nope", 100, {});
    ADD_FAILURE() << "no throw";
  } catch (std::invalid_argument const& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
  auto const& known = sim::known_policies();
  EXPECT_EQ(known, (std::vector<std::string>{"lru", "fifo", "lfu", "ccht-lru", "ccht-fifo",
                                             "ccht-lfu", "ccht-double-lru", "ccht-coarse-lru",
                                             "cht-lru", "cht-random"}));
  for (auto const& p : known) { EXPECT_NO_THROW(sim::replay(reqs, p, 64, {})) << p; }
}

TEST(Replay, CudaBackendWithoutCudaIsAnArgumentError) {
  auto const reqs = mixed_stream(1000, 0.9, 1);
  sim::replay_options o;
  o.backend = "cuda";
#if CCHT_WITH_CUDA
  if (ccht::cuda_backend::available()) {
    auto const r = sim::replay(reqs, "ccht-lru", 256, o);
    EXPECT_EQ(r.backend, "cuda");
    EXPECT_EQ(r.hits + r.misses(), r.requests);
    return;  // a GPU is present: --backend cuda must run, which it did
  }
#endif
  EXPECT_THROW(sim::replay(reqs, "ccht-lru", 256, o), std::invalid_argument);
  EXPECT_NO_THROW(sim::replay(reqs, "lru", 256, o));  // exact policies run on the host
}

TEST(Replay, AsQueries) {
  std::vector<std::uint64_t> const keys{5, 6, 5};
  auto const q = sim::as_queries(keys);
  ASSERT_EQ(q.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(q[i].key, keys[i]);
    EXPECT_FALSE(q[i].update);
  }
  auto const r = sim::replay(q, "lru", 1, {});
  EXPECT_EQ(r.hits, 0u);
  EXPECT_EQ(sim::replay(q, "lru", 2, {}).hits, 1u);
}

}  // namespace
