// `ccht kv-replay`: a Mooncake JSONL trace replayed as a prefix KV cache (sim/kv_replay.hpp):
// ccht::page_cache (or a tiered page cache over a host tier) against an exact pinned LRU.
#include "commands.hpp"
#include "output.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace ccht::cli {
namespace {

/// Requests of the synthetic trace replayed when no trace is given.
constexpr std::size_t synthetic_requests = 2000;

}  // namespace

std::string default_kv_trace() {
  if (char const* e = std::getenv("CCHT_TRACES_DIR"); e != nullptr && *e != '\0') {
    return (std::filesystem::path(e) / "mooncake_synthetic.jsonl").string();
  }
  return {};
}

std::size_t parse_host_tier(std::string const& tiers) {
  if (tiers.empty()) { return 0; }
  std::string_view const prefix = "host=";
  std::size_t m = 0;
  if (tiers.rfind(prefix, 0) == 0) {
    char const* b = tiers.data() + prefix.size();
    char const* e = tiers.data() + tiers.size();
    auto const [ptr, ec] = std::from_chars(b, e, m);
    if (ec == std::errc() && ptr == e && b != e && m > 0) { return m; }
  }
  throw std::invalid_argument("--tiers: expected host=PAGES with PAGES >= 1 (host-tier pages), "
                              "got '" + tiers + "'");
}

nlohmann::json to_json(sim::kv_replay_result const& r, std::string const& trace, double ratio) {
  nlohmann::json j{{"trace", trace},
                   {"policy", r.policy},
                   {"pages", r.pages},
                   {"page_bytes", r.page_bytes},
                   {"requests", r.requests},
                   {"page_refs", r.page_refs},
                   {"duplicate_refs", r.duplicate_refs},
                   {"page_hits", r.page_hits},
                   {"page_misses", r.page_misses},
                   {"hit_ratio", r.hit_ratio()},
                   {"prefix_hit_pages", r.prefix_hit_pages},
                   {"prefill_tokens_saved", r.prefill_tokens_saved()},
                   {"pending", r.pending},
                   {"no_space", r.no_space},
                   {"evictions", r.evictions},
                   {"check_failures", r.check_failures},
                   {"invariant_failures", r.invariant_failures},
                   {"pages_resident", r.pages_resident},
                   {"seconds", r.seconds}};
  if (r.policy != "lru") { j["ratio"] = ratio; }
  if (r.host_pages > 0) {
    j["host_pages"] = r.host_pages;
    j["lower_hits"] = r.lower_hits;
    j["spills"] = r.spills;
    j["spill_failures"] = r.spill_failures;
    j["host_evictions"] = r.host_evictions;
  }
  if (r.remote) {
    j["remote_hits"] = r.remote_hits;
    j["remote_lookups"] = r.remote_lookups;
    j["remote_writes"] = r.remote_writes;
    j["remote_write_drops"] = r.remote_write_drops;
    add_remote_json(j, r.remote_counters);
  }
  return j;
}

int cmd_kv_replay(kv_replay_options opt) {
  if (opt.pages.empty()) { throw std::invalid_argument("--pages is required"); }
  if (opt.policies.empty()) { throw std::invalid_argument("--policy names no policy"); }
  std::size_t const host_pages = parse_host_tier(opt.tiers);
  std::unique_ptr<remote_store> remote = make_remote(opt.remote);
  std::vector<sim::kv_replay_options> runs;
  for (std::size_t pages : opt.pages) {
    for (auto const& p : opt.policies) {
      sim::kv_replay_options o;
      o.policy = p;
      o.pages = pages;
      o.page_bytes = opt.page_bytes;
      o.host_pages = host_pages;
      o.table_ratio = opt.ratio;
      o.max_requests = opt.requests;
      if (p != "lru") {
        o.remote = remote.get();
        o.remote_write_through = opt.remote.write == "through";
      }
      sim::validate(o);  // every bad argument is reported before the trace is read
      runs.push_back(o);
    }
  }
  if (opt.trace.empty()) { opt.trace = default_kv_trace(); }
  if (!opt.trace.empty() && !std::filesystem::exists(opt.trace)) {
    throw std::invalid_argument("the trace " + opt.trace +
                                " does not exist (unset CCHT_TRACES_DIR or pass --trace FILE)");
  }
  std::vector<sim::kv_request> const requests =
      opt.trace.empty() ? sim::synthetic_kv_trace(synthetic_requests)
                        : sim::read_mooncake_requests(opt.trace);
  std::size_t refs = 0;
  for (auto const& r : requests) { refs += r.size(); }
  std::string const name =
      opt.trace.empty() ? std::string("synthetic") : std::filesystem::path(opt.trace).filename().string();
  std::fprintf(stderr, "%s: %zu requests, %zu page refs (%s)\n",
               opt.trace.empty() ? "no --trace" : opt.trace.c_str(), requests.size(), refs,
               opt.trace.empty() ? "a synthetic prefix-sharing trace generated in-process"
                                 : "Mooncake JSONL");

  progress bar(runs.size(), "runs");
  std::vector<sim::kv_replay_result> rows;
  for (auto const& o : runs) {
    rows.push_back(sim::kv_replay(requests, o));
    bar.update(rows.size(), double(refs) * double(rows.size()));
  }
  bar.finish();

  if (opt.json) {
    for (auto const& r : rows) {
      std::printf("%s\n", to_json(r, name, opt.ratio)
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                              .c_str());
    }
  } else {
    std::vector<std::string> header{"policy", "pages", "requests", "page_refs", "hits",
                                    "misses", "hit_ratio", "prefix_hit_pages",
                                    "prefill_tokens_saved", "no_space", "evictions",
                                    "check_failures"};
    if (host_pages > 0) {
      for (char const* h : {"host_pages", "lower_hits", "spills"}) { header.push_back(h); }
    }
    if (remote) {
      for (char const* h : {"remote_hits", "remote_writes", "remote_errors"}) { header.push_back(h); }
    }
    markdown_table t(header);
    for (auto const& r : rows) {
      std::vector<std::string> cells{r.policy,
                                     std::to_string(r.pages),
                                     std::to_string(r.requests),
                                     std::to_string(r.page_refs),
                                     std::to_string(r.page_hits),
                                     std::to_string(r.page_misses),
                                     fixed(r.hit_ratio(), 4),
                                     std::to_string(r.prefix_hit_pages),
                                     std::to_string(r.prefill_tokens_saved()),
                                     std::to_string(r.no_space),
                                     std::to_string(r.evictions),
                                     std::to_string(r.check_failures)};
      if (host_pages > 0) {
        cells.push_back(std::to_string(r.host_pages));
        cells.push_back(std::to_string(r.lower_hits));
        cells.push_back(std::to_string(r.spills));
      }
      if (remote) {
        cells.push_back(std::to_string(r.remote_hits));
        cells.push_back(std::to_string(r.remote_writes));
        cells.push_back(std::to_string(r.remote_counters.errors));
      }
      t.add(cells);
    }
    std::printf("%s", t.str().c_str());
  }

  std::uint64_t writes = 0;
  for (auto const& r : rows) { writes += r.remote_writes; }
  int rc = remote_verdict(remote.get(), writes);
  for (auto const& r : rows) {
    if (r.check_failures != 0) {
      std::fprintf(stderr, "ccht: error: %s at %zu pages: %llu hit pages held the wrong bytes\n",
                   r.policy.c_str(), r.pages, static_cast<unsigned long long>(r.check_failures));
      rc = 1;
    }
    if (r.invariant_failures != 0) {
      std::fprintf(stderr, "ccht: error: %s at %zu pages: %llu failed invariants; first: %s\n",
                   r.policy.c_str(), r.pages,
                   static_cast<unsigned long long>(r.invariant_failures),
                   r.invariant_message.c_str());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace ccht::cli
