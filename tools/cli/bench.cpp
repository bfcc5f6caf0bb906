// `ccht bench`: throughput of the table on a chosen operation mix, key distribution, size, load,
// batch and thread count; on the CPU backend libcuckoo runs the same keys in the same run.
#include "commands.hpp"
#include "output.hpp"

#include <ccht/ccht.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>

#if CCHT_HAVE_LIBCUCKOO
#include <libcuckoo/cuckoohash_map.hh>
#endif

namespace ccht::cli {
namespace {

using clk = std::chrono::steady_clock;


/// Keys of the looked-up / written stream: indices into `pool` drawn uniformly or zipfian.
std::vector<key_type> draw(std::vector<key_type> const& pool, std::size_t n,
                           bench_options const& o, std::mt19937_64& rng) {
  std::vector<key_type> out(n);
  if (o.dist == "zipfian") {
    sim::zipfian_generator z(pool.size(), o.zipf_theta);
    std::uniform_real_distribution<double> u(0, 1);
    for (auto& k : out) { k = pool[z.next(u(rng))]; }
  } else {
    std::uniform_int_distribution<std::size_t> u(0, pool.size() - 1);
    for (auto& k : out) { k = pool[u(rng)]; }
  }
  return out;
}

struct measurement {
  std::string impl;
  double ops_per_s;
  double buckets_per_op;
};

/// Buckets a find of @p k touches: 1 when it is in its first bucket, else 2.
template <class Table>
double buckets_touched(Table const& t, std::vector<key_type> const& keys, std::string const& op,
                       std::vector<op_code> const& ops) {
  auto const v = t.ref().view();
  double sum = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    bool const is_find = op == "find" || (op == "mixed" && ops[i] == op_code::find);
    if (!is_find) {
      sum += 2;  // writers lock and scan both candidate buckets
      continue;
    }
    auto const cb = candidates(keys[i], v.seed, v.num_buckets);
    auto const& b = v.buckets[cb.first];
    bool const first = std::find(std::begin(b.keys), std::end(b.keys), keys[i]) != std::end(b.keys);
    sum += first ? 1 : 2;
  }
  return sum / double(keys.size());
}

}  // namespace

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::size_t const m = v.size();
  return m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
}

void check_bench_options(bench_options const& o) {
  if (o.op != "find" && o.op != "insert" && o.op != "mixed") {
    throw std::invalid_argument("--op must be find, insert or mixed");
  }
  if (o.dist != "uniform" && o.dist != "zipfian") {
    throw std::invalid_argument("--dist must be uniform or zipfian");
  }
  if (!(o.load > 0 && o.load <= 1)) { throw std::invalid_argument("--load must be in (0, 1]"); }
  if (!(o.ratio > 0 && o.ratio <= 1)) { throw std::invalid_argument("--ratio must be in (0, 1]"); }
  if (!(o.miss_ratio >= 0 && o.miss_ratio <= 1) || !(o.read_ratio >= 0 && o.read_ratio <= 1)) {
    throw std::invalid_argument("--miss-ratio and --read-ratio must be in [0, 1]");
  }
  if (o.slots < 32 || o.batch == 0 || o.threads < 1 || o.repeat < 1) {
    throw std::invalid_argument("--slots >= 32, --batch >= 1, --threads >= 1, --repeat >= 1");
  }
  if (o.backend != "cpu") {
    throw std::invalid_argument("--backend " + o.backend +
                                ": ccht bench measures the CPU backend; GPU numbers come from "
                                "ccht_bench_gpu (tools/gpu-check.sh)");
  }
}

int cmd_bench(bench_options const& o) {
  check_bench_options(o);

  std::mt19937_64 rng(o.seed);
  using table_t = table<cpu_backend, lru>;
  table_t t(o.slots, table_options{default_seed, o.threads});
  std::size_t const n = o.batch;

  // Fill to the load factor with distinct keys, keep what stayed resident.
  auto fresh = [&, next = std::uint64_t{0}](std::size_t count) mutable {
    std::vector<key_type> k(count);
    for (auto& x : k) {
      do { x = hash64(next++, o.seed); } while (is_reserved_key(x));
    }
    return k;
  };
  std::size_t const target = static_cast<std::size_t>(double(t.num_slots()) * o.load);
  {
    auto k = fresh(target);
    std::vector<key_type> ek(k.size());
    std::vector<value_type> ev(k.size());
    t.insert_or_assign(k, k, ek, ev);
  }
  std::vector<key_type> resident(t.size());
  std::vector<value_type> rv(resident.size());
  resident.resize(t.export_entries(resident, rv));

  // The measured stream.
  std::vector<key_type> keys;
  std::vector<op_code> ops;
  if (o.op == "insert") {
    keys = fresh(n * o.repeat);
  } else {
    keys = draw(resident, n, o, rng);
    std::bernoulli_distribution miss(o.miss_ratio);
    auto absent = fresh(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (miss(rng)) { keys[i] = absent[i]; }
    }
    if (o.op == "mixed") {
      std::bernoulli_distribution read(o.read_ratio);
      ops.resize(n);
      for (auto& op : ops) { op = read(rng) ? op_code::find : op_code::insert_or_assign; }
    }
  }
  double const buckets = buckets_touched(t, std::vector<key_type>(keys.begin(), keys.begin() + n),
                                         o.op, ops);

  std::vector<value_type> vals(n);
  std::unique_ptr<bool[]> found(new bool[n]);
  std::vector<key_type> ek(n);
  std::vector<value_type> ev(n), vout(n);
  std::vector<op_status> st(n);
  std::vector<double> rates;
  for (int r = 0; r < o.repeat; ++r) {
    std::span<key_type const> batch(keys.data() + (o.op == "insert" ? r * n : 0), n);
    auto const t0 = clk::now();
    if (o.op == "find") {
      t.find(batch, vals, {found.get(), n});
    } else if (o.op == "insert") {
      t.insert_or_assign(batch, batch, ek, ev);
    } else {
      t.execute(ops, batch, batch, vout, st, ek, ev);
    }
    rates.push_back(double(n) / std::chrono::duration<double>(clk::now() - t0).count());
  }
  std::vector<measurement> results{{"ccht", median(rates), buckets}};

#if CCHT_HAVE_LIBCUCKOO
  if (o.peer && o.op != "mixed") {
    libcuckoo::cuckoohash_map<key_type, value_type> peer;
    peer.reserve(o.slots);
    for (key_type k : resident) { peer.insert(k, k); }
    std::vector<double> prates;
    for (int r = 0; r < o.repeat; ++r) {
      std::span<key_type const> batch(keys.data() + (o.op == "insert" ? r * n : 0), n);
      auto const t0 = clk::now();
      std::vector<std::thread> th;
      for (int w = 0; w < o.threads; ++w) {
        th.emplace_back([&, w] {
          std::size_t const b = n * w / o.threads, e = n * (w + 1) / o.threads;
          value_type v = 0;
          for (std::size_t i = b; i < e; ++i) {
            if (o.op == "find") {
              peer.find(batch[i], v);
            } else {
              peer.insert_or_assign(batch[i], batch[i]);
            }
          }
        });
      }
      for (auto& x : th) { x.join(); }
      prates.push_back(double(n) / std::chrono::duration<double>(clk::now() - t0).count());
      if (o.op == "insert") {
        for (key_type k : batch) { peer.erase(k); }  // back to the same load
      }
    }
    results.push_back({"libcuckoo", median(prates), 0});
  }
#endif

  std::string const what = o.op + (o.op == "find" ? " (miss " + fixed(o.miss_ratio, 2) + ")" : "") +
                           (o.op == "mixed" ? " (read " + fixed(o.read_ratio, 2) + ")" : "");
  if (o.json) {
    for (auto const& m : results) {
      nlohmann::json j{{"impl", m.impl},       {"op", o.op},          {"dist", o.dist},
                       {"slots", t.num_slots()}, {"load", o.load},   {"miss_ratio", o.miss_ratio},
                       {"read_ratio", o.read_ratio}, {"batch", n},    {"threads", o.threads},
                       {"backend", o.backend},  {"ops_per_s", m.ops_per_s}};
      if (m.impl == "ccht") { j["buckets_per_op"] = m.buckets_per_op; }
      std::printf("%s\n", j.dump().c_str());
    }
  } else {
    markdown_table tab({"impl", "operation", "keys", "slots", "load", "threads", "Mops/s",
                        "buckets/op", "vs libcuckoo"});
    double const peer_rate = results.size() > 1 ? results[1].ops_per_s : 0;
    for (auto const& m : results) {
      tab.add({m.impl, what, o.dist, std::to_string(t.num_slots()), fixed(o.load, 2),
               std::to_string(o.threads), fixed(m.ops_per_s / 1e6, 2),
               m.impl == "ccht" ? fixed(m.buckets_per_op, 3) : "-",
               peer_rate > 0 ? fixed(m.ops_per_s / peer_rate, 2) + "x" : "-"});
    }
    std::printf("%s", tab.str().c_str());
  }
  return 0;
}

}  // namespace ccht::cli
