// The CUDA kernels' block-level logic on the CPU (kernels/bulk_bodies.hpp run by
// ccht/lanes/lockstep_block.hpp; docs/gpu-lanes.md):
// - the block runner: barriers, __syncthreads_count, shared memory that starts as garbage, tiles
//   of one block spinning on each other's locks, and each block hazard on code that breaks it;
// - the batch protocol: validate_batch's reject words (smallest bad index over a grid-stride walk
//   of several blocks), count word and ticks; a rejected batch leaves the table unchanged;
// - every per-key body (find, contains, insert_or_assign, erase, execute) on 256-thread blocks
//   of 16-lane tiles, two blocks resident at once, checked against a std::map model: no entry lost
//   or made up, every eviction reported once through the per-block buffer and its one atomic;
// - the whole-table bodies (size, clear, export with its per-block compaction), against the CPU
//   backend's own size and export;
// - a flush without its first barrier loses evictions, and the same checks see it.
#include <ccht/backend.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/lanes/lockstep_block.hpp>
#include <ccht/table.hpp>

#include "kernels/bulk_bodies.hpp"

#include "lanes_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

namespace lanes = ccht::lanes;
namespace kernels = ccht::kernels;
using ccht::key_type;
using ccht::op_code;
using ccht::op_status;
using ccht::tick_type;
using ccht::value_type;
using ccht::detail::no_reject;

#if defined(__SANITIZE_THREAD__)
// Every fiber switch costs TSan bookkeeping, and double LRU's victim searches contend (tiles spin
// on each other's locks): fewer keys per batch keep the suite within its time limit.
constexpr std::size_t batch_keys = 200;
#else
constexpr std::size_t batch_keys = 500;
#endif

constexpr int B = ccht::default_bucket_size;
constexpr int T = 16;  // the CUDA backend's tile
using shape = kernels::shape<T>;
using view_type = ccht::bucket_array_view<B>;

using ccht::test::hazard_of;

// ---- the block runner ------------------------------------------------------------------------------

TEST(LockstepBlock, BarrierOrdersEveryThreadsWriteBeforeAnyRead) {
  struct shared {
    unsigned slot[128];
  };
  std::vector<unsigned> seen(4 * 128);
  lanes::run_grid<8, shared>(4, 128, [&](auto const& block, shared& sh) {
    unsigned const t = block.thread_index();
    sh.slot[t] = block.block_index() * 1000 + t;
    block.sync();
    // Every thread reads a slot another tile wrote: without the barrier it would be garbage.
    seen[block.block_index() * 128 + t] = sh.slot[127 - t];
  }, {.resident_blocks = 2, .order_seed = 11});
  for (unsigned b = 0; b < 4; ++b) {
    for (unsigned t = 0; t < 128; ++t) { ASSERT_EQ(seen[b * 128 + t], b * 1000 + 127 - t); }
  }
}

TEST(LockstepBlock, SyncCountCountsTheBlocksPredicates) {
  std::vector<int> counts(3 * 64);
  lanes::run_grid<16, kernels::no_shared>(3, 64, [&](auto const& block, kernels::no_shared&) {
    unsigned const t = block.thread_index();
    bool const p = (t % 3 == 0) || block.block_index() == 2;
    counts[block.block_index() * 64 + t] = block.sync_count(p);
  });
  for (unsigned t = 0; t < 64; ++t) {
    EXPECT_EQ(counts[t], 22);
    EXPECT_EQ(counts[64 + t], 22);
    EXPECT_EQ(counts[128 + t], 64);
  }
}

TEST(LockstepBlock, SharedMemoryStartsAsGarbage) {
  struct shared {
    unsigned word;
  };
  unsigned read = 0;
  lanes::run_grid<4, shared>(1, 4, [&](auto const& block, shared& sh) {
    if (block.thread_index() == 0) { read = sh.word; }
  });
  EXPECT_EQ(read, 0xA5A5A5A5u);  // a body that forgets to initialise its counter sees this
}

TEST(LockstepBlock, BarrierSkippedByPartOfTheBlockIsReported) {
  std::string report;
  auto const kind = hazard_of([] {
    lanes::run_grid<16, kernels::no_shared>(1, 64, [](auto const& block, kernels::no_shared&) {
      if (block.thread_index() < 32) { block.sync(); }  // the other two tiles return
    });
  }, &report);
  ASSERT_EQ(kind, lanes::hazard_kind::lane_left_early);
  EXPECT_NE(report.find("block barrier"), std::string::npos) << report;
}

TEST(LockstepBlock, TwoBarriersAtOnceAreReported) {
  auto const kind = hazard_of([] {
    lanes::run_grid<16, kernels::no_shared>(1, 32, [](auto const& block, kernels::no_shared&) {
      if (block.thread_index() < 16) {
        block.sync();
      } else {
        block.sync();
      }
    });
  });
  EXPECT_EQ(kind, lanes::hazard_kind::divergent_collective);
}

TEST(LockstepBlock, TileCollectiveAgainstABarrierIsReported) {
  auto const kind = hazard_of([] {
    lanes::run_grid<16, kernels::no_shared>(1, 16, [](auto const& block, kernels::no_shared&) {
      auto const tile = block.tile();
      if (tile.thread_rank() == 0) {
        block.sync();
      } else {
        (void)tile.ballot(true);
      }
    });
  });
  EXPECT_EQ(kind, lanes::hazard_kind::divergent_collective);
}

TEST(LockstepBlock, TilesOfOneBlockWaitForEachOthersLocks) {
  // Lane 0 of every tile takes one shared bucket lock and holds it across a tile collective; the
  // others spin in lock_bucket. Without the spin hook the first spinner would never let the
  // holder run again.
  std::uint32_t version = 0;
  unsigned inside = 0;
  unsigned most_inside = 0;
  lanes::run_grid<16, kernels::no_shared>(2, 128, [&](auto const& block, kernels::no_shared&) {
    auto const tile = block.tile();
    std::uint32_t held = 0;
    if (tile.thread_rank() == 0) {
      held = ccht::detail::lock_bucket(version);
      most_inside = std::max(most_inside, ++inside);
    }
    (void)tile.ballot(true);
    if (tile.thread_rank() == 0) {
      --inside;
      ccht::detail::store_release(version, held + 1);
    }
  }, {.resident_blocks = 2, .order_seed = 5});
  EXPECT_EQ(version, 2u * 2 * 8);  // 16 tiles, one lock and unlock each
  EXPECT_EQ(most_inside, 1u);
}

TEST(LockstepBlock, LockNeverReleasedIsARunaway) {
  std::uint32_t version = 1;  // held by nobody who will release it
  auto const kind = hazard_of([&] {
    lanes::run_grid<16, kernels::no_shared>(1, 16, [&](auto const& block, kernels::no_shared&) {
      if (block.tile().thread_rank() == 0) { (void)ccht::detail::lock_bucket(version); }
    }, {.resident_blocks = 1, .order_seed = 0, .max_steps = 1000});
  });
  EXPECT_EQ(kind, lanes::hazard_kind::runaway);
}

// ---- the eviction buffer: a flush without its first barrier loses entries --------------------------

/// The eviction buffer's flush with its first barrier left out (what the emulation must catch).
template <class Block, int C>
void flush_without_first_barrier(Block const& block, kernels::eviction_buffer<C>& buf,
                                 key_type* out_keys, value_type* out_values, std::size_t* counter) {
  unsigned const n = buf.count;  // read before the other tiles have pushed
  if (n == 0) { return; }
  if (block.thread_index() == 0) { buf.base = kernels::add_global(*counter, std::size_t{n}); }
  block.sync();
  for (unsigned t = block.thread_index(); t < n; t += block.block_threads()) {
    out_keys[buf.base + t] = buf.keys[t];
    out_values[buf.base + t] = buf.values[t];
  }
}

/// Lane 0 of each tile pushes its element ids; returns the pairs flushed.
template <bool Broken>
std::multiset<key_type> push_and_flush(unsigned blocks) {
  std::vector<key_type> keys(blocks * shape::items_per_block, ccht::empty_key);
  std::vector<value_type> values(keys.size());
  std::size_t counter = 0;
  lanes::run_grid<T, kernels::eviction_shared<T>>(blocks, shape::block_threads,
      [&](auto const& block, kernels::eviction_shared<T>& buf) {
        buf.init(block);
        block.sync();
        auto const tile = block.tile();
        kernels::for_tile_elements<T>(block, keys.size(), [&](std::size_t i) {
          (void)tile.ballot(true);  // an insert's collectives, then its eviction
          if (tile.thread_rank() == 0) { buf.push(i, i * 3); }
        });
        if constexpr (Broken) {
          flush_without_first_barrier(block, buf, keys.data(), values.data(), &counter);
        } else {
          buf.flush(block, keys.data(), values.data(), &counter);
        }
      }, {.resident_blocks = 2, .order_seed = 3});
  std::multiset<key_type> out;
  for (std::size_t i = 0; i < counter; ++i) {
    if (values[i] == keys[i] * 3) { out.insert(keys[i]); }
  }
  return out;
}

TEST(GridBodies, EvictionBufferFlushesEveryPushOnce) {
  std::multiset<key_type> want;
  for (key_type i = 0; i < 3 * shape::items_per_block; ++i) { want.insert(i); }
  EXPECT_EQ(push_and_flush<false>(3), want);
  // Without the barrier, threads read the count before other tiles' last pushes: the emulation
  // either loses pushes or finds threads that left while others wait at the barrier.
  std::multiset<key_type> broken;
  auto const kind = hazard_of([&] { broken = push_and_flush<true>(3); });
  EXPECT_TRUE(kind.has_value() || broken != want)
      << "a flush that reads the count before the barrier went unnoticed";
}

// ---- the batch protocol ------------------------------------------------------------------------------

struct batch_words {
  std::size_t reject[3] = {no_reject, no_reject, 0};
  std::size_t sticky[2] = {no_reject, no_reject};
  std::size_t count = 77;  // validate must zero it
};

/// Runs validate_batch over @p blocks blocks (fewer than the elements need: a grid-stride walk).
void validate(std::vector<key_type> const& keys, std::vector<op_code> const* ops, unsigned blocks,
              batch_words& w, tick_type& clock, bool with_sticky, std::uint64_t seed) {
  lanes::run_grid<1, kernels::no_shared>(blocks, kernels::stream_block_threads,
      [&](auto const& block, kernels::no_shared&) {
        kernels::validate_batch(block, keys.data(), ops != nullptr ? ops->data() : nullptr,
                                keys.size(), w.reject, with_sticky ? w.sticky : nullptr, &w.count,
                                &clock);
      }, {.resident_blocks = 2, .order_seed = seed});
}

TEST(GridBodies, ValidateFindsTheSmallestBadIndexOverAGridStrideWalk) {
  std::mt19937_64 rng(21);
  for (int round = 0; round < 6; ++round) {
    std::size_t const n = 1500 + rng() % 2000;
    std::vector<key_type> keys(n);
    std::vector<op_code> ops(n, op_code::find);
    for (auto& k : keys) { k = rng() % 1000000; }
    std::size_t want_key = no_reject;
    std::size_t want_op = no_reject;
    for (int bad = 0; bad < round; ++bad) {  // round 0: a clean batch
      std::size_t const i = rng() % n;
      keys[i] = (rng() & 1) ? ccht::empty_key : ccht::claimed_key;
      want_key = std::min(want_key, i);
      std::size_t const j = rng() % n;
      auto const code = static_cast<std::uint8_t>(3 + rng() % 200);
      ops[j] = static_cast<op_code>(code);
      if (want_op == no_reject || j < (want_op >> 8)) { want_op = (j << 8) | code; }
    }
    batch_words w;
    tick_type clock = 1000 + round;
    tick_type const before = clock;
    validate(keys, &ops, 3, w, clock, round % 2 == 1, round + 1);
    EXPECT_EQ(w.reject[kernels::word_reject_key], want_key) << "round " << round;
    EXPECT_EQ(w.reject[kernels::word_reject_op], want_op) << "round " << round;
    EXPECT_EQ(w.sticky[0], round % 2 == 1 ? want_key : no_reject);
    EXPECT_EQ(w.sticky[1], round % 2 == 1 ? want_op : no_reject);
    EXPECT_EQ(w.count, 0u);
    EXPECT_EQ(w.reject[kernels::word_tick_base], before + 1);
    EXPECT_EQ(clock, before + n);
  }
}

// ---- per-key bodies against a std::map model -------------------------------------------------------

/// A table whose storage the bodies run on, the batch words and clock they share, and the model.
template <class Policy>
class grid_table {
 public:
  explicit grid_table(std::size_t slots, std::size_t capacity = 0) : t_(slots, options(capacity)) {}

  view_type view() const { return t_.ref().view(); }
  ccht::table<ccht::cpu_backend, Policy>& table() { return t_; }

  /// insert_or_assign of @p keys (distinct) through validate + the body; returns the evictions.
  std::vector<std::pair<key_type, value_type>> insert(std::vector<key_type> const& keys,
                                                      std::vector<value_type> const& values,
                                                      std::uint64_t seed) {
    batch_words w;
    validate(keys, nullptr, blocks_for(keys.size(), kernels::stream_block_threads), w, clock_,
             false, seed);
    std::vector<key_type> ek(keys.size() + 1, sentinel);
    std::vector<value_type> ev(keys.size() + 1, 0);
    lanes::run_grid<T, kernels::eviction_shared<T>>(
        blocks_for(keys.size(), shape::items_per_block), shape::block_threads,
        [&](auto const& block, kernels::eviction_shared<T>& sh) {
          kernels::insert_or_assign_body<Policy, B, T>(block, sh, view(), keys.data(),
                                                       values.data(), keys.size(), ek.data(),
                                                       ev.data(), &w.count, w.reject, nullptr);
        }, {.resident_blocks = 2, .order_seed = seed});
    EXPECT_LE(w.count, keys.size());
    EXPECT_EQ(ek[w.count], sentinel) << "an eviction written beyond the count";
    std::vector<std::pair<key_type, value_type>> out;
    for (std::size_t i = 0; i < w.count; ++i) { out.emplace_back(ek[i], ev[i]); }
    return out;
  }

  /// The table's entries, read by the CPU backend.
  std::map<key_type, value_type> contents() {
    std::vector<key_type> k(t_.num_slots());
    std::vector<value_type> v(t_.num_slots());
    std::size_t const n = t_.export_entries(k, v);
    std::map<key_type, value_type> m;
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(m.emplace(k[i], v[i]).second) << "key " << k[i] << " twice in the table";
    }
    return m;
  }

  tick_type& clock() { return clock_; }

  static constexpr key_type sentinel = 0xdeadbeefull;

  static unsigned blocks_for(std::size_t n, std::size_t per_block) {
    return static_cast<unsigned>(std::max<std::size_t>(1, (n + per_block - 1) / per_block));
  }

 private:
  static ccht::table_options options(std::size_t capacity) {
    ccht::table_options o;
    o.cpu_threads = 1;
    o.capacity = capacity;
    return o;
  }

  ccht::table<ccht::cpu_backend, Policy> t_;
  tick_type clock_ = 0;
};

/**
 * Checks one insert batch: the table holds only keys of @p model (updated by the batch) with their
 * values, every key of the model missing from the table was evicted, and every eviction is a key
 * of the model with its old or new value, each value of a key reported at most once.
 * Returns the failures found (empty: none), and makes @p model the table's contents.
 */
std::vector<std::string> check_insert(std::map<key_type, value_type>& model,
                                      std::vector<key_type> const& keys,
                                      std::vector<value_type> const& values,
                                      std::vector<std::pair<key_type, value_type>> const& evicted,
                                      std::map<key_type, value_type> const& table) {
  std::vector<std::string> bad;
  std::map<key_type, value_type> const old = model;
  for (std::size_t i = 0; i < keys.size(); ++i) { model[keys[i]] = values[i]; }
  std::map<key_type, int> times;
  for (auto const& [k, v] : evicted) {
    ++times[k];
    auto const was = old.find(k);
    auto const now = model.find(k);
    bool const known =
        now != model.end() && (now->second == v || (was != old.end() && was->second == v));
    if (!known) { bad.push_back("evicted " + std::to_string(k) + " with a value it never held"); }
  }
  for (auto const& [k, v] : table) {
    auto const m = model.find(k);
    if (m == model.end() || m->second != v) {
      bad.push_back("table holds " + std::to_string(k) + " with a value never written");
    }
  }
  std::set<key_type> const in_batch(keys.begin(), keys.end());
  for (auto const& [k, v] : model) {
    // A key can leave at most once per value it held in this batch: its old value (it was held
    // before) and its new one (the batch wrote it; an update may re-insert it after the old went).
    bool const held = table.count(k) != 0;
    int const n = times.count(k) ? times[k] : 0;
    int const lives = (old.count(k) ? 1 : 0) + (in_batch.count(k) ? 1 : 0);
    int const most = held ? lives - 1 : lives;
    if ((!held && n == 0) || n > most) {
      bad.push_back("key " + std::to_string(k) + (held ? " held" : " gone") + " with " +
                    std::to_string(n) + " evictions");
    }
  }
  model = table;
  return bad;
}

/// Inserts @p keys through the grid, then checks the batch (check_insert) against @p model.
template <class Policy>
std::vector<std::string> insert_checked(grid_table<Policy>& g,
                                        std::map<key_type, value_type>& model,
                                        std::vector<key_type> const& keys,
                                        std::vector<value_type> const& values, std::uint64_t seed) {
  auto const evicted = g.insert(keys, values, seed);
  return check_insert(model, keys, values, evicted, g.contents());
}

/// @p n distinct fresh keys (fresh_keys) and a random value for each.
struct random_batch {
  std::vector<key_type> keys;
  std::vector<value_type> values;
};

template <class P>
class GridBodiesPerPolicy : public ::testing::Test {};
using Policies = ::testing::Types<ccht::lru, ccht::fifo, ccht::lfu, ccht::double_lru>;
TYPED_TEST_SUITE(GridBodiesPerPolicy, Policies);

/// Distinct random keys, none reserved.
std::vector<key_type> fresh_keys(std::mt19937_64& rng, std::size_t n, std::set<key_type>& used) {
  std::vector<key_type> keys;
  while (keys.size() < n) {
    key_type const k = rng() % (key_type{1} << 40);
    if (used.insert(k).second) { keys.push_back(k); }
  }
  return keys;
}

random_batch fresh_batch(std::mt19937_64& rng, std::size_t n, std::set<key_type>& used) {
  random_batch b{fresh_keys(rng, n, used), std::vector<value_type>(n)};
  for (auto& v : b.values) { v = rng(); }
  return b;
}

TYPED_TEST(GridBodiesPerPolicy, InsertsKeepOrReportEveryEntry) {
  using P = TypeParam;
  bool const global = P::global != ccht::global_layer::none;
  // Four batches of batch_keys new keys overflow 512 slots, or double LRU's capacity of 700.
  grid_table<P> g(global ? 1024 : 512, global ? 700 : 0);
  std::mt19937_64 rng(7);
  std::set<key_type> used;
  std::map<key_type, value_type> model;
  std::size_t total_evicted = 0;
  for (int round = 0; round < 4; ++round) {
    // New keys, and updates of keys the table holds (so an update can race an eviction).
    std::vector<key_type> keys = fresh_keys(rng, batch_keys, used);
    for (auto const& [k, v] : model) {
      if (rng() % 4 == 0) { keys.push_back(k); }
    }
    std::shuffle(keys.begin(), keys.end(), rng);
    std::vector<value_type> values(keys.size());
    for (auto& v : values) { v = rng(); }
    auto const evicted = g.insert(keys, values, round == 0 ? 0 : round * 13);
    total_evicted += evicted.size();
    auto const bad = check_insert(model, keys, values, evicted, g.contents());
    EXPECT_TRUE(bad.empty()) << "round " << round << ": " << bad.size() << " failures, first: "
                             << (bad.empty() ? "" : bad.front());
    if (global) { EXPECT_LE(model.size(), 700u); }
  }
  EXPECT_GT(total_evicted, 0u) << "the batches must overflow the table";
}

TYPED_TEST(GridBodiesPerPolicy, FindContainsEraseAgreeWithTheModel) {
  using P = TypeParam;
  grid_table<P> g(1024);
  std::mt19937_64 rng(9);
  std::set<key_type> used;
  auto const [keys, values] = fresh_batch(rng, 400, used);
  std::map<key_type, value_type> model;
  ASSERT_TRUE(insert_checked(g, model, keys, values, 0).empty());

  // Half the keys held, half never inserted.
  std::vector<key_type> probe = fresh_keys(rng, 300, used);
  for (auto const& [k, v] : model) {
    if (probe.size() < 600) { probe.push_back(k); }
  }
  std::shuffle(probe.begin(), probe.end(), rng);
  std::size_t const n = probe.size();
  batch_words w;
  validate(probe, nullptr, 2, w, g.clock(), false, 4);
  std::vector<value_type> got(n, 0);
  std::unique_ptr<bool[]> found(new bool[n]());
  std::unique_ptr<bool[]> present(new bool[n]());
  unsigned const blocks = grid_table<P>::blocks_for(n, shape::items_per_block);
  lanes::run_grid<T, kernels::no_shared>(blocks, shape::block_threads,
      [&](auto const& block, kernels::no_shared&) {
        kernels::find_body<P, B, T>(block, g.view(), probe.data(), got.data(), found.get(), n,
                                    w.reject, nullptr);
      }, {.resident_blocks = 2, .order_seed = 8});
  lanes::run_grid<T, kernels::no_shared>(blocks, shape::block_threads,
      [&](auto const& block, kernels::no_shared&) {
        kernels::contains_body<B, T>(block, g.view(), probe.data(), present.get(), n, w.reject,
                                     nullptr);
      });
  for (std::size_t i = 0; i < n; ++i) {
    auto const m = model.find(probe[i]);
    ASSERT_EQ(found[i], m != model.end()) << "key " << probe[i];
    ASSERT_EQ(present[i], m != model.end()) << "key " << probe[i];
    if (found[i]) { ASSERT_EQ(got[i], m->second); }
  }

  // Erase every third probe: the count is the number held, and they are gone.
  std::vector<key_type> gone;
  std::size_t want_erased = 0;
  for (std::size_t i = 0; i < n; i += 3) {
    gone.push_back(probe[i]);
    want_erased += model.erase(probe[i]);
  }
  batch_words e;
  validate(gone, nullptr, 1, e, g.clock(), false, 0);
  lanes::run_grid<T, kernels::block_count>(
      grid_table<P>::blocks_for(gone.size(), shape::items_per_block), shape::block_threads,
      [&](auto const& block, kernels::block_count& sh) {
        kernels::erase_body<B, T>(block, sh, g.view(), gone.data(), gone.size(), &e.count,
                                  e.reject, nullptr);
      },
      {.resident_blocks = 2, .order_seed = 2});
  EXPECT_EQ(e.count, want_erased);
  EXPECT_EQ(g.contents(), model);
}

TYPED_TEST(GridBodiesPerPolicy, MixedBatchMatchesTheModel) {
  using P = TypeParam;
  grid_table<P> g(2048);  // low load: no insert of this batch evicts, so statuses are exact
  std::mt19937_64 rng(13);
  std::set<key_type> used;
  auto const [keys, values] = fresh_batch(rng, 300, used);
  std::map<key_type, value_type> model;
  ASSERT_TRUE(insert_checked(g, model, keys, values, 0).empty());

  std::vector<key_type> held;
  for (auto const& [k, v] : model) { held.push_back(k); }
  std::vector<key_type> absent = fresh_keys(rng, 400, used);
  std::vector<key_type> bk;
  std::vector<op_code> bo;
  std::vector<value_type> bv;
  for (key_type k : held) {  // each key once: find, update or erase
    bk.push_back(k);
    bo.push_back(static_cast<op_code>(rng() % 3));
    bv.push_back(rng());
  }
  for (key_type k : absent) {  // absent keys: find, insert or erase
    bk.push_back(k);
    bo.push_back(static_cast<op_code>(rng() % 3));
    bv.push_back(rng());
  }
  std::size_t const n = bk.size();
  std::vector<std::size_t> perm(n);
  for (std::size_t i = 0; i < n; ++i) { perm[i] = i; }
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<key_type> k2(n);
  std::vector<op_code> o2(n);
  std::vector<value_type> v2(n);
  for (std::size_t i = 0; i < n; ++i) {
    k2[i] = bk[perm[i]];
    o2[i] = bo[perm[i]];
    v2[i] = bv[perm[i]];
  }
  batch_words w;
  validate(k2, &o2, 2, w, g.clock(), false, 6);
  ASSERT_EQ(w.reject[kernels::word_reject_op], no_reject);
  std::vector<value_type> out(n, 0);
  std::vector<op_status> status(n, static_cast<op_status>(0xff));
  std::vector<key_type> ek(n, 0);
  std::vector<value_type> ev(n, 0);
  lanes::run_grid<T, kernels::eviction_shared<T>>(
      grid_table<P>::blocks_for(n, shape::items_per_block), shape::block_threads,
      [&](auto const& block, kernels::eviction_shared<T>& sh) {
        kernels::execute_body<P, B, T>(block, sh, g.view(), o2.data(), k2.data(), v2.data(),
                                       out.data(), status.data(), n, ek.data(), ev.data(), &w.count,
                                       w.reject, nullptr);
      },
      {.resident_blocks = 2, .order_seed = 17});
  ASSERT_EQ(w.count, 0u) << "the table was sized for no eviction";
  for (std::size_t i = 0; i < n; ++i) {
    auto const m = model.find(k2[i]);
    bool const was = m != model.end();
    switch (o2[i]) {
      case op_code::find:
        ASSERT_EQ(status[i], was ? op_status::hit : op_status::miss) << i;
        if (was) { ASSERT_EQ(out[i], m->second); }
        break;
      case op_code::insert_or_assign:
        ASSERT_EQ(status[i], was ? op_status::assigned : op_status::inserted) << i;
        model[k2[i]] = v2[i];
        break;
      case op_code::erase:
        ASSERT_EQ(status[i], was ? op_status::hit : op_status::miss) << i;
        model.erase(k2[i]);
        break;
    }
  }
  EXPECT_EQ(g.contents(), model);
}

TYPED_TEST(GridBodiesPerPolicy, RejectedBatchLeavesTheTableUnchanged) {
  using P = TypeParam;
  grid_table<P> g(512);
  std::mt19937_64 rng(3);
  std::set<key_type> used;
  std::vector<key_type> keys = fresh_keys(rng, 300, used);
  std::vector<value_type> values(keys.size(), 5);
  std::map<key_type, value_type> model;
  ASSERT_TRUE(insert_checked(g, model, keys, values, 0).empty());
  view_type const v = g.view();
  std::vector<unsigned char> before(
      reinterpret_cast<unsigned char const*>(v.buckets),
      reinterpret_cast<unsigned char const*>(v.buckets + v.num_buckets));
  std::vector<key_type> bad = fresh_keys(rng, 700, used);
  bad[555] = ccht::empty_key;
  std::vector<value_type> bad_values(bad.size(), 9);
  std::size_t const evicted = g.insert(bad, bad_values, 1).size();
  EXPECT_EQ(evicted, 0u);
  std::vector<unsigned char> after(
      reinterpret_cast<unsigned char const*>(v.buckets),
      reinterpret_cast<unsigned char const*>(v.buckets + v.num_buckets));
  EXPECT_TRUE(before == after) << "a rejected batch changed the table";
}

// ---- whole-table bodies ------------------------------------------------------------------------------

TYPED_TEST(GridBodiesPerPolicy, SizeExportAndClearAgreeWithTheCpuBackend) {
  using P = TypeParam;
  grid_table<P> g(1024);
  std::mt19937_64 rng(31);
  std::set<key_type> used;
  auto const [keys, values] = fresh_batch(rng, 900, used);
  (void)g.insert(keys, values, 0);
  auto const want = g.contents();
  ASSERT_GT(want.size(), 500u);

  std::size_t size = 0;
  lanes::run_grid<1, kernels::no_shared>(3, kernels::stream_block_threads,
                                         [&](auto const& block, kernels::no_shared&) {
                                           kernels::size_body<B>(block, g.view(), &size);
                                         });
  EXPECT_EQ(size, want.size());
  EXPECT_EQ(size, g.table().size());

  // Export: in full, then into a buffer that holds only part (all counted, none written beyond).
  for (std::size_t capacity : {want.size() + 10, want.size() / 3}) {
    std::vector<key_type> k(want.size() + 10, grid_table<P>::sentinel);
    std::vector<value_type> v(k.size(), 0);
    std::size_t count = 0;
    lanes::run_grid<T, kernels::export_shared<B, T>>(5, shape::block_threads,
        [&](auto const& block, kernels::export_shared<B, T>& sh) {
          kernels::export_body<B, T>(block, sh, g.view(), k.data(), v.data(), capacity, &count);
        }, {.resident_blocks = 2, .order_seed = capacity});
    EXPECT_EQ(count, want.size());
    std::size_t const written = std::min(capacity, want.size());
    std::map<key_type, value_type> got;
    for (std::size_t i = 0; i < written; ++i) {
      EXPECT_TRUE(got.emplace(k[i], v[i]).second) << "exported twice: " << k[i];
      auto const m = want.find(k[i]);
      ASSERT_TRUE(m != want.end() && m->second == v[i]) << "exported what the table does not hold";
    }
    for (std::size_t i = written; i < k.size(); ++i) {
      ASSERT_EQ(k[i], grid_table<P>::sentinel) << "written beyond the capacity";
    }
    if (capacity > want.size()) { EXPECT_EQ(got, want); }
  }

  lanes::run_grid<T, kernels::no_shared>(4, shape::block_threads,
      [&](auto const& block, kernels::no_shared&) { kernels::clear_body<B, T>(block, g.view()); },
      {.resident_blocks = 2, .order_seed = 9});
  EXPECT_EQ(g.table().size(), 0u);
  if (g.view().live != nullptr) { EXPECT_EQ(*g.view().live, 0); }
  // The table works after the clear.
  std::map<key_type, value_type> model;
  std::vector<key_type> again = fresh_keys(rng, 200, used);
  std::vector<value_type> again_values(again.size(), 1);
  EXPECT_TRUE(insert_checked(g, model, again, again_values, 2).empty());
  EXPECT_EQ(model.size(), 200u);
}

}  // namespace
