// The GPU's lane logic on the CPU (include/ccht/lanes/lockstep_tile.hpp, docs/gpu-lanes.md):
// - the lockstep tile's collectives against CUDA's semantics, at 2 to 32 lanes;
// - each hazard check on code that breaks it on purpose, and the core's fixes of issue 32's
//   findings (the version check that skipped a shfl, the victim age each lane read alone) with
//   another writer's store landed between two lanes, at every step of the operation;
// - the differential test: the same sequence of operations on one-lane and N-lane tiles gives the
//   same results, evictions, statuses and bytes of storage, for every policy and global search,
//   on random and adversarial sequences (tied scores, full buckets, pinned entries);
// - the page cache's per-key operations, differential the same way;
// - several host threads, each driving a 16-lane tile, racing on one table (TSan build too).
#include <ccht/backend.hpp>
#include <ccht/cache/page_cache.hpp>
#include <ccht/core/bucket_ops.hpp>
#include <ccht/core/global.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/lanes/lockstep_tile.hpp>

#include "lanes_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

namespace lanes = ccht::lanes;
using ccht::key_type;
using ccht::op_status;
using ccht::pin_status;
using ccht::score_type;
using ccht::tick_type;
using ccht::value_type;

using ccht::test::hazard_of;

// ---- the tile's collectives ----------------------------------------------------------------------

template <class W>
class LockstepTile : public ::testing::Test {};
using Widths = ::testing::Types<std::integral_constant<unsigned, 2>, std::integral_constant<unsigned, 4>,
                                std::integral_constant<unsigned, 8>, std::integral_constant<unsigned, 16>,
                                std::integral_constant<unsigned, 32>>;
TYPED_TEST_SUITE(LockstepTile, Widths);

TYPED_TEST(LockstepTile, CollectivesHaveCudaSemantics) {
  constexpr unsigned N = TypeParam::value;
  struct out {
    unsigned ballot = 0;
    bool shuffles_right = false;
    std::uint64_t sum = 0;
    bool operator==(out const&) const = default;
  };
  out const r = lanes::run<N>([](auto const& tile) {
    unsigned const me = tile.thread_rank();
    out o;
    o.ballot = tile.ballot(me % 3 == 0);
    bool ok = true;
    for (unsigned src = 0; src < N; ++src) {  // 64-bit values from every lane
      std::uint64_t const mine = (std::uint64_t{me} << 40) | 0xabcdu;
      ok = ok && tile.shfl(mine, src) == ((std::uint64_t{src} << 40) | 0xabcdu);
    }
    for (unsigned m = 1; m < N; m <<= 1) { ok = ok && tile.shfl_xor(me, m) == (me ^ m); }
    std::uint64_t s = me + 1;  // a butterfly reduction, as the core's minimum searches
    for (unsigned off = N / 2; off > 0; off >>= 1) { s += tile.shfl_xor(s, off); }
    tile.sync();
    o.shuffles_right = tile.ballot(ok) == (N == 32 ? ~0u : (1u << N) - 1);
    o.sum = s;
    return o;
  });
  unsigned expect = 0;
  for (unsigned l = 0; l < N; l += 3) { expect |= 1u << l; }
  EXPECT_EQ(r.ballot, expect);
  EXPECT_TRUE(r.shuffles_right);
  EXPECT_EQ(r.sum, std::uint64_t{N} * (N + 1) / 2);
}

/// The order in which the lanes of @p N started their first step, under @p seed.
template <unsigned N>
std::vector<unsigned> first_step_order(std::uint64_t seed) {
  std::vector<unsigned> seen;
  lanes::run_options opt;
  opt.order_seed = seed;
  opt.before_step = [&](unsigned lane, std::uint64_t step) {
    if (step == 0) { seen.push_back(lane); }
  };
  (void)lanes::run<N>([](auto const& tile) { return tile.ballot(true); }, opt);
  return seen;
}

TYPED_TEST(LockstepTile, LanesRunInTheOrderAsked) {
  constexpr unsigned N = TypeParam::value;
  std::vector<unsigned> by_rank(N);
  std::iota(by_rank.begin(), by_rank.end(), 0u);
  EXPECT_EQ(first_step_order<N>(0), by_rank);  // seed 0: rank order
  std::vector<unsigned> const shuffled = first_step_order<N>(7);
  std::vector<unsigned> sorted = shuffled;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, by_rank);  // every lane once
  if constexpr (N >= 8) { EXPECT_NE(shuffled, by_rank) << "seed 7 left the lanes in rank order"; }
}

// ---- hazards, each on code that breaks it on purpose ---------------------------------------------

TEST(LaneHazards, ACollectiveInABranchSomeLanesSkip) {
  std::string report;
  auto const h = hazard_of([] {
    (void)lanes::run<16>([](auto const& tile) {
      if (tile.thread_rank() < 8) { return tile.ballot(true); }
      return tile.ballot(false);  // another call site: the lanes did not meet
    });
  }, &report);
  EXPECT_EQ(h, lanes::hazard_kind::divergent_collective);
  EXPECT_NE(report.find("lane 8"), std::string::npos) << report;
}

TEST(LaneHazards, AShuffleOutsideTheTile) {
  EXPECT_EQ(hazard_of([] { (void)lanes::run<8>([](auto const& t) { return t.shfl(1u, 8); }); }),
            lanes::hazard_kind::lane_out_of_range);
  EXPECT_EQ(hazard_of([] { (void)lanes::run<8>([](auto const& t) { return t.shfl_xor(1u, 8); }); }),
            lanes::hazard_kind::lane_out_of_range);
}

TEST(LaneHazards, ALaneThatReturnsWhileOthersWait) {
  EXPECT_EQ(hazard_of([] {
              lanes::run<4>([](auto const& t) {
                if (t.thread_rank() == 3) { return; }
                t.sync();
              });
            }),
            lanes::hazard_kind::lane_left_early);
}

TEST(LaneHazards, LanesThatReturnDifferentResults) {
  EXPECT_EQ(hazard_of([] { (void)lanes::run<4>([](auto const& t) { return t.thread_rank(); }); }),
            lanes::hazard_kind::nonuniform_result);
}

TEST(LaneHazards, ALoopThatNeverEnds) {
  lanes::run_options opt;
  opt.max_steps = 1000;
  EXPECT_EQ(hazard_of([&] {
              lanes::run<4>([](auto const& t) {
                while (t.ballot(true) != 0) {}
              }, opt);
            }),
            lanes::hazard_kind::runaway);
}

TEST(LaneHazards, TwoLanesStoringOneWordInOneStep) {
#if CCHT_LANE_HOOKS
  std::uint64_t word = 0;
  EXPECT_EQ(hazard_of([&] {
              lanes::run<16>([&](auto const& t) {
                ccht::detail::store_relaxed(word, std::uint64_t{t.thread_rank()});  // no lane guard
              });
            }),
            lanes::hazard_kind::racing_store);
  // The same store by lane 0 only is fine, and so are stores to one word in different steps.
  EXPECT_EQ(hazard_of([&] {
              lanes::run<16>([&](auto const& t) {
                if (t.thread_rank() == 0) { ccht::detail::store_relaxed(word, std::uint64_t{1}); }
                t.sync();
                if (t.thread_rank() == 1) { ccht::detail::store_relaxed(word, std::uint64_t{2}); }
              });
            }),
            std::nullopt);
#else
  GTEST_SKIP() << "stores report to the runner only in the lanes preset (CCHT_LANE_HOOKS)";
#endif
}

TEST(LaneHazards, RunsNestInNoLane) {
  EXPECT_THROW(lanes::run<2>([](auto const&) { (void)lanes::run<2>([](auto const&) {}); }),
               std::logic_error);
}

// ---- finding 1: the version check ---------------------------------------------------------------

/// read_bucket as it was before issue 32: the shfl inside `||` is skipped by a lane that read an
/// odd version, while the others wait in it.
template <class Tile, int B>
int old_read_bucket(Tile const& tile, ccht::bucket<B> const& b, std::uint32_t const& version,
                    key_type key, value_type& value) {
  unsigned spins = 0;
  while (true) {
    std::uint32_t const v1 = ccht::detail::load_acquire(version);
    if (tile.ballot((v1 & 1u) != 0 || v1 != tile.shfl(v1, 0)) != 0) {
      ccht::detail::spin_wait(spins);
      continue;
    }
    int const slot = ccht::detail::find_slot(tile, b, key);
    value_type v = 0;
    if (slot >= 0) { v = ccht::detail::load_relaxed(b.values[slot]); }
    ccht::detail::fence_acquire();
    if (tile.ballot(ccht::detail::load_relaxed(version) != v1) == 0) {
      value = v;
      return slot;
    }
  }
}

/// A bucket holding key 7 (value 70) in slot 3.
struct one_bucket {
  ccht::bucket<16> b{};
  std::uint32_t version = 0;
  one_bucket() {
    for (int s = 0; s < 16; ++s) { b.keys[s] = ccht::empty_key; }
    b.keys[3] = 7;
    b.values[3] = 70;
  }
};

/// A writer that locks the bucket before lane @p lane's step @p step and unlocks it two steps
/// later, before lane 0 (the reader must then retry and succeed).
lanes::run_options writer_between_lanes(std::uint32_t& version, unsigned lane, std::uint64_t step) {
  lanes::run_options opt;
  opt.max_steps = 10000;
  opt.before_step = [&version, lane, step](unsigned l, std::uint64_t s) {
    if (l == lane && s == step) { version += 1; }
    if (l == 0 && s == step + 2 && (version & 1u) != 0) { version += 1; }
  };
  return opt;
}

TEST(LaneFindings, OldVersionCheckSkipsAShuffleWhenAWriterLocksBetweenLanes) {
  one_bucket t;
  auto const h = hazard_of([&] {
    (void)lanes::run<16>([&](auto const& tile) {
      value_type v = 0;
      int const slot = old_read_bucket(tile, t.b, t.version, 7, v);
      return std::pair{slot, v};
    }, writer_between_lanes(t.version, 8, 0));
  });
  EXPECT_EQ(h, lanes::hazard_kind::divergent_collective);
}

TEST(LaneFindings, VersionCheckStaysConvergedWhereverAWriterLocks) {
  for (unsigned lane = 1; lane < 16; lane += 3) {
    for (std::uint64_t step = 0; step < 4; ++step) {
      one_bucket t;
      std::pair<int, value_type> r{};
      std::string report;
      auto const h = hazard_of([&] {
        r = lanes::run<16>([&](auto const& tile) {
          value_type v = 0;
          int const slot = ccht::detail::read_bucket(tile, t.b, t.version, 7, v);
          return std::pair{slot, v};
        }, writer_between_lanes(t.version, lane, step));
      }, &report);
      ASSERT_EQ(h, std::nullopt) << "writer before lane " << lane << " step " << step << ": " << report;
      EXPECT_EQ(r.first, 3);
      EXPECT_EQ(r.second, 70u);
    }
  }
}

// ---- tables for the core: every view a policy can have -----------------------------------------

/// How a table's global layer searches (none for policies without one).
enum class search { none, sampled, tail_index, two_level, own_first };

char const* name_of(search s) {
  switch (s) {
    case search::none: return "none";
    case search::sampled: return "sampled";
    case search::tail_index: return "tail_index";
    case search::two_level: return "two_level";
    case search::own_first: return "own_first";
  }
  return "?";
}

/// Caller-owned storage for the core with every word a view may use.
template <int B>
struct lane_table {
  std::vector<ccht::bucket<B>> buckets;
  std::vector<std::uint32_t> versions;
  std::vector<score_type> index;      // tails, then upper words
  std::vector<std::uint64_t> words;   // [0] live, [16] victim age (own lines)
  ccht::bucket_array_view<B> view{};

  lane_table(std::uint32_t nb, std::uint64_t seed, search s, std::uint64_t capacity,
             bool optimistic_pins)
      : buckets(nb), versions(nb, 0), words(32, 0) {
    for (auto& b : buckets) {
      for (int i = 0; i < B; ++i) {
        b.keys[i] = ccht::empty_key;
        b.values[i] = 0x5a5a5a5a5a5a5a5aull;
        b.scores[i] = 0;
      }
    }
    view.buckets = buckets.data();
    view.versions = versions.data();
    view.num_buckets = nb;
    view.seed = seed;
    view.optimistic_pins = optimistic_pins;
    view.max_kicks = 64;
    if (s == search::none) { return; }
    view.live = &words[0];
    view.capacity = capacity;
    view.samples = s == search::sampled ? 4 : s == search::tail_index ? 32 : 512;
    if (s == search::sampled) { return; }
    std::uint32_t const lines = ccht::detail::tail_index_lines(nb);
    index.assign(nb + lines, ccht::detail::no_rank);
    view.tails = index.data();
    if (s == search::tail_index) { return; }
    view.upper = index.data() + nb;
    if (s == search::own_first) {
      view.victim_age = &words[16];
      view.own_slack = 64;
    }
  }

  /// Every byte the core may write, for a comparison of two tables.
  bool same_as(lane_table const& o) const {
    return std::memcmp(buckets.data(), o.buckets.data(), buckets.size() * sizeof(buckets[0])) == 0 &&
           versions == o.versions && index == o.index && words == o.words;
  }
};

/// What one operation returned (every field the core reports).
struct op_result {
  int kind = 0;
  int status = 0;
  value_type value = 0;
  key_type evicted_key = 0;
  value_type evicted_value = 0;
  bool operator==(op_result const&) const = default;
};

/// Operation kinds of the differential sequences.
enum op_kind : int { op_find, op_contains, op_upsert, op_erase, op_pin, op_unpin, op_pin_free, op_unpin_free };

/// Runs one operation of @p kind on @p tile (every lane calls; returns by value).
template <class Policy, int B, class Tile>
op_result run_op(Tile const& tile, ccht::bucket_array_view<B> const& v, int kind, key_type k,
                 value_type val, tick_type tick) {
  using ops = ccht::bucket_ops<Policy, B>;
  op_result r;
  r.kind = kind;
  switch (kind) {
    case op_find: r.status = ops::find(tile, v, k, tick, r.value); break;
    case op_contains: r.status = ops::contains(tile, v, k); break;
    case op_upsert:
      r.status = static_cast<int>(ops::insert_or_assign(tile, v, k, val, tick, r.evicted_key,
                                                        r.evicted_value));
      break;
    case op_erase: r.status = ops::erase(tile, v, k); break;
    default:
      if constexpr (Policy::pinnable) {
        auto const any = [](value_type) { return true; };
        if (kind == op_pin) {
          r.status = static_cast<int>(ops::pin(tile, v, k, r.value));
        } else if (kind == op_unpin) {
          r.status = static_cast<int>(ops::unpin(tile, v, k, tick));
        } else if (kind == op_pin_free) {
          r.status = static_cast<int>(ops::pin_optimistic(tile, v, k, r.value, any));
        } else if constexpr (Policy::promotes_by_max) {
          r.status = static_cast<int>(ops::unpin_optimistic(tile, v, k, tick, r.value, any));
        }
      }
  }
  return r;
}

/// Shape of a differential sequence.
struct sequence {
  std::uint32_t buckets = 8;
  std::uint32_t universe = 200;   // distinct keys
  int steps = 1500;
  int ops_per_tick = 1;           // > 1: tied ticks, so equal scores decide victims
  bool pins = false;              // pins and unpins (more pins: buckets fill with pinned entries)
  bool optimistic = false;        // lock-free pins (claims on every eviction)
  std::uint64_t seed = 1;
};

/// The differential test: @p s on a one-lane and an N-lane tile, compared op by op and byte by
/// byte. Also counts evictions so that a sequence that never reaches the interesting paths fails.
template <class Policy, int B, unsigned N>
void run_differential(search srch, sequence const& s) {
  SCOPED_TRACE(std::string(Policy::name) + " " + name_of(srch) + " on " + std::to_string(N) +
               " lanes, B = " + std::to_string(B) + ", seed " + std::to_string(s.seed));
  std::uint64_t const slots = std::uint64_t{s.buckets} * B;
  std::uint64_t const capacity = srch == search::none ? 0 : slots * 3 / 4;
  lane_table<B> one(s.buckets, 0x1234 + s.seed, srch, capacity, s.optimistic);
  lane_table<B> many(s.buckets, 0x1234 + s.seed, srch, capacity, s.optimistic);
  std::mt19937_64 rng(s.seed);
  std::size_t evictions = 0, refusals = 0;
  for (int step = 0; step < s.steps; ++step) {
    key_type const k = (rng() % s.universe) * 2654435761u + 5;
    unsigned const dice = static_cast<unsigned>(rng() % 100);
    int kind = dice < 30 ? op_find : dice < 35 ? op_contains : dice < 80 ? op_upsert : op_erase;
    if constexpr (Policy::pinnable) {
      if (s.pins && dice >= 85) {
        bool const free = s.optimistic && Policy::promotes_by_max;
        kind = dice < 94 ? (free ? op_pin_free : op_pin) : (free ? op_unpin_free : op_unpin);
      }
    }
    value_type const val = rng();
    tick_type const tick = 1 + static_cast<tick_type>(step / s.ops_per_tick);
    if (srch == search::own_first && step % 97 == 0) {  // the age other tiles would have left
      one.words[16] = many.words[16] = rng() % 4096;
    }
    op_result const a = lanes::on_tile<1>([&](auto const& tile) {
      return run_op<Policy, B>(tile, one.view, kind, k, val, tick);
    });
    op_result b;
    std::string report;
    auto const h = hazard_of([&] {
      b = lanes::run<N>([&](auto const& tile) {
        return run_op<Policy, B>(tile, many.view, kind, k, val, tick);
      });
    }, &report);
    ASSERT_EQ(h, std::nullopt) << "step " << step << " op " << kind << ": " << report;
    ASSERT_EQ(a, b) << "step " << step << " op " << kind << " key " << k;
    ASSERT_TRUE(one.same_as(many)) << "storage differs after step " << step << " op " << kind;
    evictions += kind == op_upsert && a.status == static_cast<int>(op_status::inserted_evicted);
    refusals += kind == op_upsert && a.status == static_cast<int>(op_status::no_space);
  }
  EXPECT_GT(evictions, 0u) << "the sequence never evicted";
  if (s.pins && !Policy::kick_out) { EXPECT_GT(refusals + evictions, 0u); }
}

/// Every width the kernels could use: 2 to 16 lanes on 16-slot buckets, 32 on 32-slot ones.
template <class Policy>
void run_all_widths(search srch, sequence s) {
  run_differential<Policy, 16, 2>(srch, s);
  run_differential<Policy, 16, 4>(srch, s);
  run_differential<Policy, 16, 8>(srch, s);
  run_differential<Policy, 16, 16>(srch, s);
  sequence wide = s;
  wide.buckets = std::max<std::uint32_t>(2, s.buckets / 2);
  run_differential<Policy, 32, 32>(srch, wide);
}

/// The random sequence and the three adversarial ones.
template <class Policy>
void run_sequences(search srch) {
  sequence random;
  random.seed = 11;
  run_all_widths<Policy>(srch, random);
  sequence tied = random;  // 16 operations per tick: equal scores everywhere
  tied.ops_per_tick = 16;
  tied.seed = 12;
  run_all_widths<Policy>(srch, tied);
  sequence full = random;  // two buckets: every insert evicts from full buckets
  full.buckets = 2;
  full.universe = 400;
  full.seed = 13;
  run_all_widths<Policy>(srch, full);
  if constexpr (Policy::pinnable) {
    sequence pinned = random;  // pins outnumber unpins: buckets of pinned entries
    pinned.pins = true;
    pinned.universe = 160;
    pinned.seed = 14;
    run_all_widths<Policy>(srch, pinned);
    pinned.optimistic = true;  // lock-free pins, and claims on every eviction
    pinned.seed = 15;
    run_all_widths<Policy>(srch, pinned);
  }
}

TEST(LaneDifferential, Lru) { run_sequences<ccht::lru>(search::none); }
TEST(LaneDifferential, Fifo) { run_sequences<ccht::fifo>(search::none); }
TEST(LaneDifferential, Lfu) { run_sequences<ccht::lfu>(search::none); }
TEST(LaneDifferential, DoubleLruSampled) { run_sequences<ccht::double_lru>(search::sampled); }
TEST(LaneDifferential, DoubleLruTailIndex) { run_sequences<ccht::double_lru>(search::tail_index); }
TEST(LaneDifferential, DoubleLruTwoLevel) { run_sequences<ccht::double_lru>(search::two_level); }
TEST(LaneDifferential, DoubleLruOwnFirst) { run_sequences<ccht::double_lru>(search::own_first); }
TEST(LaneDifferential, CoarseLru) { run_sequences<ccht::coarse_lru>(search::sampled); }
TEST(LaneDifferential, LruChtTwoLevel) { run_sequences<ccht::lru_cht>(search::two_level); }
TEST(LaneDifferential, LruChtSampled) { run_sequences<ccht::lru_cht>(search::sampled); }
TEST(LaneDifferential, RandomCht) { run_sequences<ccht::random_cht>(search::sampled); }

// ---- finding 4: a value that steers a collective, read by every lane ----------------------------

TEST(LaneFindings, OwnFirstAgreesOnTheVictimAgeWhateverItIsChangedTo) {
  // A full double-LRU table searched own-first; another tile's eviction rewrites the victim age
  // between two lanes of every step of an insert in turn. Each lane reading the age would make
  // some lanes evict in place and the others search (divergent collectives).
  for (std::uint64_t step = 0; step < 40; ++step) {
    lane_table<16> t(8, 99, search::own_first, 96, false);
    tick_type tick = 1;
    for (key_type k = 1; k <= 96; ++k) {  // fill to the capacity, one lane
      key_type ek;
      value_type ev;
      (void)ccht::bucket_ops<ccht::double_lru, 16>::insert_or_assign(ccht::scalar_tile{}, t.view,
                                                                      k * 7919, k, tick++, ek, ev);
    }
    t.words[16] = 1;  // any own entry is old enough
    lanes::run_options opt;
    opt.before_step = [&](unsigned lane, std::uint64_t s) {
      if (lane == 8 && s == step) { ccht::detail::store_relaxed(t.words[16], score_type{1} << 40); }
    };
    std::string report;
    auto const h = hazard_of([&] {
      (void)lanes::run<16>([&](auto const& tile) {
        return run_op<ccht::double_lru, 16>(tile, t.view, op_upsert, 5000 * 7919, 1, tick + 1);
      }, opt);
    }, &report);
    ASSERT_EQ(h, std::nullopt) << "age rewritten before lane 8 of step " << step << ": " << report;
    EXPECT_EQ(t.words[0], 96u) << "the live count left the capacity";
  }
}

// ---- the page cache's per-key operations ----------------------------------------------------------

template <unsigned N>
void run_page_differential(std::uint64_t seed, bool tight) {
  SCOPED_TRACE("page cache on " + std::to_string(N) + " lanes, seed " + std::to_string(seed));
  std::size_t const pages = tight ? 24 : 96;
  ccht::page_cache_options o;
  o.seed = seed;
  ccht::page_cache<ccht::cpu_backend, ccht::double_lru> one(pages * 16, 16, o), many(pages * 16, 16, o);
  auto const a = one.ref(), b = many.ref();
  auto const same_storage = [&] {
    auto const& ia = a.index;
    auto const& ib = b.index;
    bool same = std::memcmp(ia.buckets, ib.buckets, ia.num_buckets * sizeof(ia.buckets[0])) == 0 &&
                std::memcmp(ia.versions, ib.versions, ia.num_buckets * sizeof(std::uint32_t)) == 0 &&
                *ia.live == *ib.live;
    same = same && std::memcmp(a.ring.slots, b.ring.slots, pages * sizeof(ccht::page_id)) == 0 &&
           std::memcmp(a.ring.words, b.ring.words, sizeof(*a.ring.words)) == 0 &&
           std::memcmp(a.owner, b.owner, pages * sizeof(key_type)) == 0;
    if (ia.tails != nullptr) {
      std::size_t const words = ia.num_buckets + ccht::detail::tail_index_lines(ia.num_buckets);
      same = same && std::memcmp(ia.tails, ib.tails, words * sizeof(score_type)) == 0;
    }
    return same;
  };
  std::mt19937_64 rng(seed);
  std::size_t fills = 0, evictions = 0;
  for (int step = 0; step < 2000; ++step) {
    key_type const k = rng() % (pages * 2) + 1;
    unsigned const op = static_cast<unsigned>(rng() % 8);
    tick_type const tick = 1 + static_cast<tick_type>(step);
    auto const one_op = [&](auto const& tile, auto const& ref) -> ccht::page_op_result {
      switch (op) {
        case 0: case 1: return ref.acquire(tile, k, tick);
        case 2: return ref.lookup(tile, k);
        case 3: return ref.publish(tile, k);
        case 4: case 5: return ref.release(tile, k, tick);
        case 6: return ref.abandon(tile, k);
        default: return ref.erase(tile, k);
      }
    };
    ccht::page_op_result const ra = lanes::on_tile<1>([&](auto const& t) { return one_op(t, a); });
    ccht::page_op_result rb;
    std::string report;
    auto const h = hazard_of([&] { rb = lanes::run<N>([&](auto const& t) { return one_op(t, b); }); },
                             &report);
    ASSERT_EQ(h, std::nullopt) << "step " << step << " op " << op << ": " << report;
    ASSERT_TRUE(ra == rb) << "step " << step << " op " << op;
    ASSERT_TRUE(same_storage()) << "storage differs after step " << step << " op " << op;
    fills += ra.status == ccht::page_status::fill;
    evictions += ra.evicted;
  }
  EXPECT_GT(fills, 0u);
  EXPECT_GT(evictions, 0u);
}

TEST(LanePageCache, PerKeyOperationsMatchOneLane) {
  run_page_differential<16>(3, false);
  run_page_differential<16>(4, true);
  run_page_differential<4>(5, true);
}

// ---- several tiles racing on one table ------------------------------------------------------------

/// Values encode (key, writer, iteration), so a reader can tell a value was written for its key.
value_type encode(key_type k, unsigned writer, unsigned it) {
  return (k << 24) ^ (std::uint64_t{writer} << 16) ^ it;
}
bool written_for(key_type k, value_type v) { return ((v ^ (k << 24)) >> 24) == 0; }

template <class Policy>
void race_tiles(search srch) {
  SCOPED_TRACE(std::string(Policy::name) + " " + name_of(srch));
  constexpr int B = 16;
  lane_table<B> t(16, 77, srch, srch == search::none ? 0 : 192, false);
  constexpr unsigned threads = 4;
  std::atomic<tick_type> clock{1};
  std::atomic<int> bad{0};
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      std::mt19937_64 rng(w + 1);
      try {
        for (unsigned it = 0; it < 400; ++it) {
          key_type const k = rng() % 160 + 1;  // shared keys
          unsigned const dice = static_cast<unsigned>(rng() % 10);
          int const kind = dice < 4 ? op_find : dice < 8 ? op_upsert : op_erase;
          tick_type const tick = clock.fetch_add(1);
          op_result const r = lanes::run<16>([&](auto const& tile) {
            return run_op<Policy, B>(tile, t.view, kind, k, encode(k, w, it), tick);
          });
          if (kind == op_find && r.status != 0 && !written_for(k, r.value)) { bad.fetch_add(1); }
          if (kind == op_upsert && r.status == static_cast<int>(op_status::inserted_evicted) &&
              !written_for(r.evicted_key, r.evicted_value)) {
            bad.fetch_add(1);
          }
        }
      } catch (lanes::hazard const& h) {
        ADD_FAILURE() << h.what();
        bad.fetch_add(1);
      }
    });
  }
  for (auto& th : pool) { th.join(); }
  EXPECT_EQ(bad.load(), 0);
  std::size_t present = 0;  // nothing torn, no key twice, the capacity kept once the tiles stop
  std::vector<key_type> keys;
  for (auto const& b : t.buckets) {
    for (int i = 0; i < B; ++i) {
      if (b.keys[i] == ccht::empty_key) { continue; }
      ++present;
      keys.push_back(b.keys[i]);
      EXPECT_TRUE(written_for(b.keys[i], b.values[i])) << b.keys[i];
    }
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end()) << "a key stored twice";
  for (auto v : t.versions) { EXPECT_EQ(v % 2, 0u) << "a bucket left locked"; }
  if (srch != search::none) { EXPECT_EQ(t.words[0], present); }
}

TEST(LaneConcurrency, TilesRaceOnOneLruTable) { race_tiles<ccht::lru>(search::none); }
TEST(LaneConcurrency, TilesRaceOnOneDoubleLruTable) { race_tiles<ccht::double_lru>(search::two_level); }

}  // namespace
