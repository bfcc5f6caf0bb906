#include "commands.hpp"

#include "output.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <set>
#include <stdexcept>
#include <unordered_set>

#ifndef CCHT_TOOLS_DIR
#define CCHT_TOOLS_DIR "tools"
#endif

namespace ccht::cli {
namespace {

std::vector<std::string> row_cells(sim::replay_result const& r) {
  return {r.trace,
          r.policy,
          std::to_string(r.capacity),
          r.slots ? std::to_string(r.slots) : "-",
          std::to_string(r.requests),
          std::to_string(r.hits),
          std::to_string(r.misses()),
          fixed(r.miss_ratio(), 4),
          std::to_string(r.evictions),
          fixed(r.throughput() / 1e6, 2)};
}

std::vector<sim::replay_result> run_all(std::vector<sim::request> const& requests,
                                        std::string const& name, run_options const& opt,
                                        progress* bar, std::size_t& done) {
  std::vector<sim::replay_result> rows;
  double work = 0;
  for (std::size_t cap : opt.capacities) {
    for (auto const& p : opt.policies) {
      auto r = sim::replay(requests, p, cap, opt.replay);
      r.trace = name;
      work += double(requests.size());
      if (bar) { bar->update(++done, work); }
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

void check_policies(std::vector<std::string> const& policies) {
  auto const& known = sim::known_policies();
  for (auto const& p : policies) {
    if (std::find(known.begin(), known.end(), p) == known.end()) {
      throw std::invalid_argument(sim::unknown_policy_message(p));
    }
  }
}

std::size_t unique_keys(std::vector<sim::request> const& reqs) {
  std::unordered_set<std::uint64_t> s;
  s.reserve(reqs.size());
  for (auto const& r : reqs) { s.insert(r.key); }
  return s.size();
}

/// Default capacities: 1%, 5%, 10% and 20% of the distinct keys, at least two buckets.
std::vector<std::size_t> default_capacities(std::size_t distinct) {
  std::vector<std::size_t> caps;
  for (double f : {0.01, 0.05, 0.10, 0.20}) {
    std::size_t const c = std::max<std::size_t>(32, static_cast<std::size_t>(double(distinct) * f));
    if (caps.empty() || caps.back() != c) { caps.push_back(c); }
  }
  return caps;
}

}  // namespace

nlohmann::json to_json(sim::replay_result const& r) {
  return {{"trace", r.trace},           {"policy", r.policy},
          {"capacity", r.capacity},     {"slots", r.slots},
          {"requests", r.requests},     {"updates", r.updates},
          {"hits", r.hits},             {"misses", r.misses()},
          {"miss_ratio", r.miss_ratio()}, {"evictions", r.evictions},
          {"seconds", r.seconds},       {"throughput", r.throughput()},
          {"backend", r.backend},       {"batch", r.batch},
          {"buckets_per_insert", r.buckets_per_insert()},
          {"buckets_per_lookup", r.buckets_per_lookup()},
          {"buckets_per_op", r.buckets_per_op()}};
}

/// One JSON line. Trace names come from file names, which need not be UTF-8: invalid bytes are
/// replaced (U+FFFD) instead of making dump() throw after the replay has run.
std::string json_line(sim::replay_result const& r) {
  return to_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int run_rows(std::vector<sim::request> const& requests, std::string const& name,
             run_options const& opt) {
  check_policies(opt.policies);
  progress bar(opt.policies.size() * opt.capacities.size(), "rows");
  std::size_t done = 0;
  auto rows = run_all(requests, name, opt, &bar, done);
  bar.finish();
  if (opt.json) {
    for (auto const& r : rows) { std::printf("%s\n", json_line(r).c_str()); }
  } else {
    markdown_table t({"trace", "policy", "capacity", "slots", "requests", "hits", "misses",
                      "miss_ratio", "evictions", "Mreq/s"});
    for (auto const& r : rows) { t.add(row_cells(r)); }
    std::printf("%s", t.str().c_str());
  }
  return 0;
}

int cmd_replay(std::string const& trace_path, sim::trace_format format,
               sim::csv_options const& csv, run_options opt) {
  check_policies(opt.policies);
  sim::trace t = sim::read_trace(trace_path, format, csv);
  std::fprintf(stderr, "%s: %zu requests, format %s%s%s\n", trace_path.c_str(), t.keys.size(),
               std::string(sim::to_string(t.format)).c_str(),
               t.format_reason.empty() ? "" : " (auto: ", t.format_reason.empty() ? "" : (t.format_reason + ")").c_str());
  auto const reqs = sim::as_queries(t.keys);
  if (opt.capacities.empty()) { opt.capacities = default_capacities(unique_keys(reqs)); }
  return run_rows(reqs, std::filesystem::path(trace_path).filename().string(), opt);
}

int cmd_workload(sim::workload_options const& w, run_options opt) {
  check_policies(opt.policies);
  sim::validate(w);
  auto const reqs = sim::generate(w);
  std::fprintf(stderr, "workload %s\n", sim::describe(w).c_str());
  if (opt.capacities.empty()) { opt.capacities = default_capacities(w.keys); }
  return run_rows(reqs, sim::describe(w), opt);
}

int cmd_compare(compare_options opt) {
  if (opt.policies.empty()) { opt.policies = sim::known_policies(); }
  check_policies(opt.policies);
  if (opt.keys == 0 || opt.requests == 0) {
    throw std::invalid_argument("--keys and --requests must be at least 1");
  }

  struct job {
    std::string name;
    std::vector<sim::request> reqs;
    std::vector<std::size_t> caps;
  };
  std::vector<job> jobs;
  if (!opt.trace.empty()) {
    sim::trace t = sim::read_trace(opt.trace, opt.format, opt.csv);
    std::fprintf(stderr, "%s: %zu requests, format %s\n", opt.trace.c_str(), t.keys.size(),
                 std::string(sim::to_string(t.format)).c_str());
    auto reqs = sim::as_queries(t.keys);
    auto caps = opt.capacities.empty() ? default_capacities(unique_keys(reqs)) : opt.capacities;
    jobs.push_back({std::filesystem::path(opt.trace).filename().string(), std::move(reqs), caps});
  } else {
    sim::workload_options base;
    base.keys = opt.keys;
    base.requests = opt.requests;
    struct spec {
      sim::distribution d;
      double read;
    };
    for (spec s : {spec{sim::distribution::zipfian, 1.0}, spec{sim::distribution::zipfian, 0.95},
                   spec{sim::distribution::uniform, 1.0}, spec{sim::distribution::latest, 0.95},
                   spec{sim::distribution::scan_mix, 1.0}}) {
      auto w = base;
      w.dist = s.d;
      w.read_ratio = s.read;
      auto caps = opt.capacities.empty() ? default_capacities(w.keys) : opt.capacities;
      jobs.push_back({sim::describe(w), sim::generate(w), caps});
    }
  }

  std::size_t total = 0;
  for (auto const& j : jobs) { total += j.caps.size() * opt.policies.size(); }
  progress bar(total, "rows");
  std::size_t done = 0;
  std::vector<sim::replay_result> rows;
  for (auto const& j : jobs) {
    run_options ro{opt.policies, j.caps, opt.replay, false};
    auto r = run_all(j.reqs, j.name, ro, &bar, done);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  bar.finish();

  // One table per workload, a row per policy: miss ratio at each capacity, then the gap of each
  // ccht-* to exact lru. The old single table (every policy and gap as a column) was 17 columns
  // and wrapped on any terminal; these are split to 100 columns where there are many capacities.
  bool const has_lru = std::find(opt.policies.begin(), opt.policies.end(), "lru") != opt.policies.end();
  std::vector<std::string> workloads;
  std::map<std::string, std::vector<std::size_t>> caps_of;
  std::map<std::tuple<std::string, std::string, std::size_t>, double> miss;
  for (auto const& r : rows) {
    if (!caps_of.count(r.trace)) { workloads.push_back(r.trace); }
    auto& caps = caps_of[r.trace];
    if (std::find(caps.begin(), caps.end(), r.capacity) == caps.end()) { caps.push_back(r.capacity); }
    miss[{r.trace, r.policy, r.capacity}] = r.miss_ratio();
  }
  constexpr std::size_t width = 100;
  std::string miss_md;
  for (auto const& w : workloads) {
    auto const& caps = caps_of[w];
    std::vector<std::string> header{"policy"};
    for (auto c : caps) { header.push_back("m@" + std::to_string(c)); }
    if (has_lru) {
      for (auto c : caps) { header.push_back("gap@" + std::to_string(c)); }
    }
    markdown_table t(header);
    for (auto const& p : opt.policies) {
      std::vector<std::string> cells{p};
      for (auto c : caps) { cells.push_back(fixed(miss[{w, p, c}], 4)); }
      if (has_lru) {
        bool const ccht = p.rfind("ccht-", 0) == 0;
        for (auto c : caps) {
          cells.push_back(ccht ? fixed(100.0 * (miss[{w, p, c}] - miss[{w, "lru", c}]), 2) : "");
        }
      }
      t.add(cells);
    }
    miss_md += "### " + w + "\n\n" + t.str_fitting(width, 1) + "\n";
  }

  // Throughput per policy: requests over the summed replay time.
  markdown_table speed({"policy", "backend", "requests", "seconds", "Mreq/s"});
  for (auto const& p : opt.policies) {
    double secs = 0, reqs = 0;
    std::string backend;
    for (auto const& r : rows) {
      if (r.policy == p) {
        secs += r.seconds;
        reqs += double(r.requests + r.updates);
        backend = r.backend;
      }
    }
    speed.add({p, backend, fixed(reqs, 0), fixed(secs, 3), fixed(secs > 0 ? reqs / secs / 1e6 : 0, 2)});
  }

  char const* const title = has_lru ? "## Miss ratio m@capacity; gap@capacity = ccht-* miss ratio minus "
                                       "exact lru's (points)\n\n"
                                     : "## Miss ratio at each capacity (m@capacity)\n\n";
  std::printf("%s%s", title, miss_md.c_str());
  std::printf("## Throughput (batch %zu, %s backend for ccht-*)\n\n%s", opt.replay.batch,
              opt.replay.backend.c_str(), speed.str().c_str());

  // Data files.
  if (opt.out_dir.empty()) {
    std::time_t const now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
    opt.out_dir = std::string("results/compare-") + stamp;
  }
  std::filesystem::create_directories(opt.out_dir);
  std::string const csv_path = opt.out_dir + "/compare.csv";
  std::string const json_path = opt.out_dir + "/compare.jsonl";
  {
    std::ofstream csv(csv_path), js(json_path);
    csv << "trace,policy,capacity,slots,requests,updates,hits,misses,miss_ratio,evictions,"
           "seconds,throughput,backend,batch\n";
    for (auto const& r : rows) {
      std::string quoted;  // csv: double any quote inside the field
      for (char ch : r.trace) { quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch); }
      csv << '"' << quoted << "\"," << r.policy << ',' << r.capacity << ',' << r.slots << ','
          << r.requests << ',' << r.updates << ',' << r.hits << ',' << r.misses() << ','
          << r.miss_ratio() << ',' << r.evictions << ',' << r.seconds << ',' << r.throughput()
          << ',' << r.backend << ',' << r.batch << '\n';
      js << json_line(r) << '\n';
    }
    std::ofstream md(opt.out_dir + "/compare.md");
    md << title << miss_md << "## Throughput\n\n" << speed.str();
    if (!csv || !js || !md) { throw std::runtime_error("cannot write results to " + opt.out_dir); }
  }
  std::fprintf(stderr, "\nresults: %s (compare.csv, compare.jsonl, compare.md", opt.out_dir.c_str());
  if (opt.plot) {
    std::string const script = std::string(CCHT_TOOLS_DIR) + "/plot_results.py";
    std::string const cmd = "python3 '" + script + "' '" + csv_path + "' '" + opt.out_dir + "'";
    if (std::filesystem::exists(script) && std::system(cmd.c_str()) == 0) {
      std::fprintf(stderr, ", miss_ratio.png, throughput.png");
    } else {
      std::fprintf(stderr, "; no plots: '%s' failed — run tools/dev.sh setup for matplotlib",
                   cmd.c_str());
    }
  }
  std::fprintf(stderr, ")\n");
  return 0;
}

}  // namespace ccht::cli
