// `ccht paper`: the evaluation of Zhang et al. (2020) on our table. YCSB zipfian, uniform and
// latest at 50% and 95% queries; cache/table ratios 0.7, 0.8, 0.9 (and a 0.1-0.9 sweep for the
// plot); double LRU, coarse LRU, the kick-out baselines (LRU-CHT, Random-CHT) and exact LRU.
// Prints memory accesses (buckets) per insert and per operation, hit ratio and throughput, and
// the relative change against LRU-CHT next to the paper's figures.
#include "commands.hpp"
#include "output.hpp"

#include <ccht/policy_list.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#ifndef CCHT_TOOLS_DIR
#define CCHT_TOOLS_DIR "tools"
#endif

namespace ccht::cli {
namespace {

struct row {
  std::string workload;
  double read = 0;
  double ratio = 0;  // 0 for exact lru (no table)
  sim::replay_result r;
};

double pct(double ours, double base) { return base > 0 ? 100.0 * (ours - base) / base : 0.0; }

}  // namespace

int cmd_paper(paper_options opt) {
  for (double r : opt.ratios) {
    if (!(r > 0 && r <= 1)) { throw std::invalid_argument("--ratio values must be in (0, 1]"); }
  }
  if (opt.capacity < 32 || opt.keys == 0 || opt.requests == 0) {
    throw std::invalid_argument("--capacity >= 32, --keys >= 1 and --requests >= 1");
  }
  // The paper's tables: every policy with a global capacity layer (a cache smaller than its
  // table), in the list's order: ccht-double-lru, ccht-coarse-lru, cht-lru, cht-random.
  std::vector<std::string> tables;
  for_each_policy([&]<class P>(std::type_identity<P>) {
    if (P::global != global_layer::none) { tables.push_back(policy_name<P>(policy_naming::tools)); }
  });
  std::string const baseline = "cht-lru";

  struct wl {
    sim::distribution d;
    double read;
  };
  std::vector<wl> wls;
  for (auto d : {sim::distribution::zipfian, sim::distribution::uniform, sim::distribution::latest}) {
    for (double read : {0.5, 0.95}) { wls.push_back({d, read}); }
  }
  std::vector<double> sweep;
  if (opt.sweep) {
    for (int i = 1; i <= 9; ++i) {
      double const r = i / 10.0;
      if (std::find(opt.ratios.begin(), opt.ratios.end(), r) == opt.ratios.end()) { sweep.push_back(r); }
    }
  }
  std::size_t const total = wls.size() * (1 + opt.ratios.size() * tables.size()) + sweep.size() * tables.size();
  progress bar(total, "runs");
  std::size_t done = 0;
  double work = 0;

  std::vector<row> rows;
  auto run = [&](std::string const& name, double read, std::vector<sim::request> const& reqs,
                 std::string const& policy, double ratio) {
    auto ro = opt.replay;
    ro.slots_ratio = ratio > 0 ? ratio : 1.0;
    auto r = sim::replay(reqs, policy, opt.capacity, ro);
    r.trace = name;
    rows.push_back({name, read, ratio, r});
    work += double(reqs.size());
    bar.update(++done, work);
  };
  for (auto const& w : wls) {
    sim::workload_options o;
    o.dist = w.d;
    o.read_ratio = w.read;
    o.keys = opt.keys;
    o.requests = opt.requests;
    auto const reqs = sim::generate(o);
    std::string const name(sim::to_string(w.d));
    run(name, w.read, reqs, "lru", 0);
    for (double ratio : opt.ratios) {
      for (auto const& p : tables) { run(name, w.read, reqs, p, ratio); }
    }
    if (w.d == sim::distribution::zipfian && w.read == 0.5) {
      for (double ratio : sweep) {
        for (auto const& p : tables) { run(name, w.read, reqs, p, ratio); }
      }
    }
  }
  bar.finish();

  auto find_row = [&](std::string const& wl, double read, double ratio,
                      std::string const& p) -> sim::replay_result const* {
    for (auto const& x : rows) {
      if (x.workload == wl && x.read == read && x.r.policy == p && (p == "lru" || x.ratio == ratio)) {
        return &x.r;
      }
    }
    return nullptr;
  };

  // Table 1: every run at the paper's ratios.
  markdown_table all({"workload", "queries", "ratio", "policy", "hit ratio", "buckets/insert",
                      "buckets/op", "Mreq/s"});
  for (auto const& x : rows) {
    bool const at_paper_ratio = x.ratio == 0 || std::find(opt.ratios.begin(), opt.ratios.end(),
                                                          x.ratio) != opt.ratios.end();
    if (!at_paper_ratio) { continue; }
    bool const table = x.r.policy != "lru";
    all.add({x.workload, fixed(100 * x.read, 0) + "%", table ? fixed(x.ratio, 1) : "-", x.r.policy,
             fixed(1.0 - x.r.miss_ratio(), 4), table ? fixed(x.r.buckets_per_insert(), 2) : "-",
             table ? fixed(x.r.buckets_per_op(), 2) : "-", fixed(x.r.throughput() / 1e6, 2)});
  }

  // Table 2: relative change against the baseline, next to the paper.
  markdown_table rel({"workload", "queries", "ratio", "policy", "Δ buckets/insert",
                      "Δ buckets/op", "hit loss (points)", "throughput ×"});
  double worst_loss_double = 0, worst_loss_coarse = 0;
  std::map<double, std::vector<double>> ins_double, op_double_50;
  for (auto const& w : wls) {
    std::string const name(sim::to_string(w.d));
    for (double ratio : opt.ratios) {
      auto const* base = find_row(name, w.read, ratio, baseline);
      if (!base) { continue; }
      for (std::string const p : {"ccht-double-lru", "ccht-coarse-lru"}) {
        auto const* r = find_row(name, w.read, ratio, p);
        if (!r) { continue; }
        double const loss = 100.0 * (r->miss_ratio() - base->miss_ratio());
        bool const has_access = baseline != "lru";
        rel.add({name, fixed(100 * w.read, 0) + "%", fixed(ratio, 1), p,
                 has_access ? fixed(pct(r->buckets_per_insert(), base->buckets_per_insert()), 2) + "%" : "-",
                 has_access ? fixed(pct(r->buckets_per_op(), base->buckets_per_op()), 2) + "%" : "-",
                 fixed(loss, 3),
                 base->throughput() > 0 ? fixed(r->throughput() / base->throughput(), 2) + "x" : "-"});
        if (w.d != sim::distribution::latest) {
          (p == "ccht-double-lru" ? worst_loss_double : worst_loss_coarse) =
              std::max(p == "ccht-double-lru" ? worst_loss_double : worst_loss_coarse, loss);
        }
        if (p == "ccht-double-lru" && has_access) {
          ins_double[ratio].push_back(pct(r->buckets_per_insert(), base->buckets_per_insert()));
          if (w.read == 0.5) {
            op_double_50[ratio].push_back(pct(r->buckets_per_op(), base->buckets_per_op()));
          }
        }
      }
    }
  }
  auto mean = [](std::vector<double> const& v) {
    double s = 0;
    for (double x : v) { s += x; }
    return v.empty() ? 0.0 : s / double(v.size());
  };
  markdown_table paper({"measure (vs " + baseline + ")", "paper", "ccht (mean over workloads)"});
  paper.add({"buckets per insert, double LRU, ratio 0.8", "-30.39%",
             ins_double.count(0.8) ? fixed(mean(ins_double[0.8]), 2) + "%" : "-"});
  paper.add({"buckets per insert, double LRU, ratio 0.9", "-94.63%",
             ins_double.count(0.9) ? fixed(mean(ins_double[0.9]), 2) + "%" : "-"});
  for (auto [ratio, figure] : {std::pair{0.7, "-10.59%"}, std::pair{0.8, "-32.86%"},
                               std::pair{0.9, "-97.25%"}}) {
    paper.add({"buckets per op, 50% queries, double LRU, ratio " + fixed(ratio, 1), figure,
               op_double_50.count(ratio) ? fixed(mean(op_double_50[ratio]), 2) + "%" : "-"});
  }
  paper.add({"worst hit-rate loss, double LRU (zipfian, uniform)", "<= 0.12 points",
             fixed(worst_loss_double, 3) + " points"});
  paper.add({"worst hit-rate loss, coarse LRU (zipfian, uniform)", "<= 0.22 points",
             fixed(worst_loss_coarse, 3) + " points"});

  char const* const geometry_note =
      "With 16-slot buckets the kick-out baseline rarely kicks at these ratios, so the access\n"
      "saving and coarse LRU's small loss cannot show here; `ccht_kick_geometry` runs the same\n"
      "core at 2-16 slots per bucket and reproduces both at 2 slots (docs/results/paper.md).\n";
  std::printf("## ccht paper: capacity %zu, %llu keys, %llu requests per workload, batch %zu, %s backend\n\n",
              opt.capacity, static_cast<unsigned long long>(opt.keys),
              static_cast<unsigned long long>(opt.requests), opt.replay.batch,
              opt.replay.backend.c_str());
  std::printf("### Against the paper\n\n%s\n%s\n", paper.str().c_str(), geometry_note);
  std::printf("### Relative to %s (same workload, ratio and table code)\n\n%s\n", baseline.c_str(),
              rel.str().c_str());
  std::printf("### All runs\n\n%s", all.str().c_str());

  if (opt.out_dir.empty()) {
    std::time_t const now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
    opt.out_dir = std::string("results/paper-") + stamp;
  }
  std::filesystem::create_directories(opt.out_dir);
  std::string const csv_path = opt.out_dir + "/paper.csv";
  {
    std::ofstream csv(csv_path), js(opt.out_dir + "/paper.jsonl"), md(opt.out_dir + "/paper.md");
    csv << "workload,queries,ratio,policy,capacity,slots,requests,updates,hits,miss_ratio,"
           "buckets_per_insert,buckets_per_lookup,buckets_per_op,seconds,throughput\n";
    for (auto const& x : rows) {
      auto const& r = x.r;
      csv << x.workload << ',' << x.read << ',' << x.ratio << ',' << r.policy << ',' << r.capacity
          << ',' << r.slots << ',' << r.requests << ',' << r.updates << ',' << r.hits << ','
          << r.miss_ratio() << ',' << r.buckets_per_insert() << ',' << r.buckets_per_lookup()
          << ',' << r.buckets_per_op() << ',' << r.seconds << ',' << r.throughput() << '\n';
      auto j = to_json(r);
      j["workload"] = x.workload;
      j["queries"] = x.read;
      j["ratio"] = x.ratio;
      js << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
    md << "### Against the paper\n\n" << paper.str() << "\n" << geometry_note << "\n### Relative to "
       << baseline << "\n\n"
       << rel.str() << "\n### All runs\n\n" << all.str();
    if (!csv || !js || !md) { throw std::runtime_error("cannot write results to " + opt.out_dir); }
  }
  std::fprintf(stderr, "\nresults: %s (paper.csv, paper.jsonl, paper.md", opt.out_dir.c_str());
  if (opt.plot) {
    std::string const script = std::string(CCHT_TOOLS_DIR) + "/plot_paper.py";
    std::string const cmd = "python3 '" + script + "' '" + csv_path + "' '" + opt.out_dir + "'";
    if (std::filesystem::exists(script) && std::system(cmd.c_str()) == 0) {
      std::fprintf(stderr, ", paper_sweep.png");
    } else {
      std::fprintf(stderr, "; no plots: '%s' failed", cmd.c_str());
    }
  }
  std::fprintf(stderr, ")\n");
  return 0;
}

}  // namespace ccht::cli
