// Core-level tests: ccht::bucket_ops over caller-owned bucket arrays of small bucket sizes,
// checked slot by slot (keys, values and exact scores) against the reference model; plus hash
// and policy unit tests.
#include "reference_model.hpp"
#include "test_support.hpp"

#include <ccht/core/bucket.hpp>
#include <ccht/core/bucket_ops.hpp>
#include <ccht/core/hash.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/core/tile.hpp>
#include <ccht/lanes/lockstep_tile.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <random>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using namespace ccht_test;
using ccht::op_status;

/// Caller-owned storage for bucket_ops.
template <int Bs>
struct core_table {
  std::vector<ccht::bucket<Bs>> buckets;
  std::vector<std::uint32_t> versions;
  ccht::bucket_array_view<Bs> view;

  core_table(std::uint32_t nb, std::uint64_t seed) : buckets(nb), versions(nb, 0) {
    for (auto& b : buckets) {
      for (int s = 0; s < Bs; ++s) {
        b.keys[s] = ccht::empty_key;
        b.values[s] = 0xabababababababab;  // garbage in free slots must not matter
        b.scores[s] = ~0ull;
      }
    }
    view = {buckets.data(), versions.data(), nb, seed};
  }
};

template <class Policy, int Bs>
void expect_core_matches(core_table<Bs> const& t, reference_model<Policy, Bs> const& m,
                         int step) {
  for (std::uint32_t b = 0; b < m.num_buckets(); ++b) {
    ASSERT_EQ(t.versions[b] % 2, 0u) << "bucket " << b << " left locked at step " << step;
    for (int s = 0; s < Bs; ++s) {
      auto const& ms = m.bucket(b)[s];
      ASSERT_EQ(t.buckets[b].keys[s], ms.key) << "step " << step << " bucket " << b << " slot " << s;
      if (ms.key == ccht::empty_key) { continue; }
      ASSERT_EQ(t.buckets[b].values[s], ms.value) << "step " << step << " bucket " << b << " slot " << s;
      ASSERT_EQ(t.buckets[b].scores[s],
                model_policy<Policy>::encode(ms.score) + ms.pins * ccht::pin_one)
          << "step " << step << " bucket " << b << " slot " << s;
    }
  }
}

/// Bucket of @p k after a pin or unpin (which locks only that one), or ~0 when absent.
template <int Bs>
std::uint32_t pinned_bucket(core_table<Bs> const& t, key_type k, ccht::candidate_buckets cb) {
  for (std::uint32_t b : {cb.first, cb.second}) {
    for (int s = 0; s < Bs; ++s) {
      if (t.buckets[b].keys[s] == k) { return b; }
    }
  }
  return ~std::uint32_t{0};
}

/// Checks the core op by op against the reference model, on a tile of @p Lanes lanes (1: the
/// CPU backend's scalar_tile; more: a lockstep tile, as the CUDA kernels run it).
template <class Policy, int Bs, unsigned Lanes = 1>
void run_core_equivalence(std::uint32_t nb, std::uint32_t universe, int steps,
                          std::uint64_t seed, unsigned rng_seed, int ops_per_tick = 1,
                          bool with_pins = false) {
  using ops = ccht::bucket_ops<Policy, Bs>;
  auto const on_tile = [](auto&& f) { return ccht::lanes::on_tile<Lanes>(f); };
  core_table<Bs> t(nb, seed);
  reference_model<Policy, Bs> m(nb, seed);
  std::mt19937_64 rng(rng_seed);
  std::size_t evictions = 0, no_space = 0;
  for (int step = 0; step < steps; ++step) {
    key_type const k = (rng() % universe) * 7919 + 3;
    unsigned const kind = rng() % (with_pins ? 14 : 10);
    auto const versions_before = t.versions;
    auto const cb = ccht::candidates(k, seed, nb);
    bool writes = false;
    // ops_per_tick > 1 repeats ticks (as racing threads may), so the tie rules decide victims.
    tick_type const tick = 1 + tick_type(step / ops_per_tick);
    if (kind < 4) {
      auto const [hit, v] = on_tile([&](auto const& tile) {
        value_type val = 0xfeed;
        bool const h = ops::find(tile, t.view, k, tick, val);
        return std::pair{h, val};
      });
      auto const mv = m.find(k, tick);
      ASSERT_EQ(hit, mv.has_value()) << "find " << k << " step " << step;
      if (hit) { ASSERT_EQ(v, *mv) << "find " << k << " step " << step; }
    } else if (kind < 8) {
      value_type const val = rng();
      auto const [s, ek, ev] = on_tile([&](auto const& tile) {
        key_type e = 0;
        value_type ev_ = 0;
        op_status const st = ops::insert_or_assign(tile, t.view, k, val, tick, e, ev_);
        return std::tuple{st, e, ev_};
      });
      auto const u = m.insert_or_assign(k, val, tick);
      ASSERT_EQ(s, u.status) << "upsert " << k << " step " << step;
      if (s == op_status::inserted_evicted) {
        ASSERT_EQ(ek, u.evicted_key) << "step " << step;
        ASSERT_EQ(ev, u.evicted_value) << "step " << step;
        ++evictions;
      }
      no_space += s == op_status::no_space;
      writes = true;
    } else if (kind == 8) {
      bool const erased = on_tile([&](auto const& tile) { return ops::erase(tile, t.view, k); });
      ASSERT_EQ(erased, m.erase(k)) << "erase " << k << " step " << step;
      writes = true;
    } else if (kind == 9) {
      bool const has = on_tile([&](auto const& tile) { return ops::contains(tile, t.view, k); });
      ASSERT_EQ(has, m.contains(k)) << "contains " << k;
    } else if constexpr (Policy::pinnable) {
      // Pins: unpins a little rarer than pins, so buckets fill with pinned entries (no_space).
      writes = m.contains(k);
      if (kind < 12) {
        value_type mv = 0;
        auto const [st, v] = on_tile([&](auto const& tile) {
          value_type val = 0;
          auto const r = ops::pin(tile, t.view, k, val);
          return std::pair{r, val};
        });
        ASSERT_EQ(st, m.pin(k, mv)) << "pin " << k << " step " << step;
        if (st != ccht::pin_status::absent) { ASSERT_EQ(v, mv) << "pin " << k; }
      } else {
        auto const st = on_tile([&](auto const& tile) { return ops::unpin(tile, t.view, k, tick); });
        ASSERT_EQ(st, m.unpin(k, tick)) << "unpin " << k << " step " << step;
      }
    }
    // Writers lock and release exactly their two buckets (+2 each), a pin or unpin only the
    // key's bucket; readers write no version.
    for (std::uint32_t b = 0; b < nb; ++b) {
      bool mine = writes && (b == cb.first || b == cb.second);
      if (kind >= 10 && writes) { mine = b == pinned_bucket(t, k, cb); }
      ASSERT_EQ(t.versions[b], versions_before[b] + (mine ? 2u : 0u)) << "bucket " << b;
    }
    expect_core_matches(t, m, step);
    if (::testing::Test::HasFatalFailure()) { return; }
  }
  EXPECT_GT(evictions, std::size_t(steps) / 20);
  if (with_pins) { EXPECT_GT(no_space, 0u) << "no insert met two buckets of pinned entries"; }
}

template <class Policy>
class CoreModel : public ::testing::Test {};
using Policies = ::testing::Types<ccht::lru, ccht::fifo, ccht::lfu>;
TYPED_TEST_SUITE(CoreModel, Policies, policy_names);

TYPED_TEST(CoreModel, BucketSize4TwoBuckets) {
  run_core_equivalence<TypeParam, 4>(2, 24, 30000, ccht::default_seed, 31);
}
TYPED_TEST(CoreModel, BucketSize4FiveBuckets) {
  run_core_equivalence<TypeParam, 4>(5, 60, 30000, 0x5eed, 32);
}
TYPED_TEST(CoreModel, BucketSize1) {
  run_core_equivalence<TypeParam, 1>(4, 16, 20000, 7, 33);
}
TYPED_TEST(CoreModel, BucketSize4TiedTicks) {
  // Equal minima: the first bucket loses; equal scores in a bucket: the lowest slot loses.
  run_core_equivalence<TypeParam, 4>(3, 40, 30000, 0x71e5, 35, 8);
}
// Pins: pinned slots are never victims, their scores hold the pin count, and an insert into two
// buckets of pinned entries fails with no_space, op by op against the model.
TEST(CoreModelPins, LruBucketSize4) {
  run_core_equivalence<ccht::lru, 4>(4, 40, 30000, 0x9140, 36, 1, true);
}
TEST(CoreModelPins, FifoBucketSize4) {
  run_core_equivalence<ccht::fifo, 4>(4, 40, 30000, 0x9141, 37, 1, true);
}
TEST(CoreModelPins, LruBucketSize1) {
  run_core_equivalence<ccht::lru, 1>(4, 12, 20000, 0x9142, 38, 1, true);
}

TEST(CoreModelWide, BucketSize32Lru) {
  run_core_equivalence<ccht::lru, 32>(3, 250, 20000, 8, 34);
}

// The same model checks with the lanes of a GPU tile (include/ccht/lanes): 4 lanes on 4-slot
// buckets, 16 (the kernels' width) and 32 (a warp) on wider ones; tied ticks and pins included.
TYPED_TEST(CoreModel, BucketSize4FourLanesTiedTicks) {
  run_core_equivalence<TypeParam, 4, 4>(3, 40, 6000, 0x71e5, 35, 8);
}
TYPED_TEST(CoreModel, BucketSize16SixteenLanes) {
  run_core_equivalence<TypeParam, 16, 16>(4, 160, 6000, 0x16, 39);
}
TEST(CoreModelPins, LruBucketSize4TwoLanes) {
  run_core_equivalence<ccht::lru, 4, 2>(4, 40, 6000, 0x9140, 36, 1, true);
}
TEST(CoreModelPins, FifoBucketSize4FourLanes) {
  run_core_equivalence<ccht::fifo, 4, 4>(4, 40, 6000, 0x9141, 37, 1, true);
}
TEST(CoreModelWide, BucketSize32LruWarpLanes) {
  run_core_equivalence<ccht::lru, 32, 32>(3, 250, 4000, 8, 34);
}

TEST(CoreOps, FifoFindsWriteNothing) {
  // fifo does not promote, so a find must not write the slot's score (no cache-line write).
  core_table<4> t(2, 1);
  using ops = ccht::bucket_ops<ccht::fifo, 4>;
  key_type ek = 0;
  value_type ev = 0;
  ASSERT_EQ(ops::insert_or_assign(ccht::scalar_tile{}, t.view, 42, 1, 5, ek, ev), op_status::inserted);
  auto const before = t.buckets;
  value_type v = 0;
  ASSERT_TRUE(ops::find(ccht::scalar_tile{}, t.view, 42, 100, v));
  EXPECT_EQ(std::memcmp(before.data(), t.buckets.data(), before.size() * sizeof(before[0])), 0);
}

TEST(CoreOps, LruNeverMovesBackInTime) {
  // A find with an older tick (a racing thread) must not lower the score.
  core_table<4> t(2, 1);
  using ops = ccht::bucket_ops<ccht::lru, 4>;
  key_type ek = 0;
  value_type ev = 0, v = 0;
  ops::insert_or_assign(ccht::scalar_tile{}, t.view, 42, 1, 50, ek, ev);
  ASSERT_TRUE(ops::find(ccht::scalar_tile{}, t.view, 42, 10, v));
  auto const cb = ccht::candidates(42, 1, 2);
  EXPECT_EQ(t.buckets[cb.first].scores[0], 50u);
  ops::insert_or_assign(ccht::scalar_tile{}, t.view, 42, 2, 20, ek, ev);
  EXPECT_EQ(t.buckets[cb.first].scores[0], 50u);
  EXPECT_EQ(t.buckets[cb.first].values[0], 2u);
}

// ---------------------------------------------------------------------------------------------
// Hash

TEST(Hash, CandidatesDistinctAndInRange) {
  std::mt19937_64 rng(1);
  for (std::uint32_t nb : {2u, 3u, 4u, 5u, 7u, 16u, 1000u, 65537u, 0xffffffffu}) {
    for (int i = 0; i < 20000; ++i) {
      key_type const k = rng();
      auto const c = ccht::candidates(k, ccht::default_seed, nb);
      ASSERT_LT(c.first, nb);
      ASSERT_LT(c.second, nb);
      ASSERT_NE(c.first, c.second) << "key " << k << " nb " << nb;
    }
  }
}

TEST(Hash, CandidatesSpreadEvenly) {
  constexpr std::uint32_t nb = 8;
  std::vector<int> first(nb), second(nb), pair(nb * nb);
  for (key_type k = 0; k < 80000; ++k) {
    auto const c = ccht::candidates(k, ccht::default_seed, nb);
    ++first[c.first];
    ++second[c.second];
    ++pair[c.first * nb + c.second];
  }
  for (std::uint32_t b = 0; b < nb; ++b) {
    EXPECT_NEAR(first[b], 10000, 500) << b;
    EXPECT_NEAR(second[b], 10000, 500) << b;
    for (std::uint32_t c = 0; c < nb; ++c) {
      if (b != c) { EXPECT_NEAR(pair[b * nb + c], 80000 / 56, 300) << b << "," << c; }
    }
  }
}

TEST(Hash, DeterministicAndSeeded) {
  static_assert(ccht::hash64(1, 2) == ccht::hash64(1, 2));
  EXPECT_NE(ccht::hash64(1, 2), ccht::hash64(1, 3));
  EXPECT_NE(ccht::hash64(1, 2), ccht::hash64(2, 2));
  int same = 0;
  for (key_type k = 0; k < 1000; ++k) {
    auto const a = ccht::candidates(k, 1, 1024);
    auto const b = ccht::candidates(k, 2, 1024);
    same += a.first == b.first;
  }
  EXPECT_LT(same, 20);
}

// ---------------------------------------------------------------------------------------------
// Policies

TEST(Policy, LfuCountSaturatesAndTicksWrap) {
  using ccht::lfu;
  auto s = lfu::on_insert(5);
  EXPECT_EQ(lfu::count(s), 1u);
  for (int i = 0; i < 70000; ++i) { s = lfu::on_hit(s, 10); }
  EXPECT_EQ(lfu::count(s), lfu::max_count);
  EXPECT_EQ(s & lfu::tick_mask, 10u);
  auto const w = lfu::on_insert((std::uint64_t{1} << 48) + 3);
  EXPECT_EQ(lfu::count(w), 1u);
  EXPECT_EQ(w & lfu::tick_mask, 3u);
  // fewer uses lose regardless of recency; equal uses: older loses
  EXPECT_LT(lfu::on_insert(1000), lfu::on_hit(lfu::on_insert(1), 2));
  EXPECT_LT(lfu::on_hit(lfu::on_insert(1), 2), lfu::on_hit(lfu::on_insert(1), 3));
}

TEST(Policy, ScoresOrderAsDocumented) {
  EXPECT_EQ(ccht::lru::on_insert(7), 7u);
  EXPECT_EQ(ccht::lru::on_hit(7, 9), 9u);
  EXPECT_EQ(ccht::lru::on_hit(9, 7), 9u);
  EXPECT_EQ(ccht::fifo::on_hit(7, 9), 7u);
  EXPECT_FALSE(ccht::fifo::promotes_on_hit);
  EXPECT_TRUE(ccht::lru::promotes_on_hit);
  EXPECT_TRUE(ccht::lfu::promotes_on_hit);
}

/// promotes_by_max is a promise that on_hit(s, t) == max(s, on_insert(t)): promotion then uses
/// an atomic max instead of on_hit, so a policy that breaks the promise would be promoted wrongly.
template <class Policy>
void check_promotes_by_max() {
  std::mt19937_64 rng(11);
  bool holds = true;
  for (int i = 0; i < 20000 && holds; ++i) {
    ccht::score_type const s = i % 3 == 0 ? rng() : rng() % 1000;
    ccht::tick_type const t = i % 3 == 1 ? rng() : rng() % 1000;
    ccht::score_type const ins = Policy::on_insert(t);
    holds = Policy::on_hit(s, t) == (s > ins ? s : ins);
  }
  EXPECT_EQ(holds, Policy::promotes_by_max) << Policy::name;
}

TEST(Policy, PromotesByMaxMeansOnHitIsAMax) {
  check_promotes_by_max<ccht::lru>();
  check_promotes_by_max<ccht::double_lru>();
  check_promotes_by_max<ccht::coarse_lru>();
  check_promotes_by_max<ccht::lru_cht>();
  check_promotes_by_max<ccht::random_cht>();
  check_promotes_by_max<ccht::lfu>();
  check_promotes_by_max<ccht::fifo>();
}

TEST(Layout, BucketIsThreeCacheLines) {
  static_assert(sizeof(ccht::bucket<16>) == 384);
  static_assert(alignof(ccht::bucket<16>) == 128);
  static_assert(offsetof(ccht::bucket<16>, values) == 128);
  static_assert(offsetof(ccht::bucket<16>, scores) == 256);
  static_assert(ccht::is_reserved_key(ccht::empty_key) && ccht::is_reserved_key(ccht::claimed_key));
  static_assert(!ccht::is_reserved_key(ccht::claimed_key - 1));
  SUCCEED();
}

}  // namespace
