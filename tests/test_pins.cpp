// Pins (core/pin.hpp) through table_ref on the CPU backend: the global capacity layer never
// evicts a pinned entry, exhaustion of unpinned candidates fails cleanly, and pinned entries
// survive a storm of concurrent evicting inserts. The in-bucket rules are checked op by op
// against the reference model in test_core.cpp (CoreModelPins).
#include <ccht/ccht.hpp>

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using ccht::key_type;
using ccht::op_status;
using ccht::pin_status;
using ccht::value_type;
using ccht_test::encode;
using ccht_test::key_part;
using ccht_test::work_scale;
using cpu = ccht::cpu_backend;

/// Entries of a bucket: all slots full, and all of them pinned.
template <class View>
bool full_of_pins(View const& v, std::uint32_t b) {
  for (int s = 0; s < v.buckets[b].size; ++s) {
    if (v.buckets[b].keys[s] == ccht::empty_key || !ccht::is_pinned_score(v.buckets[b].scores[s])) {
      return false;
    }
  }
  return true;
}

struct model_entry {
  value_type value = 0;
  std::uint32_t pins = 0;
};

/// Serial random run with pins on a table with a global capacity layer, against a map model.
template <class Policy>
void run_global_pins(ccht::victim_search search, unsigned seed) {
  std::size_t const capacity = 48;
  ccht::table<cpu, Policy> t(64, {.cpu_threads = 1, .capacity = capacity, .global_search = search});
  auto const r = t.ref();
  auto const& view = r.view();
  std::map<key_type, model_entry> m;
  std::mt19937_64 rng(seed);
  ccht::scalar_tile const tile{};
  std::size_t evictions = 0, no_space = 0, overshoots = 0;
  for (int step = 0; step < 40000 / work_scale; ++step) {
    key_type const k = 1 + rng() % 120;
    ccht::tick_type const tick = step + 1;
    unsigned const kind = rng() % 16;
    auto const it = m.find(k);
    if (kind < 7) {  // upsert
      std::size_t unpinned_before = 0;
      for (auto const& [key, e] : m) { unpinned_before += e.pins == 0; }
      std::size_t const size_before = m.size();
      key_type ek = 0;
      value_type ev = 0;
      value_type const val = encode(k, step);
      op_status const s = r.insert_or_assign(tile, k, val, ek, ev, tick);
      auto const cb = ccht::candidates(k, view.seed, view.num_buckets);
      switch (s) {
        case op_status::assigned:
          ASSERT_NE(it, m.end()) << "step " << step;
          it->second.value = val;
          break;
        case op_status::no_space:
          ASSERT_EQ(it, m.end()) << "step " << step;
          ASSERT_TRUE(full_of_pins(view, cb.first) && full_of_pins(view, cb.second))
              << "no_space with an unpinned candidate, step " << step;
          ++no_space;
          break;
        case op_status::inserted:
          ASSERT_EQ(it, m.end()) << "step " << step;
          if (size_before >= capacity) {
            // Run serially, the global search fails only when no entry at all is evictable.
            ASSERT_EQ(unpinned_before, 0u) << "over the capacity with an unpinned entry, step " << step;
            ++overshoots;
          }
          m[k] = {val, 0};
          break;
        case op_status::inserted_evicted: {
          ASSERT_EQ(it, m.end()) << "step " << step;
          auto const victim = m.find(ek);
          ASSERT_NE(victim, m.end()) << "evicted a key that is not there, step " << step;
          ASSERT_EQ(victim->second.value, ev) << "step " << step;
          ASSERT_EQ(victim->second.pins, 0u) << "evicted a pinned entry, step " << step;
          m.erase(victim);
          m[k] = {val, 0};
          ++evictions;
          break;
        }
        default: FAIL() << "status " << int(s);
      }
    } else if (kind < 12) {  // pin
      value_type v = 0;
      pin_status const ps = r.pin(tile, k, v);
      ASSERT_EQ(ps == pin_status::absent, it == m.end()) << "pin, step " << step;
      if (ps == pin_status::done) {
        ASSERT_EQ(v, it->second.value);
        ++it->second.pins;
      }
    } else if (kind < 13) {  // unpin (rarer than pins: the table fills with pins)
      pin_status const ps = r.unpin(tile, k, tick);
      if (it == m.end()) {
        ASSERT_EQ(ps, pin_status::absent) << "step " << step;
      } else if (it->second.pins == 0) {
        ASSERT_EQ(ps, pin_status::not_pinned) << "step " << step;
      } else {
        ASSERT_EQ(ps, pin_status::done) << "step " << step;
        --it->second.pins;
      }
    } else if (kind < 15) {  // find
      value_type v = 0;
      bool const hit = r.find(tile, k, v, tick);
      ASSERT_EQ(hit, it != m.end()) << "find, step " << step;
      if (hit) { ASSERT_EQ(v, it->second.value); }
    } else {  // erase unpinned entries only (erase does not look at pins)
      if (it != m.end() && it->second.pins == 0) {
        ASSERT_TRUE(r.erase(tile, k));
        m.erase(it);
      }
    }
    if (step % 64 == 0) {
      ASSERT_EQ(t.size(), m.size()) << "step " << step;
    }
    // Keep the table from filling with pins for good: now and then release everything.
    if (step % 3000 == 2999) {
      for (auto& [key, e] : m) {
        for (; e.pins > 0; --e.pins) { ASSERT_EQ(r.unpin(tile, key, tick), pin_status::done); }
      }
    }
  }
  EXPECT_GT(evictions, 1000u / work_scale);
  EXPECT_GT(no_space + overshoots, 0u) << "the run never met a table full of pins";
}

TEST(Pins, DoubleLruTailIndexNeverEvictsPinned) {
  run_global_pins<ccht::double_lru>(ccht::victim_search::tail_index, 1);
}
TEST(Pins, DoubleLruSampledNeverEvictsPinned) {
  run_global_pins<ccht::double_lru>(ccht::victim_search::sampled, 2);
}
TEST(Pins, CoarseLruNeverEvictsPinned) {
  run_global_pins<ccht::coarse_lru>(ccht::victim_search::sampled, 3);
}

/// Every outcome of pin_optimistic and unpin_optimistic, on both of their paths: under the lock
/// (a view without optimistic_pins) and lock-free (with it, as the page cache's).
void check_pin_outcomes(bool optimistic) {
  using ccht::pin_outcome;
  using ops = ccht::bucket_ops<ccht::double_lru, ccht::default_bucket_size>;
  ccht::table<cpu, ccht::double_lru> t(64, {.cpu_threads = 1, .capacity = 48});
  auto v = t.ref().view();
  v.optimistic_pins = optimistic;
  ccht::scalar_tile const tile{};
  key_type ek = 0;
  value_type ev = 0;
  ASSERT_EQ(t.ref().insert_or_assign(tile, 7, 70, ek, ev, 1), op_status::inserted);
  auto const any = [](value_type) { return true; };
  auto const none = [](value_type) { return false; };
  auto const pins = [&] {
    auto const cb = ccht::candidates(7, v.seed, v.num_buckets);
    for (std::uint32_t b : {cb.first, cb.second}) {
      for (int s = 0; s < v.buckets[b].size; ++s) {
        if (v.buckets[b].keys[s] == 7) { return ccht::pins_of(v.buckets[b].scores[s]); }
      }
    }
    return ~0u;
  };
  value_type val = 0;
  EXPECT_EQ(ops::pin_optimistic(tile, v, 8, val, any), pin_outcome::absent);
  EXPECT_EQ(ops::unpin_optimistic(tile, v, 8, 2, val, any), pin_outcome::absent);
  EXPECT_EQ(ops::unpin_optimistic(tile, v, 7, 2, val, any), pin_outcome::not_pinned);
  EXPECT_EQ(ops::pin_optimistic(tile, v, 7, val, none), pin_outcome::refused);
  EXPECT_EQ(pins(), 0u) << "a refused pin changes nothing";
  val = 0;
  EXPECT_EQ(ops::pin_optimistic(tile, v, 7, val, any), pin_outcome::pinned_first);
  EXPECT_EQ(val, 70u);
  EXPECT_EQ(ops::pin_optimistic(tile, v, 7, val, any), pin_outcome::pinned_again);
  EXPECT_EQ(pins(), 2u);
  EXPECT_EQ(ops::unpin_optimistic(tile, v, 7, 3, val, none), pin_outcome::refused);
  EXPECT_EQ(ops::unpin_optimistic(tile, v, 7, 3, val, any), pin_outcome::released);
  EXPECT_EQ(ops::unpin_optimistic(tile, v, 7, 4, val, any), pin_outcome::released_last);
  EXPECT_EQ(pins(), 0u);
  EXPECT_EQ(ops::unpin_optimistic(tile, v, 7, 5, val, any), pin_outcome::not_pinned);
  for (std::uint32_t i = 0; i < ccht::max_pins; ++i) {
    ASSERT_TRUE(ccht::pin_changed(ops::pin_optimistic(tile, v, 7, val, any))) << i;
  }
  EXPECT_EQ(ops::pin_optimistic(tile, v, 7, val, any), pin_outcome::saturated);
  EXPECT_EQ(pins(), ccht::max_pins);
  EXPECT_FALSE(ccht::pin_changed(pin_outcome::saturated));
}

TEST(Pins, OptimisticPinOutcomesUnderTheLock) { check_pin_outcomes(false); }
TEST(Pins, OptimisticPinOutcomesLockFree) { check_pin_outcomes(true); }

TEST(Pins, ExhaustionFailsCleanlyAndRecovers) {
  // Two buckets, every slot pinned: inserts of new keys fail with no_space and change nothing.
  ccht::table<cpu, ccht::lru> t(32, {.cpu_threads = 1});
  auto const r = t.ref();
  ccht::scalar_tile const tile{};
  std::vector<key_type> held;
  for (key_type k = 1; held.size() < t.num_slots() && k < 100000; ++k) {
    key_type ek = 0;
    value_type ev = 0;
    op_status const s = r.insert_or_assign(tile, k, encode(k, 1), ek, ev, k);
    if (s == op_status::inserted) {
      value_type v = 0;
      ASSERT_EQ(r.pin(tile, k, v), pin_status::done);
      held.push_back(k);
    } else {
      ASSERT_EQ(s, op_status::no_space) << "key " << k;
    }
  }
  ASSERT_EQ(held.size(), t.num_slots());
  for (key_type k = 200000; k < 200100; ++k) {
    key_type ek = 0;
    value_type ev = 0;
    ASSERT_EQ(r.insert_or_assign(tile, k, encode(k, 2), ek, ev, k), op_status::no_space);
  }
  EXPECT_EQ(t.size(), t.num_slots());
  for (key_type k : held) {
    value_type v = 0;
    ASSERT_TRUE(r.find(tile, k, v, 300000));
    EXPECT_EQ(v, encode(k, 1));
  }
  // Saturation and over-release are refused without changing anything.
  value_type v = 0;
  for (std::uint32_t i = 1; i < ccht::max_pins; ++i) { ASSERT_EQ(r.pin(tile, held[0], v), pin_status::done); }
  EXPECT_EQ(r.pin(tile, held[0], v), pin_status::saturated);
  for (std::uint32_t i = 1; i < ccht::max_pins; ++i) { ASSERT_EQ(r.unpin(tile, held[0], 1), pin_status::done); }
  // Release everything: the next inserts evict (unpinned, least recently released first).
  for (key_type k : held) { ASSERT_EQ(r.unpin(tile, k, 400000 + k), pin_status::done); }
  EXPECT_EQ(r.unpin(tile, held[0], 500000), pin_status::not_pinned);
  EXPECT_EQ(r.unpin(tile, 999999, 500000), pin_status::absent);
  key_type ek = 0;
  value_type ev = 0;
  EXPECT_EQ(r.insert_or_assign(tile, 200000, encode(200000, 3), ek, ev, 600000),
            op_status::inserted_evicted);
}

TEST(Concurrency, PinnedEntriesSurviveEvictingInserts) {
  // Owners pin their own keys and check them while holding; the other threads flood a tiny
  // double-LRU table with inserts, so an unpinned entry lives for a few operations only.
  ccht::table<cpu, ccht::double_lru> t(128, {.cpu_threads = 1, .capacity = 112});
  auto const r = t.ref();
  constexpr int owners = 3, flooders = 3, keys_per_owner = 4;
  std::vector<ccht_test::thread_log> logs(owners + flooders);
  // held[k]: the value an owner holds pinned under key k, or 0.
  std::vector<std::atomic<value_type>> held(owners * keys_per_owner + 1);
  std::atomic<int> owners_done{0};
  std::latch start(owners + flooders);
  auto owner = [&](int id) {
    auto& L = logs[id];
    ccht::scalar_tile const tile{};
    start.arrive_and_wait();
    for (int cycle = 1; cycle <= 120 / work_scale && !L.failed(); ++cycle) {
      for (int j = 0; j < keys_per_owner; ++j) {
        key_type const k = 1 + id * keys_per_owner + j;
        value_type const val = encode(k, (std::uint64_t(cycle) << 4) | j);
        key_type ek = 0;
        value_type ev = 0;
        op_status const s = r.insert_or_assign(tile, k, val, ek, ev);
        if (s == op_status::inserted_evicted) { L.evicted(ek, ev); }
        value_type got = 0;
        if (s == op_status::no_space || r.pin(tile, k, got) != pin_status::done) { continue; }
        if (got != val) { L.fail("pinned " + std::to_string(k) + " with another value"); }
        held[k].store(val);
        for (int check = 0; check < 10; ++check) {  // the flooders run meanwhile
          value_type v = 0;
          if (!r.find(tile, k, v) || v != val) {
            L.fail("pinned key " + std::to_string(k) + " lost or changed while pinned");
            break;
          }
          std::this_thread::yield();
        }
        held[k].store(0);
        if (r.unpin(tile, k) != pin_status::done) { L.fail("unpin of a held key failed"); }
      }
    }
    owners_done.fetch_add(1);
  };
  std::atomic<std::uint64_t> pinned_evictions{0};
  auto flooder = [&](int id) {
    auto& L = logs[id];
    std::mt19937_64 rng(700 + id);
    ccht::scalar_tile const tile{};
    start.arrive_and_wait();
    while (owners_done.load() < owners && !L.failed()) {
      key_type const k = 1000 + rng() % 5000;
      key_type ek = 0;
      value_type ev = 0;
      op_status const s = r.insert_or_assign(tile, k, encode(k, 1), ek, ev);
      if (s != op_status::inserted_evicted) { continue; }
      ++L.evictions;
      // A held value can only be evicted while pinned: it was pinned after it was written.
      if (ek < held.size() && held[ek].load() == ev) { pinned_evictions.fetch_add(1); }
      if (key_part(ev) != ek) { L.fail("evicted pair with another key's value"); }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < owners; ++i) { threads.emplace_back(owner, i); }
  for (int i = 0; i < flooders; ++i) { threads.emplace_back(flooder, owners + i); }
  for (auto& th : threads) { th.join(); }
  for (std::size_t i = 0; i < logs.size(); ++i) {
    EXPECT_EQ(logs[i].violations, 0u) << "thread " << i << ": " << logs[i].first;
  }
  EXPECT_EQ(pinned_evictions.load(), 0u) << "pinned entries were evicted";
  std::uint64_t ev = 0;
  for (int i = owners; i < owners + flooders; ++i) { ev += logs[i].evictions; }
  EXPECT_GT(ev, 1000u / work_scale) << "the flood did not evict";
}

}  // namespace
