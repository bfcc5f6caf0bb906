// `ccht`: trace replay, synthetic workloads, policy comparisons and microbenchmarks.
// Exit codes: 0 success, 2 bad arguments, 1 failure; errors are one line on stderr.
#include "commands.hpp"

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <stdexcept>

namespace {

/// Help of --no-bulk-select, shared by every subcommand that takes it.
constexpr char const* no_bulk_select_help =
    "ccht-double-lru: batches search a victim per insert instead of choosing all of a batch's "
    "victims in one pass when it needs one per bucket (table_options::bulk_victim_select)";
/// Help of --own-slack, shared by every subcommand that takes it.
constexpr char const* own_slack_help =
    "With --global-search own-first: how much younger than the last global victim an own "
    "bucket's oldest entry may be and still be evicted in place, in 256ths (0-255; 0: at least "
    "as old)";

using namespace ccht;

/// A whole decimal integer of at least @p min that fits in 64 bits, passed on without leading
/// zeros (use it with transform(): check() hands validators a copy). CLI11 alone reads "010" as
/// octal 8, "0x10" as hex and "-1" as 2^64 - 1, and its CLI::PositiveNumber says "not in range
/// 1 to" a 309-digit double.
CLI::Validator decimal_integer(std::uint64_t min, std::string const& what) {
  return CLI::Validator(
      [min, what](std::string& text) -> std::string {
        std::uint64_t v = 0;
        auto const [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || p != text.data() + text.size() || text.empty() || v < min) {
          return "expected " + what + ", got '" + text + "'";
        }
        text = std::to_string(v);
        return {};
      },
      min == 0 ? "INT>=0" : "INT>0");
}

CLI::Validator const positive_integer = decimal_integer(1, "a positive integer");
CLI::Validator const non_negative_integer = decimal_integer(0, "a non-negative integer");

void add_run_options(CLI::App* app, cli::run_options& o, std::string& policies_csv,
                     std::string default_policies) {
  policies_csv = std::move(default_policies);
  std::string known;
  for (auto const& p : sim::known_policies()) { known += (known.empty() ? "" : ", ") + p; }
  app->add_option("--policy", policies_csv, "Policies, comma-separated: " + known)
      ->capture_default_str();
  app->add_option("--capacity", o.capacities,
                  "Capacities in objects, comma-separated (default: 1/5/10/20% of distinct keys)")
      ->delimiter(',');
  app->add_option("--slots-ratio", o.replay.slots_ratio,
                  "Capacity over table slots, in (0, 1], for ccht-double-lru and ccht-coarse-lru")
      ->capture_default_str();
  app->add_option("--global-samples", o.replay.global_samples,
                  "Buckets ranked per global eviction (ccht-double-lru, ccht-coarse-lru, cht-lru); "
                  "0: 64 with the tail index, 256 with two-level, else 8")
      ->capture_default_str();
  app->add_option("--global-search", o.replay.global_search,
                  "Victim search of ccht-double-lru and cht-lru: tail-index (16 buckets per line "
                  "read), two-level (256 buckets per upper line read), own-first (the insert's own "
                  "buckets first, else two-level) or sampled (one bucket per read)")
      ->capture_default_str()
      ->check(CLI::IsMember({"tail-index", "two-level", "own-first", "sampled"}));
  app->add_option("--own-slack", o.replay.own_slack, own_slack_help)
      ->capture_default_str()
      ->check(CLI::Range(0u, 255u));
  app->add_flag("!--no-bulk-select", o.replay.bulk_select, no_bulk_select_help);
  app->add_option("--batch", o.replay.batch, "Requests per table call (1 = exact order)")
      ->capture_default_str()
      ->transform(positive_integer);
  app->add_option("--backend", o.replay.backend, "Table backend: cpu or cuda")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app->add_flag("--json", o.json, "Print JSON Lines on stdout (human text goes to stderr)");
}

std::vector<std::string> split(std::string const& s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    std::size_t const c = std::min(s.find(',', pos), s.size());
    if (c > pos) { out.push_back(s.substr(pos, c - pos)); }
    pos = c + 1;
  }
  return out;
}

/// The names of a --policy list; an empty list (`--policy ""`, `--policy ,`) is a bad argument.
std::vector<std::string> policy_list(std::string const& csv) {
  auto names = split(csv);
  if (names.empty()) {
    throw std::invalid_argument("--policy: expected one or more policy names, comma-separated, got '" +
                                csv + "'");
  }
  return names;
}

void add_csv_options(CLI::App* app, sim::csv_options& csv) {
  app->add_option("--csv-key-column", csv.key_column, "csv: 1-based column of the object id")
      ->capture_default_str()
      ->transform(positive_integer);
  app->add_option("--csv-delimiter", csv.delimiter, "csv: field separator")->capture_default_str();
  app->add_flag("--csv-header", csv.has_header, "csv: the first line is a header");
  app->add_flag("--csv-hash-strings", csv.hash_strings, "csv: hash non-numeric ids");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ccht: replay traces and synthetic workloads through ccht and exact LRU/FIFO/LFU, "
               "and benchmark the table"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");

  // replay
  auto* replay = app.add_subcommand("replay", "Replay a trace: every request a GET, a miss inserts");
  cli::run_options replay_opt;
  std::string replay_policies, trace_path, format_name = "auto";
  sim::csv_options replay_csv;
  replay->add_option("--trace", trace_path, "Trace file")->required()->check(CLI::ExistingFile);
  replay->add_option("--format", format_name,
                     "auto, lirs, mooncake, plain, csv, oracle-general, arc")
      ->capture_default_str();
  add_csv_options(replay, replay_csv);
  add_run_options(replay, replay_opt, replay_policies, "lru,ccht-lru");

  // workload
  auto* workload = app.add_subcommand("workload", "Replay a synthetic workload");
  cli::run_options work_opt;
  std::string work_policies, dist_name = "zipfian";
  sim::workload_options w;
  workload->add_option("--dist", dist_name, "zipfian, uniform, latest, scan, scan-mix")
      ->capture_default_str();
  workload->add_option("--keys", w.keys, "Key-space size")->capture_default_str();
  workload->add_option("--requests", w.requests, "Requests")->capture_default_str();
  workload->add_option("--zipf", w.zipf_theta, "Zipfian theta, in [0, 1)")->capture_default_str();
  workload->add_option("--read-ratio", w.read_ratio, "Fraction of queries (the rest are updates)")
      ->capture_default_str();
  workload->add_option("--scan-fraction", w.scan_fraction, "scan-mix: fraction of scan requests")
      ->capture_default_str();
  workload->add_option("--seed", w.seed, "Generator seed")->capture_default_str();
  add_run_options(workload, work_opt, work_policies, "lru,ccht-lru");

  // bench
  auto* bench = app.add_subcommand("bench", "Throughput microbenchmark of the table");
  cli::bench_options b;
  bench->add_option("--mode", b.mode,
                    "table (the table's throughput, the default) or page-cache (ccht::page_cache: "
                    "acquire+release and lookup latency against table find, batches 1, 64, 4096)")
      ->capture_default_str();
  bench->add_option("--pages", b.pages, "page-cache mode: pages of the cache")->capture_default_str();
  bench->add_option("--page-bytes", b.page_bytes, "page-cache mode: bytes per page")
      ->capture_default_str();
  bench->add_option("--op", b.op, "find, insert or mixed")->capture_default_str();
  bench->add_option("--dist", b.dist, "Key distribution: uniform or zipfian")->capture_default_str();
  bench->add_option("--zipf", b.zipf_theta, "Zipfian theta")->capture_default_str();
  bench->add_option("--slots", b.slots, "Table slots")->capture_default_str();
  bench->add_option("--load", b.load, "Load factor before measuring, in (0, 1]")->capture_default_str();
  bench->add_option("--miss-ratio", b.miss_ratio, "find/mixed: fraction of absent keys")
      ->capture_default_str();
  bench->add_option("--read-ratio", b.read_ratio, "mixed: fraction of finds")->capture_default_str();
  bench->add_option("--batch", b.batch, "Keys per call")->capture_default_str();
  bench->add_option("--threads", b.threads, "CPU threads")->capture_default_str();
  bench->add_option("--repeat", b.repeat, "Timed repetitions (median reported)")->capture_default_str();
  bench->add_option("--backend", b.backend, "cpu")->capture_default_str();
  bench->add_option("--seed", b.seed, "Key seed")->capture_default_str();
  bench->add_flag("--json", b.json, "JSON Lines instead of Markdown");
  bench->add_flag("!--no-peer", b.peer, "Skip libcuckoo");
  bench->add_option("--policy", b.policies,
                    "Time these table policies as caches on the same keys instead (ccht-lru, "
                    "ccht-double-lru, cht-lru, ...); the first is the reference")
      ->delimiter(',');
  bench->add_option("--ratio", b.ratio,
                    "With --policy: cache/table ratio; each table is filled to ratio x slots. With "
                    "--mode page-cache: pages over index slots")
      ->capture_default_str();
  bench->add_option("--global-samples", b.global_samples,
                    "With --policy: buckets ranked per global eviction (0: the search's default)")
      ->capture_default_str();
  bench->add_option("--global-search", b.global_search,
                    "With --policy: victim search of ccht-double-lru and cht-lru")
      ->capture_default_str()
      ->check(CLI::IsMember({"tail-index", "two-level", "own-first", "sampled"}));
  bench->add_option("--own-slack", b.own_slack, own_slack_help)
      ->capture_default_str()
      ->check(CLI::Range(0u, 255u));
  bench->add_flag("!--no-bulk-select", b.bulk_select, no_bulk_select_help);

  // kv-replay
  auto* kv = app.add_subcommand(
      "kv-replay", "Replay a Mooncake JSONL trace as a prefix KV cache: each request's hash_ids "
                   "(512-token pages) acquired as one batch on ccht::page_cache, beside an exact "
                   "LRU with per-request pins");
  cli::kv_replay_options kvo;
  std::string kv_policies = "page-cache,lru";
  kv->add_option("--trace", kvo.trace,
                 "Mooncake JSONL trace (default: $CCHT_TRACES_DIR/mooncake_synthetic.jsonl if that "
                 "variable is set, else a synthetic prefix-sharing trace of 2000 requests)")
      ->check(CLI::ExistingFile);
  kv->add_option("--pages", kvo.pages,
                 "Pages of the (upper) cache, comma-separated for several runs (required)")
      ->required()
      ->delimiter(',');
  kv->add_option("--page-bytes", kvo.page_bytes,
                 "Bytes per page (each page is written and every hit checked byte for byte)")
      ->capture_default_str();
  kv->add_option("--tiers", kvo.tiers,
                 "host=M: a host-memory tier of M pages under the cache (ccht::tiered_page_cache; "
                 "an exact two-tier LRU for lru)");
  kv->add_option("--policy", kv_policies,
                 "Policies, comma-separated: page-cache (ccht::page_cache, double LRU), "
                 "page-cache-coarse (coarse LRU), lru (exact LRU with pins)")
      ->capture_default_str();
  kv->add_option("--ratio", kvo.ratio, "page-cache: pages over index slots, in (0, 1]")
      ->capture_default_str();
  kv->add_option("--requests", kvo.requests, "Replay only the first N requests (0: all)")
      ->capture_default_str();
  kv->add_flag("--json", kvo.json, "One JSON line per (pages, policy) on stdout instead of Markdown");
  auto add_remote = [](CLI::App* c, cli::remote_cli_options& r, char const* prefix) {
    r.prefix = prefix;
    c->add_option("--remote", r.url,
                  "A shared Redis tier: redis://[user[:password]@]host[:port][/db], "
                  "unix:///path, or host1:port1,host2:port2 (sharded by hash slot); the password "
                  "may come from $CCHT_REDIS_PASSWORD instead and is never printed");
    c->add_option("--remote-prefix", r.prefix, "Key prefix in the remote tier")->capture_default_str();
    c->add_option("--remote-ttl", r.ttl_s, "Expiry of remote values in seconds (0: none)")
        ->capture_default_str()
        ->transform(non_negative_integer);
    c->add_option("--remote-timeout-ms", r.timeout_ms, "Longest a remote call may wait")
        ->capture_default_str()
        ->transform(positive_integer);
    c->add_option("--remote-pipeline", r.pipeline,
                  "Remote commands per round trip (1: one round trip per page)")
        ->capture_default_str()
        ->transform(positive_integer);
  };
  add_remote(kv, kvo.remote, "ccht:kv:");
  kv->add_option("--remote-write", kvo.remote.write,
                 "back: host-tier victims go to the remote tier; through: every published page too")
      ->capture_default_str()
      ->check(CLI::IsMember({"back", "through"}));

  // weights
  auto* wt = app.add_subcommand(
      "weights", "Load safetensors models through ccht::weight_cache as a function runtime does: "
                 "invocations drawn from a Zipf popularity, cold and warm load times, hit ratio, "
                 "every load checked against the file");
  sim::weights_options wo;
  std::string wt_layout = "per-tensor", wt_huge = "auto", wt_budget, wt_page = "2MiB";
  bool wt_no_verify = false, wt_json = false;
  wt->add_option("--file", wo.files, "A safetensors file (repeat for several models)")
      ->required()
      ->check(CLI::ExistingFile);
  wt->add_option("--budget", wt_budget, "Cache bytes (suffixes K, M, G, T, KiB, MiB, GiB, TiB), a "
                                        "multiple of --page-bytes")->required();
  wt->add_option("--page-bytes", wt_page, "Bytes per page (a multiple of 4 KiB; of 2 MiB for huge "
                                          "pages)")->capture_default_str();
  wt->add_option("--invocations", wo.invocations, "Loads")->capture_default_str();
  wt->add_option("--zipf", wo.zipf, "Popularity exponent: model i has weight 1 / (i + 1)^S")
      ->capture_default_str();
  wt->add_option("--seed", wo.seed, "Seed of the popularity draws")->capture_default_str();
  wt->add_option("--layout", wt_layout, "per-tensor (an object per tensor) or packed (one per file)")
      ->capture_default_str()
      ->check(CLI::IsMember({"per-tensor", "packed"}));
  wt->add_option("--io-threads", wo.io_threads, "Threads reading a fill (and of the memcpy peer)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  wt->add_option("--huge-pages", wt_huge, "Hugetlb pages for the pool: auto, on or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  wt->add_flag("--no-verify", wt_no_verify, "Do not compare loads with the files");
  wt->add_flag("--digest", wo.digest, "Also one JSON line per tensor: its CRC-32 from the cache's memory");
  wt->add_flag("--json", wt_json, "JSON Lines on stdout instead of Markdown");
  cli::remote_cli_options wt_remote;
  add_remote(wt, wt_remote, "ccht:weights:");

  // compare
  auto* compare = app.add_subcommand("compare", "Miss ratios and throughput of every policy on the "
                                                "default workloads (or --trace), with plots");
  cli::compare_options c;
  std::string compare_policies, compare_format = "auto";
  compare->add_option("--trace", c.trace, "Run on this trace instead")->check(CLI::ExistingFile);
  compare->add_option("--format", compare_format, "Trace format")->capture_default_str();
  add_csv_options(compare, c.csv);
  compare->add_option("--policy", compare_policies, "Policies (default: all)");
  compare->add_option("--capacity", c.capacities, "Capacities")->delimiter(',');
  compare->add_option("--keys", c.keys, "Default workloads: key space")->capture_default_str();
  compare->add_option("--requests", c.requests, "Default workloads: requests")->capture_default_str();
  compare->add_option("--batch", c.replay.batch, "Requests per table call")
      ->capture_default_str()
      ->transform(positive_integer);
  compare->add_option("--backend", c.replay.backend, "cpu or cuda")->capture_default_str();
  compare->add_option("--global-samples", c.replay.global_samples,
                      "Buckets ranked per global eviction; 0: the search's default")
      ->capture_default_str();
  compare->add_option("--global-search", c.replay.global_search,
                      "Victim search of ccht-double-lru and cht-lru: tail-index, two-level, "
                      "own-first or sampled")
      ->capture_default_str()
      ->check(CLI::IsMember({"tail-index", "two-level", "own-first", "sampled"}));
  compare->add_option("--own-slack", c.replay.own_slack, own_slack_help)
      ->capture_default_str()
      ->check(CLI::Range(0u, 255u));
  compare->add_flag("!--no-bulk-select", c.replay.bulk_select, no_bulk_select_help);
  compare->add_option("--out", c.out_dir, "Results folder (default results/compare-<time>)");
  compare->add_flag("!--no-plot", c.plot, "Do not draw PNG plots");

  // paper
  auto* paper = app.add_subcommand("paper", "Reproduce the paper's evaluation: double LRU, coarse "
                                            "LRU, kick-out baselines and exact LRU on YCSB mixes");
  cli::paper_options po;
  paper->add_option("--capacity", po.capacity, "Entries the cache holds")->capture_default_str();
  paper->add_option("--keys", po.keys, "YCSB key space")->capture_default_str();
  paper->add_option("--requests", po.requests, "Requests per workload")->capture_default_str();
  paper->add_option("--ratio", po.ratios, "Cache/table ratios")->delimiter(',')->capture_default_str();
  paper->add_option("--batch", po.replay.batch, "Requests per table call")
      ->capture_default_str()
      ->transform(positive_integer);
  paper->add_option("--backend", po.replay.backend, "cpu or cuda")->capture_default_str();
  paper->add_option("--global-samples", po.replay.global_samples,
                    "Buckets ranked per global eviction; 0: 64 with the tail index, 256 with two-level, "
                    "else 8")
      ->capture_default_str();
  paper->add_option("--global-search", po.replay.global_search,
                    "Victim search of double LRU and LRU-CHT: tail-index, two-level, own-first or "
                    "sampled")
      ->capture_default_str()
      ->check(CLI::IsMember({"tail-index", "two-level", "own-first", "sampled"}));
  paper->add_option("--own-slack", po.replay.own_slack, own_slack_help)
      ->capture_default_str()
      ->check(CLI::Range(0u, 255u));
  paper->add_option("--out", po.out_dir, "Results folder (default results/paper-<time>)");
  paper->add_flag("!--no-sweep", po.sweep, "Skip the 0.1-0.9 ratio sweep");
  paper->add_flag("!--no-plot", po.plot, "Do not draw PNG plots");

  try {
    app.parse(argc, argv);
  } catch (CLI::CallForHelp const& e) {
    return app.exit(e);
  } catch (CLI::CallForAllHelp const& e) {
    return app.exit(e);
  } catch (CLI::ParseError const& e) {
    std::string msg = e.what();
    if (msg.empty()) { msg = "invalid arguments"; }
    // CLI11 says only "A subcommand is required" for `ccht frobnicate`: name the word.
    if (argc > 1 && argv[1][0] != '-') {
      std::string const word = argv[1];
      bool known = false;
      for (auto const* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) {
        known = known || sub->get_name() == word;
      }
      if (!known) {
        msg = "unknown subcommand '" + word +
              "' (expected replay, workload, bench, kv-replay, weights, compare or paper)";
      }
    }
    std::fprintf(stderr, "ccht: error: %s (see --help)\n", msg.c_str());
    return 2;
  }

  try {
    if (*replay) {
      replay_opt.policies = policy_list(replay_policies);
      return cli::cmd_replay(trace_path, sim::parse_trace_format(format_name), replay_csv,
                             replay_opt);
    }
    if (*workload) {
      w.dist = sim::parse_distribution(dist_name);
      work_opt.policies = policy_list(work_policies);
      return cli::cmd_workload(w, work_opt);
    }
    if (*bench) {
      if (b.mode == "page-cache") {
        if (!b.policies.empty()) {
          throw std::invalid_argument("--mode page-cache takes no --policy");
        }
        return cli::cmd_bench_page_cache(b);
      }
      if (b.mode != "table") {
        throw std::invalid_argument("--mode must be table or page-cache, got '" + b.mode + "'");
      }
      return b.policies.empty() ? cli::cmd_bench(b) : cli::cmd_bench_policies(b);
    }
    if (*kv) {
      kvo.policies = policy_list(kv_policies);
      return cli::cmd_kv_replay(kvo);
    }
    if (*wt) {
      wo.budget = sim::parse_bytes(wt_budget, "--budget");
      wo.page_bytes = sim::parse_bytes(wt_page, "--page-bytes");
      wo.layout = wt_layout == "packed" ? model_layout::packed : model_layout::per_tensor;
      wo.huge = wt_huge == "on" ? huge_pages::on : wt_huge == "off" ? huge_pages::off
                                                                   : huge_pages::automatic;
      wo.verify = !wt_no_verify;
      return cli::cmd_weights(wo, wt_json, wt_remote);
    }
    if (*paper) { return cli::cmd_paper(po); }
    if (*compare) {
      c.format = sim::parse_trace_format(compare_format);
      // Without --policy, compare runs every policy; given, it must name some.
      c.policies = compare->count("--policy") ? policy_list(compare_policies) : split(compare_policies);
      return cli::cmd_compare(c);
    }
  } catch (std::invalid_argument const& e) {
    std::fprintf(stderr, "ccht: error: %s\n", e.what());
    return 2;
  } catch (std::exception const& e) {
    std::fprintf(stderr, "ccht: error: %s\n", e.what());
    return 1;
  }
  return 2;
}
