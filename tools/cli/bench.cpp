// `ccht bench`: throughput of the table on a chosen operation mix, key distribution, size, load,
// batch and thread count; on the CPU backend libcuckoo runs the same keys in the same run.
// `ccht bench --mode page-cache`: ccht::page_cache on the CPU backend, pre-filled with resident,
// published, unpinned pages: acquire+release throughput of resident pages and lookup latency per
// call at batches 1, 64 and 4096, beside the plain table's find (double LRU, the same entries).
#include "commands.hpp"
#include "output.hpp"

#include <ccht/ccht.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
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

namespace {

/// Distinct non-reserved keys hash64(0..), hash64(1..), ...
std::vector<key_type> distinct_keys(std::size_t n, std::uint64_t seed) {
  std::vector<key_type> k(n);
  std::uint64_t next = 0;
  for (auto& x : k) {
    do { x = hash64(next++, seed); } while (is_reserved_key(x));
  }
  return k;
}

/// @p n keys drawn uniformly (with repeats) from @p pool.
std::vector<key_type> uniform_over(std::vector<key_type> const& pool, std::size_t n,
                                   std::mt19937_64& rng) {
  std::uniform_int_distribution<std::size_t> u(0, pool.size() - 1);
  std::vector<key_type> out(n);
  for (auto& k : out) { k = pool[u(rng)]; }
  return out;
}

/// The @p q quantile (0..1) of @p v by nearest rank; @p v must not be empty.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  auto const rank = static_cast<std::size_t>(std::ceil(q * double(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

struct page_bench_row {
  std::size_t batch = 0;
  double acquire_release = 0;  ///< pages per second (median over repetitions)
  double table_find = 0;       ///< keys per second (median)
  double p50_us = 0, p99_us = 0;
  std::size_t lookup_calls = 0;
};

}  // namespace

int cmd_bench_page_cache(bench_options const& o) {
  if (o.pages < 1 || o.page_bytes < 1 || o.threads < 1 || o.repeat < 1) {
    throw std::invalid_argument("--pages >= 1, --page-bytes >= 1, --threads >= 1, --repeat >= 1");
  }
  if (!(o.ratio > 0 && o.ratio <= 1)) { throw std::invalid_argument("--ratio must be in (0, 1]"); }
  if (o.backend != "cpu") {
    throw std::invalid_argument("--backend " + o.backend +
                                ": ccht bench --mode page-cache measures the CPU backend");
  }
  if (o.pages > page_pool<cpu_backend>::max_pages ||
      o.page_bytes > std::size_t(-1) / o.pages) {
    throw std::invalid_argument("--pages x --page-bytes is too large");
  }
  std::size_t const max_batch = 4096;
  std::size_t const batches[] = {1, 64, max_batch};

  // The page cache, filled with one key per page: acquire (fill), publish, release.
  page_cache_options po;
  po.table_ratio = o.ratio;
  po.cpu_threads = o.threads;
  page_cache<cpu_backend> pc(o.pages * o.page_bytes, o.page_bytes, po);
  auto const all = distinct_keys(o.pages, o.seed);
  {
    std::vector<page_id> p(max_batch), ep(max_batch);
    std::vector<page_status> st(max_batch);
    std::vector<key_type> ek(max_batch), fills, held;
    for (std::size_t b = 0; b < all.size(); b += max_batch) {
      std::size_t const n = std::min(max_batch, all.size() - b);
      std::span<key_type const> k(all.data() + b, n);
      pc.acquire(k, std::span(p.data(), n), std::span(st.data(), n), std::span(ek.data(), n),
                 std::span(ep.data(), n));
      fills.clear();
      held.clear();
      for (std::size_t i = 0; i < n; ++i) {
        if (st[i] == page_status::fill) {
          std::memset(pc.page_data(p[i]), int(k[i] & 0xff), o.page_bytes);
          fills.push_back(k[i]);
        }
        if (st[i] == page_status::fill || st[i] == page_status::hit) { held.push_back(k[i]); }
      }
      if (!fills.empty()) { pc.publish(fills); }
      if (!held.empty()) { pc.release(held); }
    }
  }
  // What stayed resident (an insert may evict within its two buckets): looked up, then released.
  std::vector<key_type> resident;
  {
    std::vector<page_id> p(max_batch);
    std::vector<page_status> st(max_batch);
    for (std::size_t b = 0; b < all.size(); b += max_batch) {
      std::size_t const n = std::min(max_batch, all.size() - b);
      std::span<key_type const> k(all.data() + b, n);
      pc.lookup(k, std::span(p.data(), n), std::span(st.data(), n));
      std::size_t const first = resident.size();
      for (std::size_t i = 0; i < n; ++i) {
        if (st[i] == page_status::hit) { resident.push_back(k[i]); }
      }
      if (resident.size() > first) {
        pc.release(std::span<key_type const>(resident.data() + first, resident.size() - first));
      }
    }
  }
  if (resident.empty()) { throw std::runtime_error("page-cache bench: no page stayed resident"); }
  // Filling pins a whole batch at once, so a key whose two buckets fill up with that batch's
  // pinned pages gets no_space then: only the measured phase below must have none.
  auto const filled = pc.stats();

  // The plain table of the same entries: double LRU, capacity = pages, the same slots.
  table_options to;
  to.seed = o.seed ^ 0x5bd1e995ull;
  to.cpu_threads = o.threads;
  to.capacity = o.pages;
  auto const slots =
      static_cast<std::size_t>(std::ceil(static_cast<double>(o.pages) / o.ratio));
  table<cpu_backend, double_lru> t(std::max(slots, o.pages), to);
  {
    std::vector<key_type> ek(all.size());
    std::vector<value_type> ev(all.size());
    t.insert_or_assign(all, all, ek, ev);
  }
  std::vector<key_type> table_keys(t.size());
  {
    std::vector<value_type> tv(table_keys.size());
    table_keys.resize(t.export_entries(table_keys, tv));
  }
  std::fprintf(stderr,
               "page-cache bench (cpu backend, %d threads): %zu pages of %zu bytes, %zu resident; "
               "table: %zu slots, %zu entries\n",
               o.threads, pc.num_pages(), pc.page_bytes(), resident.size(), t.num_slots(),
               table_keys.size());

  std::mt19937_64 rng(o.seed);
  constexpr std::size_t keys_per_rep = std::size_t{1} << 17;
  std::vector<page_bench_row> rows;
  std::vector<page_id> pages(max_batch);
  std::vector<page_status> status(max_batch);
  std::vector<key_type> ek(max_batch);
  std::vector<page_id> ep(max_batch);
  std::vector<value_type> vals(max_batch);
  std::unique_ptr<bool[]> found(new bool[max_batch]);
  std::size_t table_misses = 0;
  for (std::size_t b : batches) {
    std::size_t const calls = std::max<std::size_t>(1, keys_per_rep / b);
    std::size_t const lat_calls = std::max<std::size_t>(calls, 256);
    auto const stream = uniform_over(resident, lat_calls * b, rng);
    auto const tstream = uniform_over(table_keys, calls * b, rng);
    std::span<page_id> ps(pages.data(), b);
    std::span<page_status> ss(status.data(), b);
    std::span<key_type> eks(ek.data(), b);
    std::span<page_id> eps(ep.data(), b);
    page_bench_row row;
    row.batch = b;
    std::vector<double> acq_rates, find_rates, lat_us;
    for (int r = 0; r < o.repeat; ++r) {
      // (a) acquire + release of resident pages
      auto const t0 = clk::now();
      for (std::size_t c = 0; c < calls; ++c) {
        std::span<key_type const> k(stream.data() + c * b, b);
        pc.acquire(k, ps, ss, eks, eps);
        pc.release(k);
      }
      acq_rates.push_back(double(calls * b) /
                          std::chrono::duration<double>(clk::now() - t0).count());
      // (c) the table's find of resident keys
      auto const t1 = clk::now();
      for (std::size_t c = 0; c < calls; ++c) {
        t.find(std::span<key_type const>(tstream.data() + c * b, b),
               std::span<value_type>(vals.data(), b), std::span<bool>(found.get(), b));
      }
      find_rates.push_back(double(calls * b) /
                           std::chrono::duration<double>(clk::now() - t1).count());
      for (std::size_t i = 0; i < b; ++i) { table_misses += found[i] ? 0 : 1; }
      // (b) lookup latency, one timed call each (the release after it is not timed)
      for (std::size_t c = 0; c < lat_calls; ++c) {
        std::span<key_type const> k(stream.data() + c * b, b);
        auto const l0 = clk::now();
        pc.lookup(k, ps, ss);
        lat_us.push_back(std::chrono::duration<double, std::micro>(clk::now() - l0).count());
        pc.release(k);
      }
    }
    row.acquire_release = median(acq_rates);
    row.table_find = median(find_rates);
    row.p50_us = quantile(lat_us, 0.50);
    row.p99_us = quantile(lat_us, 0.99);
    row.lookup_calls = lat_us.size();
    rows.push_back(row);
  }
  if (table_misses != 0) {
    std::fprintf(stderr, "warning: %zu table finds missed (the table evicted while filling)\n",
                 table_misses);
  }
  auto st = pc.stats();
  st.no_space -= filled.no_space;
  st.pending -= filled.pending;
  if (st.pages_pinned != 0 || st.no_space != 0 || st.pending != 0) {
    throw std::runtime_error("page-cache bench: " + std::to_string(st.pages_pinned) +
                             " pages left pinned, " + std::to_string(st.no_space) +
                             " no_space, " + std::to_string(st.pending) + " pending");
  }

  if (o.json) {
    for (auto const& r : rows) {
      nlohmann::json j{{"mode", "page-cache"},
                       {"backend", o.backend},
                       {"batch", r.batch},
                       {"pages", pc.num_pages()},
                       {"page_bytes", pc.page_bytes()},
                       {"resident", resident.size()},
                       {"threads", o.threads},
                       {"table_ratio", o.ratio},
                       {"table_slots", t.num_slots()},
                       {"acquire_release_pages_per_s", r.acquire_release},
                       {"table_find_ops_per_s", r.table_find},
                       {"ratio", r.table_find > 0 ? r.acquire_release / r.table_find : 0.0},
                       {"lookup_p50_us", r.p50_us},
                       {"lookup_p99_us", r.p99_us},
                       {"lookup_calls", r.lookup_calls},
                       {"repeat", o.repeat}};
      std::printf("%s\n", j.dump().c_str());
    }
  } else {
    markdown_table tab({"batch", "acquire+release Mpages/s", "table find Mops/s", "ratio",
                        "lookup p50 µs", "lookup p99 µs"});
    for (auto const& r : rows) {
      tab.add({std::to_string(r.batch), fixed(r.acquire_release / 1e6, 2),
               fixed(r.table_find / 1e6, 2),
               r.table_find > 0 ? fixed(r.acquire_release / r.table_find, 2) + "x" : "-",
               fixed(r.p50_us, 2), fixed(r.p99_us, 2)});
    }
    std::printf("%s", tab.str().c_str());
  }
  return 0;
}

}  // namespace ccht::cli
