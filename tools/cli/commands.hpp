// The subcommands of the `ccht` CLI. Each returns the process exit code (0 ok, 1 failure);
// bad arguments throw std::invalid_argument, which main() turns into exit code 2.
#pragma once

#include "../sim/kv_replay.hpp"
#include "../sim/model_runtime.hpp"
#include "../sim/replay.hpp"
#include "../sim/traces.hpp"
#include "../sim/workloads.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ccht::cli {

/// Options shared by replay, workload and compare.
struct run_options {
  std::vector<std::string> policies;   ///< policy names
  std::vector<std::size_t> capacities; ///< capacities (objects)
  sim::replay_options replay;          ///< batch, backend, slots ratio
  bool json = false;                   ///< JSON Lines on stdout instead of Markdown
};

/// A result row as a JSON object (the fields of `--json`).
nlohmann::json to_json(sim::replay_result const& r);
/// One JSON line; invalid UTF-8 in names is replaced instead of throwing.
std::string json_line(sim::replay_result const& r);

/// Replays @p requests (named @p name) over every policy and capacity, printing one row each.
int run_rows(std::vector<sim::request> const& requests, std::string const& name,
             run_options const& opt);

/// `ccht replay`.
int cmd_replay(std::string const& trace_path, sim::trace_format format,
               sim::csv_options const& csv, run_options opt);

/// `ccht workload`.
int cmd_workload(sim::workload_options const& w, run_options opt);

/// The --remote options of kv-replay and weights (a ccht::redis_tier).
struct remote_cli_options {
  std::string url;                  ///< redis:// or unix:// URL (empty: no remote tier)
  std::string prefix = "ccht:";     ///< key prefix (namespace)
  std::size_t ttl_s = 0;            ///< value expiry in seconds (0: none; at most redis_max_ttl)
  std::size_t timeout_ms = 500;     ///< longest a call waits on the servers
  std::size_t pipeline = 128;       ///< commands per round trip (1: one round trip per page)
  std::string write = "back";       ///< back (host-tier victims) or through (also every publish)
};

/// A remote tier for @p o (null when no URL). Throws std::invalid_argument when this build has
/// no hiredis, ccht::error for a bad URL or a refused AUTH.
std::unique_ptr<remote_store> make_remote(remote_cli_options const& o);

/// Exit code of a run given --remote: 1, with one line on stderr, when the remote tier had errors
/// and never reached a server, or stored none of the @p writes the run asked of it; 0 otherwise
/// (a warning line on stderr when some calls failed). 0 for null.
int remote_verdict(remote_store const* remote, std::uint64_t writes);

/// The remote fields of a JSON row: tier counters and the store's own.
void add_remote_json(nlohmann::json& j, remote_stats const& s);

/// Options of `ccht kv-replay`.
struct kv_replay_options {
  std::string trace;                 ///< Mooncake JSONL trace (empty: default_kv_trace())
  std::vector<std::size_t> pages;    ///< page counts of the (upper) cache, one run each
  std::size_t page_bytes = 256;      ///< bytes per page
  std::string tiers;                 ///< "host=M": a host tier of M pages (empty: none)
  std::vector<std::string> policies{"page-cache", "lru"};  ///< page-cache, page-cache-coarse, lru
  double ratio = 0.9;                ///< page-cache: pages over index slots
  std::size_t requests = 0;          ///< replay the first N requests only (0: all)
  bool json = false;                 ///< JSON Lines on stdout instead of Markdown
  remote_cli_options remote;         ///< --remote: a Redis tier under the host tier
};

/// The trace `ccht kv-replay` reads without --trace: $CCHT_TRACES_DIR/mooncake_synthetic.jsonl
/// when that variable is set, else empty (kv-replay then replays a synthetic trace it generates).
std::string default_kv_trace();

/// Host-tier pages of a --tiers value ("host=M"); 0 for an empty value. Throws
/// std::invalid_argument for anything else.
std::size_t parse_host_tier(std::string const& tiers);

/// A kv-replay result row as a JSON object (the fields of `ccht kv-replay --json`).
nlohmann::json to_json(sim::kv_replay_result const& r, std::string const& trace, double ratio);

/// `ccht kv-replay`: a Mooncake trace as a prefix KV cache through ccht::page_cache and an exact
/// LRU. Returns 1 when a page check or an invariant failed.
int cmd_kv_replay(kv_replay_options opt);

/// `ccht weights`: one JSON line (or a Markdown table) of the run, and with --digest one line per
/// tensor. Returns 1 when a load differed from its file.
int cmd_weights(sim::weights_options o, bool json, remote_cli_options const& remote);

/// Options of `ccht bench`.
struct bench_options {
  std::string mode = "table";     ///< table (the default) or page-cache
  std::size_t pages = std::size_t{1} << 20;  ///< page-cache mode: pages of the cache
  std::size_t page_bytes = 64;    ///< page-cache mode: bytes per page
  std::string op = "find";        ///< find, insert or mixed
  std::string dist = "uniform";   ///< uniform or zipfian (of the looked-up keys)
  double zipf_theta = 0.99;       ///< zipfian skew
  std::size_t slots = std::size_t{1} << 22;  ///< table slots
  double load = 0.9;              ///< fill before measuring
  double miss_ratio = 0.0;        ///< find: fraction of keys never inserted
  double read_ratio = 0.5;        ///< mixed: fraction of finds
  std::size_t batch = std::size_t{1} << 20;  ///< keys per call
  int threads = 2;                ///< CPU threads
  int repeat = 3;                 ///< timed repetitions (the median is reported)
  std::string backend = "cpu";    ///< cpu or cuda
  std::uint64_t seed = 1;         ///< key seed
  bool json = false;              ///< JSON Lines instead of Markdown
  bool peer = true;               ///< also measure libcuckoo (CPU)
  /// Table policies to time on the same keys (empty: ccht-lru against libcuckoo).
  std::vector<std::string> policies;
  double ratio = 0.9;             ///< with policies: cache/table ratio (capacity / slots)
  std::uint32_t global_samples = 0;       ///< with policies: buckets ranked per global eviction
  std::string global_search = "two-level";  ///< with policies: two-level, tail-index, own-first or sampled
  std::uint32_t own_slack = ccht::default_own_first_slack;  ///< with own-first: its slack
  bool bulk_select = true;        ///< with policies: table_options::bulk_victim_select
};

/// `ccht bench`.
int cmd_bench(bench_options const& opt);
/// `ccht bench --mode page-cache`: acquire+release throughput, lookup latency and the plain
/// table's find throughput at batches 1, 64 and 4096.
int cmd_bench_page_cache(bench_options const& opt);
/// `ccht bench --policy ...`: several table policies as caches on the same key streams.
int cmd_bench_policies(bench_options const& opt);
/// Throws std::invalid_argument for options either bench path rejects.
void check_bench_options(bench_options const& opt);
/// Median of @p v (the mean of the middle two for an even count); @p v must not be empty.
double median(std::vector<double> v);

/// Options of `ccht compare`.
struct compare_options {
  std::string trace;              ///< a user's trace instead of the default workloads
  sim::trace_format format = sim::trace_format::auto_detect;  ///< its format
  sim::csv_options csv;           ///< csv columns
  std::vector<std::string> policies;   ///< default: all
  std::vector<std::size_t> capacities; ///< default: per workload
  std::string out_dir;            ///< results folder (default results/compare-<time>)
  std::uint64_t keys = 100000;    ///< default workloads' key space
  std::uint64_t requests = 1000000;  ///< default workloads' requests
  sim::replay_options replay;     ///< batch, backend
  bool plot = true;               ///< run the plotting script
};

/// `ccht compare`.
int cmd_compare(compare_options opt);

/// Options of `ccht paper`.
struct paper_options {
  std::size_t capacity = 16384;      ///< entries the cache holds
  std::uint64_t keys = 200000;       ///< key space of the YCSB workloads
  std::uint64_t requests = 400000;   ///< requests per workload
  std::vector<double> ratios{0.7, 0.8, 0.9};  ///< cache/table ratios of the tables
  bool sweep = true;                 ///< also sweep ratios 0.1-0.9 (zipfian, 50% queries) for the plot
  std::string out_dir;               ///< results folder (default results/paper-<time>)
  sim::replay_options replay;        ///< batch, backend, samples
  bool plot = true;                  ///< draw PNG plots
};

/// `ccht paper`: the paper's evaluation (YCSB zipfian/uniform/latest, 50% and 95% queries,
/// cache/table ratios) for double LRU, coarse LRU, the kick-out baselines and exact LRU.
int cmd_paper(paper_options opt);

}  // namespace ccht::cli
