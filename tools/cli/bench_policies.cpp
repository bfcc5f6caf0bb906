// `ccht bench --policy a,b,...`: throughput of several table policies on the same key streams in
// one run, as a cache at a cache/table ratio (--ratio): each table is filled to its capacity, then
// timed batches mix finds of resident keys, finds of absent keys and inserts of new keys (which
// evict at capacity). The first policy of the list is the reference of the "vs" column. The plain
// policies (ccht-lru, -fifo, -lfu) have no capacity below their slots: they start at load `ratio`
// and fill their free slots before they evict, so they are a reference, not a same-size cache.
#include "commands.hpp"
#include "output.hpp"

#include <ccht/ccht.hpp>
#include <ccht/policy_list.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>

namespace ccht::cli {
namespace {

using clk = std::chrono::steady_clock;

/// What every policy runs: the fill, then one batch of ops and keys per repetition.
struct policy_streams {
  std::vector<key_type> fill;                  ///< distinct keys inserted before timing
  std::vector<std::vector<op_code>> ops;       ///< per repetition
  std::vector<std::vector<key_type>> keys;     ///< per repetition
};

struct policy_result {
  std::string policy;
  double ops_per_s = 0;     ///< median over repetitions
  double buckets_per_op = 0;  ///< counted in an untimed replica run (count_accesses)
  std::size_t evictions = 0;  ///< entries evicted in the timed batches
};

policy_streams make_streams(bench_options const& o, std::size_t capacity) {
  std::mt19937_64 rng(o.seed);
  policy_streams s;
  std::uint64_t next = 0;
  auto fresh = [&] {
    key_type x;
    do { x = hash64(next++, o.seed); } while (is_reserved_key(x));
    return x;
  };
  s.fill.resize(capacity);
  for (auto& k : s.fill) { k = fresh(); }
  std::bernoulli_distribution miss(o.miss_ratio), read(o.read_ratio);
  std::uniform_int_distribution<std::size_t> pick(0, capacity - 1);
  std::uniform_real_distribution<double> u(0, 1);
  std::unique_ptr<sim::zipfian_generator> z;
  if (o.dist == "zipfian") { z = std::make_unique<sim::zipfian_generator>(capacity, o.zipf_theta); }
  for (int r = 0; r < o.repeat; ++r) {
    std::vector<op_code> ops(o.batch);
    std::vector<key_type> keys(o.batch);
    for (std::size_t i = 0; i < o.batch; ++i) {
      ops[i] = o.op == "find"     ? op_code::find
               : o.op == "insert" ? op_code::insert_or_assign
               : read(rng)        ? op_code::find
                                  : op_code::insert_or_assign;
      bool const absent = o.op == "insert" || miss(rng);
      keys[i] = absent ? fresh() : s.fill[z ? z->next(u(rng)) : pick(rng)];
    }
    s.ops.push_back(std::move(ops));
    s.keys.push_back(std::move(keys));
  }
  return s;
}

/// A filled table of one policy, ready to time batch r of the streams.
struct prepared {
  std::string policy;
  std::function<double(int)> time_batch;  ///< runs batch r; returns seconds
  std::function<access_counts()> stats;   ///< the table's access counts so far
  std::shared_ptr<std::size_t> evicted;   ///< entries evicted by the timed batches so far
};

template <class Policy>
prepared prepare(std::string const& name, bench_options const& o, policy_streams const& s,
                 std::size_t capacity, bool count) {
  table_options to;
  to.cpu_threads = o.threads;
  to.count_accesses = count;
  to.global_samples = o.global_samples;
  to.global_search = parse_victim_search(o.global_search);
  to.own_first_slack = o.own_slack;
  to.bulk_victim_select = o.bulk_select;
  if constexpr (Policy::global != global_layer::none) { to.capacity = capacity; }
  auto t = std::make_shared<table<cpu_backend, Policy>>(o.slots, to);
  {
    std::vector<key_type> ek(s.fill.size());
    std::vector<value_type> ev(s.fill.size());
    t->insert_or_assign(s.fill, s.fill, ek, ev);
  }
  prepared p;
  p.policy = name;
  p.evicted = std::make_shared<std::size_t>(0);
  p.time_batch = [t, &s, n = o.batch, out = p.evicted](int r) {
    std::vector<value_type> vout(n), ev(n);
    std::vector<op_status> st(n);
    std::vector<key_type> ek(n);
    auto const t0 = clk::now();
    *out += t->execute(s.ops[r], s.keys[r], s.keys[r], vout, st, ek, ev);
    return std::chrono::duration<double>(clk::now() - t0).count();
  };
  p.stats = [t] { return t->access_stats(); };
  return p;
}

/// The table policy named @p p in the tools' spelling (ccht-lru, ..., cht-random).
prepared prepare_named(std::string const& p, bench_options const& o, policy_streams const& s,
                       std::size_t capacity, bool count) {
  return with_policy(
      p, [&]<class P>(std::type_identity<P>) { return prepare<P>(p, o, s, capacity, count); },
      policy_naming::tools);
}

}  // namespace

int cmd_bench_policies(bench_options const& o) {
  check_bench_options(o);
  for (auto const& p : o.policies) {
    if (!is_policy_name(p, policy_naming::tools)) {
      throw std::invalid_argument("--policy " + p + ": ccht bench times table policies; " +
                                  unknown_policy_message(p, policy_naming::tools));
    }
  }
  // Capacity: ratio x the slots the table rounds to (16-slot buckets, at least two).
  std::size_t const slots = std::max<std::size_t>(32, (o.slots + 15) / 16 * 16);
  auto const capacity = static_cast<std::size_t>(double(slots) * o.ratio);
  if (capacity == 0) { throw std::invalid_argument("--ratio x --slots is below one entry"); }
  policy_streams const s = make_streams(o, capacity);
  // Every table is filled first; then each repetition times every policy in turn, so that drift
  // in the machine's speed falls on all of them alike. The median repetition is reported.
  std::vector<prepared> tables;
  for (auto const& p : o.policies) { tables.push_back(prepare_named(p, o, s, capacity, false)); }
  std::vector<std::vector<double>> secs(tables.size());
  for (int r = 0; r < o.repeat; ++r) {
    for (std::size_t i = 0; i < tables.size(); ++i) { secs[i].push_back(tables[i].time_batch(r)); }
  }
  std::vector<policy_result> results;
  for (std::size_t i = 0; i < tables.size(); ++i) {
    policy_result res{o.policies[i], double(o.batch) / median(secs[i]), 0, *tables[i].evicted};
    tables[i] = {};  // free it before the counting replica
    // Accesses from an untimed replica with counting on (counting costs a little time).
    prepared c = prepare_named(o.policies[i], o, s, capacity, true);
    access_counts const before = c.stats();
    for (int r = 0; r < o.repeat; ++r) { c.time_batch(r); }
    res.buckets_per_op =
        double(c.stats().buckets() - before.buckets()) / double(o.batch * std::size_t(o.repeat));
    results.push_back(res);
  }
  std::string const what = o.op + (o.op == "mixed" ? " (read " + fixed(o.read_ratio, 2) + ")" : "") +
                           (o.op != "insert" ? ", miss " + fixed(o.miss_ratio, 2) : "");
  double const ref = results.front().ops_per_s;
  if (o.json) {
    for (auto const& m : results) {
      nlohmann::json j{{"policy", m.policy},     {"op", o.op},           {"dist", o.dist},
                       {"slots", slots},         {"capacity", capacity}, {"ratio", o.ratio},
                       {"miss_ratio", o.miss_ratio}, {"read_ratio", o.read_ratio},
                       {"batch", o.batch},       {"threads", o.threads}, {"repeat", o.repeat},
                       {"ops_per_s", m.ops_per_s}, {"buckets_per_op", m.buckets_per_op},
                       {"evictions", m.evictions}, {"vs_first", m.ops_per_s / ref}};
      std::printf("%s\n", j.dump().c_str());
    }
  } else {
    markdown_table tab({"policy", "operation", "keys", "slots", "ratio", "threads", "Mops/s",
                        "buckets/op", "evictions", "vs " + results.front().policy});
    for (auto const& m : results) {
      tab.add({m.policy, what, o.dist, std::to_string(slots), fixed(o.ratio, 2),
               std::to_string(o.threads), fixed(m.ops_per_s / 1e6, 2), fixed(m.buckets_per_op, 2),
               std::to_string(m.evictions), fixed(m.ops_per_s / ref, 2) + "x"});
    }
    std::printf("%s", tab.str().c_str());
  }
  return 0;
}

}  // namespace ccht::cli
