// A prefix KV cache on ccht::page_cache: replays a Mooncake JSONL trace (one request a line,
// `hash_ids` = its 512-token KV pages) through the kv_replay engine of ccht_sim (tools/sim/
// kv_replay.hpp). Each request acquires its pages as one batch; a hit is a page whose prefill is
// skipped (its bytes are checked), a fill is written and published; then every page is released.
// An exact LRU with per-request pins runs beside it as the reference.
//
//   ccht_kv_prefix_cache [--trace FILE] [--pages N] [--page-bytes B] [--requests N]
//
// Without --trace it reads $CCHT_TRACES_DIR/mooncake_synthetic.jsonl when that variable is set,
// else it replays a small synthetic prefix-sharing trace made in-process (and says so).
// Exit codes: 0 ok, 1 a page held the wrong bytes, an invariant failed
// (pages left pinned after the releases, resident + free != pages, ...) or the trace is
// malformed, 2 bad arguments.
#include <sim/kv_replay.hpp>
#include <sim/traces.hpp>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr char const* usage =
    "usage: ccht_kv_prefix_cache [--trace FILE] [--pages N] [--page-bytes B] [--requests N]\n"
    "  --trace FILE     Mooncake JSONL trace (default $CCHT_TRACES_DIR/mooncake_synthetic.jsonl,\n"
    "                   else a synthetic trace generated in-process)\n"
    "  --pages N        pages of the cache (default 4000)\n"
    "  --page-bytes B   bytes per page (default 256)\n"
    "  --requests N     replay the first N requests only (default: all)\n";

bool parse_size(char const* s, std::size_t& out) {
  std::string_view const v(s);
  auto const [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc() && p == v.data() + v.size() && !v.empty();
}

}  // namespace

int main(int argc, char** argv) {
  std::string trace;
  std::size_t pages = 4000, page_bytes = 256, requests = 0;
  for (int i = 1; i < argc; ++i) {
    std::string_view const a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", usage);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ccht_kv_prefix_cache: error: %s needs a value\n%s", argv[i], usage);
      return 2;
    }
    char const* v = argv[++i];
    bool ok = true;
    if (a == "--trace") {
      trace = v;
    } else if (a == "--pages") {
      ok = parse_size(v, pages) && pages > 0;
    } else if (a == "--page-bytes") {
      ok = parse_size(v, page_bytes) && page_bytes > 0;
    } else if (a == "--requests") {
      ok = parse_size(v, requests);
    } else {
      std::fprintf(stderr, "ccht_kv_prefix_cache: error: unknown option %s\n%s", argv[i - 1],
                   usage);
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "ccht_kv_prefix_cache: error: %s expects a positive integer, got '%s'\n",
                   argv[i - 1], v);
      return 2;
    }
  }

  // The default trace: $CCHT_TRACES_DIR/mooncake_synthetic.jsonl when set (as the tests and
  // `ccht kv-replay` read it), else none: a synthetic trace.
  std::string default_trace;
  if (char const* e = std::getenv("CCHT_TRACES_DIR"); e != nullptr && *e != '\0') {
    default_trace = (std::filesystem::path(e) / "mooncake_synthetic.jsonl").string();
  }
  std::vector<ccht::sim::kv_request> reqs;
  std::string source;
  try {
    if (trace.empty() && !std::filesystem::exists(default_trace)) {
      std::size_t const n = requests ? requests : 2000;
      std::printf("NOTE: no trace (%s); replaying a synthetic prefix-sharing trace of %zu "
                  "requests generated in-process\n",
                  default_trace.empty() ? "CCHT_TRACES_DIR is not set" : "the default is missing", n);
      reqs = ccht::sim::synthetic_kv_trace(n);
      source = "synthetic";
    } else {
      if (trace.empty()) { trace = default_trace; }
      if (!std::filesystem::exists(trace)) {
        std::fprintf(stderr, "ccht_kv_prefix_cache: error: %s: no such file\n", trace.c_str());
        return 2;
      }
      reqs = ccht::sim::read_mooncake_requests(trace);
      source = trace;
    }
  } catch (std::exception const& e) {
    std::fprintf(stderr, "ccht_kv_prefix_cache: error: %s\n", e.what());
    return 1;
  }
  if (requests != 0 && requests < reqs.size()) { reqs.resize(requests); }

  ccht::sim::kv_replay_options o;
  o.pages = pages;
  o.page_bytes = page_bytes;
  ccht::sim::kv_replay_result pc, ref;
  try {
    o.policy = "page-cache";
    pc = ccht::sim::kv_replay(reqs, o);
    o.policy = "lru";
    ref = ccht::sim::kv_replay(reqs, o);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "ccht_kv_prefix_cache: error: %s\n", e.what());
    return 2;
  }

  std::printf("trace %s: %llu requests, %llu page refs (%llu repeats within a request skipped)\n",
              source.c_str(), static_cast<unsigned long long>(pc.requests),
              static_cast<unsigned long long>(pc.page_refs),
              static_cast<unsigned long long>(pc.duplicate_refs));
  std::printf("cache: %zu pages of %zu bytes (ccht::page_cache, double LRU)\n\n", pages, page_bytes);
  std::printf("%-22s %14s %14s\n", "", "page_cache", "exact LRU");
  auto row = [](char const* name, unsigned long long a, unsigned long long b) {
    std::printf("%-22s %14llu %14llu\n", name, a, b);
  };
  std::printf("%-22s %14.4f %14.4f\n", "page hit ratio", pc.hit_ratio(), ref.hit_ratio());
  row("page hits", pc.page_hits, ref.page_hits);
  row("prefix hit pages", pc.prefix_hit_pages, ref.prefix_hit_pages);
  row("prefill tokens saved", pc.prefill_tokens_saved(), ref.prefill_tokens_saved());
  row("evictions", pc.evictions, ref.evictions);
  row("no_space", pc.no_space, ref.no_space);
  row("check failures", pc.check_failures, 0);
  std::printf("\nhit-ratio gap (page_cache - exact LRU): %+.4f\n", pc.hit_ratio() - ref.hit_ratio());

  int rc = 0;
  if (pc.check_failures != 0) {
    std::fprintf(stderr, "FAIL: %llu hit pages held the wrong bytes\n",
                 static_cast<unsigned long long>(pc.check_failures));
    rc = 1;
  }
  for (auto const* r : {&pc, &ref}) {
    if (r->invariant_failures != 0) {
      std::fprintf(stderr, "FAIL: %s: %llu failed invariants; first: %s\n", r->policy.c_str(),
                   static_cast<unsigned long long>(r->invariant_failures),
                   r->invariant_message.c_str());
      rc = 1;
    }
  }
  if (rc == 0) { std::printf("all page checks and invariants held\n"); }
  return rc;
}
