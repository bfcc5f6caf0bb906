// End-to-end tests of the `ccht` CLI: the built binary is run with stdout and stderr captured
// separately; --json output is parsed line by line; exit codes 0 (ok), 1 (failure such as a
// malformed trace) and 2 (bad arguments).
#include "sim_test_support.hpp"

#include <sim/exact_policies.hpp>
#include <sim/model_runtime.hpp>
#include <sim/replay.hpp>
#include <sim/workloads.hpp>

#include <ccht/config.hpp>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ccht/cache/safetensors.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <string>
#include <vector>

#ifndef CCHT_CLI_PATH
#error "CCHT_CLI_PATH (the built ccht binary) must be defined by the build"
#endif

namespace {

using namespace ccht_sim_test;
using nlohmann::json;

struct cli_result {
  int rc = -1;
  std::string out, err;
  std::string cmd;
};

std::string quoted(std::string const& s) {
  std::string q = "'";
  for (char c : s) { q += c == '\'' ? std::string("'\\''") : std::string(1, c); }
  return q + "'";
}

/// Runs `ccht args...` with stdout and stderr redirected to files in @p dir; @p env (for example
/// "env -u NAME") is put before the command.
cli_result run_cli(temp_dir const& dir, std::vector<std::string> const& args,
                   std::string const& env = {}) {
  cli_result r;
  fs::path const out = dir.path() / "cli.stdout", err = dir.path() / "cli.stderr";
  r.cmd = env.empty() ? quoted(CCHT_CLI_PATH) : env + " " + quoted(CCHT_CLI_PATH);
  for (auto const& a : args) {
    r.cmd += ' ';
    r.cmd += quoted(a);
  }
  std::string const full = r.cmd + " </dev/null >" + quoted(out.string()) + " 2>" +
                           quoted(err.string());
  int const status = std::system(full.c_str());
  if (status != -1 && WIFEXITED(status)) {
    r.rc = WEXITSTATUS(status);
  } else if (status != -1 && WIFSIGNALED(status)) {
    r.rc = 128 + WTERMSIG(status);
  }
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string describe(cli_result const& r) {
  return "command: " + r.cmd + "\nexit " + std::to_string(r.rc) + "\nstdout:\n" +
         r.out.substr(0, 2000) + "\nstderr:\n" + r.err.substr(0, 2000);
}

/// Every stdout line must be one JSON object; returns them.
std::vector<json> json_lines(std::string const& text) {
  std::vector<json> rows;
  if (text.empty()) { return rows; }
  EXPECT_EQ(text.back(), '\n') << "stdout does not end with a newline";
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    json j;
    try {
      j = json::parse(line);
    } catch (json::parse_error const& e) {
      ADD_FAILURE() << "stdout line " << n << " is not JSON: '" << line << "': " << e.what();
      continue;
    }
    EXPECT_TRUE(j.is_object()) << "stdout line " << n << ": " << line;
    rows.push_back(std::move(j));
  }
  return rows;
}

/// Checks the fields and the arithmetic of one replay row.
void check_row(json const& j) {
  for (char const* k : {"trace", "policy", "capacity", "requests", "hits", "misses",
                        "miss_ratio", "evictions", "seconds", "updates", "slots", "backend",
                        "batch", "throughput"}) {
    ASSERT_TRUE(j.contains(k)) << "missing '" << k << "' in " << j.dump();
  }
  EXPECT_TRUE(j["trace"].is_string());
  EXPECT_TRUE(j["policy"].is_string());
  for (char const* k : {"capacity", "requests", "hits", "misses", "evictions", "updates"}) {
    EXPECT_TRUE(j[k].is_number_unsigned()) << k << " in " << j.dump();
  }
  std::uint64_t const req = j["requests"], hits = j["hits"], misses = j["misses"];
  EXPECT_EQ(hits + misses, req) << j.dump();
  EXPECT_LE(hits, req);
  double const ratio = j["miss_ratio"];
  EXPECT_NEAR(ratio, req ? double(misses) / double(req) : 0.0, 1e-12) << j.dump();
  EXPECT_GE(j["seconds"].get<double>(), 0.0);
}

/// stderr carries human text only: no line of it is a JSON object.
void expect_no_json_on_stderr(cli_result const& r) {
  std::istringstream in(r.err);
  std::string line;
  while (std::getline(in, line)) {
    EXPECT_FALSE(!line.empty() && line.front() == '{' && json::accept(line))
        << "JSON on stderr: " << line;
  }
}

/// A small LIRS trace: a skewed stream over 400 keys, 3000 requests.
std::vector<std::uint64_t> small_keys() {
  ccht::sim::workload_options o;
  o.keys = 400;
  o.requests = 3000;
  o.seed = 17;
  std::vector<std::uint64_t> keys;
  for (auto const& r : ccht::sim::generate(o)) { keys.push_back(r.key % 100000); }
  return keys;
}

std::string as_lirs(std::vector<std::uint64_t> const& keys) {
  std::string s;
  for (auto k : keys) { s += std::to_string(k) + "\n"; }
  return s;
}

template <class Cache>
std::uint64_t exact_misses(std::vector<std::uint64_t> const& keys, std::size_t cap) {
  Cache c(cap);
  for (auto k : keys) { c.access(k); }
  return c.stats().misses();
}

// ---- replay --------------------------------------------------------------------------------------

TEST(Cli, ReplayJsonRowsArePoliciesTimesCapacities) {
  temp_dir dir;
  auto const keys = small_keys();
  std::string const trace = dir.write("small.trace", as_lirs(keys));
  auto const r = run_cli(dir, {"replay", "--trace", trace, "--policy", "lru,fifo,lfu,ccht-lru",
                               "--capacity", "64,128,256", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 4u * 3u) << describe(r);
  std::set<std::pair<std::string, std::size_t>> seen;
  for (auto const& j : rows) {
    check_row(j);
    EXPECT_EQ(j["trace"], "small.trace");
    EXPECT_EQ(j["requests"].get<std::uint64_t>(), keys.size());
    EXPECT_EQ(j["updates"].get<std::uint64_t>(), 0u);
    std::string const p = j["policy"];
    std::size_t const cap = j["capacity"];
    EXPECT_TRUE(seen.emplace(p, cap).second) << "duplicate row " << p << " " << cap;
    std::uint64_t const misses = j["misses"];
    if (p == "lru") { EXPECT_EQ(misses, exact_misses<ccht::sim::exact_lru>(keys, cap)); }
    if (p == "fifo") { EXPECT_EQ(misses, exact_misses<ccht::sim::exact_fifo>(keys, cap)); }
    if (p == "lfu") { EXPECT_EQ(misses, exact_misses<ccht::sim::exact_lfu>(keys, cap)); }
    if (p == "ccht-lru") {
      EXPECT_EQ(j["slots"].get<std::size_t>(), cap);  // 64, 128, 256 are whole buckets
      EXPECT_EQ(j["backend"], "cpu");
    } else {
      EXPECT_EQ(j["backend"], "host");
    }
  }
  for (std::string p : {"lru", "fifo", "lfu", "ccht-lru"}) {
    for (std::size_t cap : {64u, 128u, 256u}) { EXPECT_TRUE(seen.count({p, cap})) << p << cap; }
  }
  EXPECT_NE(r.err.find("3000 requests"), std::string::npos) << r.err;
  expect_no_json_on_stderr(r);
}

TEST(Cli, ReplayDefaultsAndMarkdown) {
  temp_dir dir;
  std::string const trace = dir.write("small.trace", as_lirs(small_keys()));
  // Default policies (lru, ccht-lru) and default capacities (1/5/10/20% of distinct keys, >= 32).
  auto const r = run_cli(dir, {"replay", "--trace", trace, "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const rows = json_lines(r.out);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.size() % 2, 0u);
  std::set<std::string> policies;
  for (auto const& j : rows) {
    check_row(j);
    policies.insert(j["policy"].get<std::string>());
    EXPECT_GE(j["capacity"].get<std::size_t>(), 32u);
  }
  EXPECT_EQ(policies, (std::set<std::string>{"lru", "ccht-lru"}));

  // Without --json: a Markdown table on stdout, the same number of rows.
  auto const md = run_cli(dir, {"replay", "--trace", trace});
  ASSERT_EQ(md.rc, 0) << describe(md);
  EXPECT_EQ(md.out.rfind("| trace", 0), 0u) << md.out;
  std::size_t lines = 0;
  for (char c : md.out) { lines += c == '\n'; }
  EXPECT_EQ(lines, rows.size() + 2) << md.out;
  EXPECT_FALSE(md.err.empty());
}

TEST(Cli, ReplayCsvOptionsAndBatch) {
  temp_dir dir;
  std::string const trace =
      dir.write("t.csv", "time,obj,size\n1,10,5\n2,11,5\n3,10,5\n4,12,5\n5,10,5\n");
  auto const r = run_cli(dir, {"replay", "--trace", trace, "--csv-key-column", "2", "--csv-header",
                               "--policy", "lru", "--capacity", "2", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 1u);
  check_row(rows[0]);
  EXPECT_EQ(rows[0]["requests"], 5);
  EXPECT_EQ(rows[0]["hits"], 2);  // 10 11 10(hit) 12 10(hit)

  // Table policies at a batch size, and an explicit format.
  std::string const lirs = dir.write("t.dat", as_lirs(small_keys()));
  auto const b = run_cli(dir, {"replay", "--trace", lirs, "--format", "lirs", "--policy",
                               "ccht-lru,ccht-fifo,ccht-lfu", "--capacity", "100", "--batch",
                               "64", "--json"});
  ASSERT_EQ(b.rc, 0) << describe(b);
  auto const brows = json_lines(b.out);
  ASSERT_EQ(brows.size(), 3u);
  for (auto const& j : brows) {
    check_row(j);
    EXPECT_EQ(j["batch"], 64);
    EXPECT_EQ(j["slots"], 96);
  }
}

TEST(Cli, ReplaySharedTraceGolden) {
  CCHT_SKIP_WITHOUT_TRACES();
  temp_dir dir;
  std::string const ps = trace_path("ps.trace");
  if (HasFailure()) { return; }
  auto const r = run_cli(dir, {"replay", "--trace", ps, "--policy", "lru,fifo,lfu", "--capacity",
                               "100,500,2000", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  std::map<std::pair<std::string, std::size_t>, std::uint64_t> const want{
      {{"lru", 100}, 9678},  {{"fifo", 100}, 9678},  {{"lfu", 100}, 9472},
      {{"lru", 500}, 5376},  {{"fifo", 500}, 6642},  {{"lfu", 500}, 4953},
      {{"lru", 2000}, 3084}, {{"fifo", 2000}, 4230}, {{"lfu", 2000}, 4953}};
  auto const rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), want.size());
  for (auto const& j : rows) {
    check_row(j);
    auto const key = std::make_pair(j["policy"].get<std::string>(), j["capacity"].get<std::size_t>());
    ASSERT_TRUE(want.count(key)) << j.dump();
    EXPECT_EQ(j["misses"].get<std::uint64_t>(), want.at(key)) << j.dump();
    EXPECT_EQ(j["requests"], 10448);
  }
}

TEST(Cli, ReplayJsonWithANonUtf8FileName) {
  // File names need not be UTF-8; the JSON row must still be written (bytes replaced).
  temp_dir dir;
  std::string const trace = dir.write("bad\xff\xfename.trace", "1\n2\n1\n");
  auto const r = run_cli(dir, {"replay", "--trace", trace, "--policy", "ccht-lru", "--capacity", "64",
                               "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 1u);
  check_row(rows[0]);
  EXPECT_EQ(rows[0]["hits"], 1);
  EXPECT_EQ(rows[0]["trace"].get<std::string>().rfind("bad", 0), 0u);
}

// ---- exit codes ----------------------------------------------------------------------------------

/// A command line that must exit 2, and what its stderr must say.
struct bad_case {
  std::vector<std::string> args;
  char const* says;
};

/// Runs each case and expects a refusal: exit 2, nothing on stdout, stderr naming c.says.
void expect_refused(temp_dir const& dir, std::vector<bad_case> const& cases) {
  for (auto const& c : cases) {
    auto const r = run_cli(dir, c.args);
    EXPECT_EQ(r.rc, 2) << describe(r);
    EXPECT_TRUE(r.out.empty()) << describe(r);
    EXPECT_NE(r.err.find(c.says), std::string::npos) << "stderr should mention '" << c.says
                                                     << "'\n" << describe(r);
  }
}

TEST(Cli, BadArgumentsExitWithTwo) {
  temp_dir dir;
  std::string const trace = dir.write("ok.trace", "1\n2\n1\n");
  std::vector<bad_case> const cases{
      {{"replay", "--trace", trace, "--policy", "lru,mru"}, "mru"},
      {{"replay", "--trace", (dir.path() / "missing.trace").string()}, "missing.trace"},
      {{"replay"}, "--trace"},
      {{"replay", "--trace", trace, "--bogus"}, "bogus"},
      {{"replay", "--trace", trace, "--batch", "0"}, "batch"},
      {{"replay", "--trace", trace, "--capacity", "abc"}, "capacity"},
      {{"replay", "--trace", trace, "--capacity", "10", "--policy", "ccht-lru"}, "capacity"},
      {{"replay", "--trace", trace, "--capacity", "0", "--policy", "lru"}, "capacity"},
      {{"replay", "--trace", trace, "--format", "bogus"}, "bogus"},
      {{"replay", "--trace", trace, "--backend", "tpu"}, "backend"},
      {{"replay", "--trace", trace, "--slots-ratio", "2", "--policy", "ccht-lru", "--capacity",
        "64"},
       "slots-ratio"},
      {{"workload", "--zipf", "1.5", "--requests", "10"}, "zipf"},
      {{"workload", "--zipf", "-0.5", "--requests", "10"}, "zipf"},
      {{"workload", "--zipf", "abc"}, "zipf"},
      {{"workload", "--keys", "0", "--requests", "10"}, "keys"},
      {{"workload", "--read-ratio", "1.5", "--requests", "10"}, "read-ratio"},
      {{"workload", "--dist", "pareto", "--requests", "10"}, "pareto"},
      {{"workload", "--policy", "nope", "--requests", "10"}, "nope"},
      {{"workload", "--unknown-option"}, "unknown-option"},
      {{"bench", "--op", "scan"}, "--op"},
      {{"bench", "--slots", "8"}, "slots"},
      {{"bench", "--backend", "cuda"}, "cuda"},
      {{"bench", "--policy", "lru"}, "lru"},  // an exact policy, not a table
      {{"bench", "--policy", "ccht-double-lru", "--ratio", "0"}, "ratio"},
      {{"bench", "--policy", "cht-lru", "--global-search", "exact"}, "global-search"},
      {{"compare", "--keys", "0", "--no-plot"}, "keys"},
      {{"compare", "--policy", "lru,xyz", "--no-plot"}, "xyz"},
      {{"frobnicate"}, "unknown subcommand 'frobnicate'"},
      {{}, ""},
  };
  expect_refused(dir, cases);
}

// A mistyped policy (issue 33) is refused, exit 2, with one message that lists every policy the
// command takes: replay, workload and compare take the exact references and the table policies,
// bench --policy the table policies only; both lists come from include/ccht/policy_list.hpp.
TEST(Cli, UnknownPolicyListsTheValidOnes) {
  temp_dir dir;
  std::string const trace = dir.write("ok.trace", "1\n2\n1\n");
  std::string const all =
      "policy must be one of lru, fifo, lfu, ccht-lru, ccht-fifo, ccht-lfu, ccht-double-lru, "
      "ccht-coarse-lru, cht-lru, cht-random; got 'ccht-double_lru'";
  std::string const tables =
      "policy must be one of ccht-lru, ccht-fifo, ccht-lfu, ccht-double-lru, ccht-coarse-lru, "
      "cht-lru, cht-random; got 'ccht-double_lru'";
  EXPECT_EQ(ccht::sim::unknown_policy_message("ccht-double_lru"), all);
  std::vector<bad_case> const cases{
      {{"replay", "--trace", trace, "--policy", "lru,ccht-double_lru"}, all.c_str()},
      {{"workload", "--policy", "ccht-double_lru", "--requests", "10"}, all.c_str()},
      {{"compare", "--policy", "ccht-double_lru", "--no-plot"}, all.c_str()},
      {{"bench", "--policy", "ccht-lru,ccht-double_lru"}, tables.c_str()},
  };
  expect_refused(dir, cases);
}

// Issue 31, case 16: each of these used to run (exit 0, no rows), or print a 300-digit range.
// Every bad argument is one short line on stderr naming the option and the value, exit 2.
TEST(Cli, MisusedArgumentsAreOneLineErrors) {
  temp_dir dir;
  std::string const trace = dir.write("ok.trace", "1\n2\n1\n");
  std::vector<bad_case> const cases{
      {{"replay", "--trace", trace, "--batch", "0"}, "--batch: expected a positive integer, got '0'"},
      {{"workload", "--requests", "10", "--batch", "0"}, "--batch: expected a positive integer, got '0'"},
      {{"compare", "--batch", "0", "--keys", "100", "--requests", "200", "--no-plot"},
       "--batch: expected a positive integer, got '0'"},
      {{"paper", "--batch", "0", "--keys", "100", "--requests", "200", "--capacity", "16", "--no-sweep",
        "--no-plot"},
       "--batch: expected a positive integer, got '0'"},
      {{"replay", "--trace", trace, "--batch", "-3"}, "--batch: expected a positive integer, got '-3'"},
      {{"replay", "--trace", trace, "--csv-key-column", "0"},
       "--csv-key-column: expected a positive integer, got '0'"},
      {{"replay", "--trace", trace, "--policy", ""}, "--policy: expected one or more policy names"},
      {{"replay", "--trace", trace, "--policy", ","}, "--policy: expected one or more policy names"},
      {{"workload", "--requests", "10", "--policy", ""}, "--policy: expected one or more policy names"},
      {{"compare", "--policy", "", "--keys", "100", "--requests", "200", "--no-plot"},
       "--policy: expected one or more policy names"},
      {{"kv-replay", "--trace", trace, "--pages", "8", "--policy", ""},
       "--policy: expected one or more policy names"},
  };
  for (auto const& c : cases) {
    auto const r = run_cli(dir, c.args);
    EXPECT_EQ(r.rc, 2) << describe(r);
    EXPECT_TRUE(r.out.empty()) << describe(r);
    EXPECT_NE(r.err.find(c.says), std::string::npos) << "stderr should say '" << c.says << "'\n"
                                                     << describe(r);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << describe(r);
    EXPECT_LT(r.err.size(), 200u) << describe(r);
  }
}

// Integers are decimal: CLI11 alone read --batch 010 as octal 8.
TEST(Cli, IntegersAreDecimal) {
  temp_dir dir;
  std::string const trace = dir.write("ok.trace", "1\n2\n1\n");
  auto const r = run_cli(dir, {"replay", "--trace", trace, "--policy", "ccht-lru", "--capacity", "64",
                               "--batch", "010", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 1u) << describe(r);
  EXPECT_EQ(rows[0]["batch"].get<int>(), 10) << describe(r);
  auto const hex = run_cli(dir, {"replay", "--trace", trace, "--batch", "0x10"});
  EXPECT_EQ(hex.rc, 2) << describe(hex);
  EXPECT_NE(hex.err.find("--batch: expected a positive integer, got '0x10'"), std::string::npos)
      << describe(hex);
}

// Sizes take T and TiB (a budget of a terabyte is a size, whether or not the machine has it);
// anything else names the suffixes accepted.
TEST(Cli, SizesTakeTerabytes) {
  EXPECT_EQ(ccht::sim::parse_bytes("1TiB", "--budget"), std::size_t{1} << 40);
  EXPECT_EQ(ccht::sim::parse_bytes("2T", "--budget"), std::size_t{2'000'000'000'000});
  EXPECT_EQ(ccht::sim::parse_bytes("3GiB", "--budget"), std::size_t{3} << 30);
  EXPECT_EQ(ccht::sim::parse_bytes("7B", "--budget"), 7u);
  for (char const* bad : {"1TB", "1tib", "1 TiB", "0TiB", "TiB", "16777216TiB", "1PiB", "-1T"}) {
    try {
      ccht::sim::parse_bytes(bad, "--budget");
      ADD_FAILURE() << bad << " was accepted";
    } catch (std::invalid_argument const& e) {
      std::string const what = e.what();
      EXPECT_NE(what.find("--budget: expected a positive size"), std::string::npos) << what;
      EXPECT_NE(what.find("KiB, MiB, GiB, TiB"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("got '") + bad + "'"), std::string::npos) << what;
    }
  }
  temp_dir dir;
  std::string const ok = (dir.path() / "ok.safetensors").string();
  std::vector<std::byte> b(16);
  std::vector<ccht::st_tensor_data> ts = {{"x", ccht::st_dtype::U8, {16}, b}};
  ccht::write_safetensors(ok, ts);
  auto const r = run_cli(dir, {"weights", "--file", ok, "--budget", "1TB"});
  EXPECT_EQ(r.rc, 2) << describe(r);
  EXPECT_NE(r.err.find("T = powers of 1000"), std::string::npos) << describe(r);
}

// A Mooncake id nested 200k lists deep made the error message's json::dump() overflow the stack
// (found while writing fuzz/traces.cpp): now it is a malformed trace like any other, exit 1.
TEST(Cli, DeeplyNestedMooncakeIdIsAnErrorNotACrash) {
  temp_dir dir;
  std::size_t const depth = 200'000;
  std::string const trace = dir.write("deep.jsonl", R"({"hash_ids":[1,)" + std::string(depth, '[') +
                                                        std::string(depth, ']') + "]}\n");
  for (auto const& args : {std::vector<std::string>{"replay", "--trace", trace, "--format", "mooncake"},
                           std::vector<std::string>{"kv-replay", "--trace", trace, "--pages", "8"}}) {
    auto const r = run_cli(dir, args);
    EXPECT_EQ(r.rc, 1) << describe(r).substr(0, 2000);
    EXPECT_NE(r.err.find("line 1: expected non-negative integers in \"hash_ids\", got a list"),
              std::string::npos)
        << describe(r).substr(0, 2000);
  }
}

TEST(Cli, CudaBackendInCpuOnlyBuild) {
#if CCHT_WITH_CUDA
  GTEST_SKIP() << "this build has the CUDA backend";
#else
  temp_dir dir;
  std::string const trace = dir.write("ok.trace", "1\n2\n1\n");
  auto const r = run_cli(dir, {"replay", "--trace", trace, "--backend", "cuda", "--policy",
                               "ccht-lru", "--capacity", "64", "--json"});
  EXPECT_EQ(r.rc, 2) << describe(r);
  EXPECT_NE(r.err.find("cuda"), std::string::npos) << describe(r);
  EXPECT_TRUE(r.out.empty());
#endif
}

TEST(Cli, MalformedTraceExitsWithOne) {
  temp_dir dir;
  std::string const bad = dir.write("bad.trace", "1\n2\nthree\n4\n");
  auto const r = run_cli(dir, {"replay", "--trace", bad, "--json"});
  EXPECT_EQ(r.rc, 1) << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);  // nothing replayed from a partial trace
  EXPECT_NE(r.err.find(bad + ": line 3"), std::string::npos) << describe(r);

  std::string const cut = dir.write("cut.bin", std::string(30, '\x01'));
  auto const b = run_cli(dir, {"replay", "--trace", cut, "--json"});
  EXPECT_EQ(b.rc, 1) << describe(b);
  EXPECT_NE(b.err.find("record 2"), std::string::npos) << describe(b);

  std::string const js = dir.write("cut.jsonl", "{\"hash_ids\": [1, 2]}\n{\"hash_ids\": [3");
  auto const m = run_cli(dir, {"replay", "--trace", js, "--json"});
  EXPECT_EQ(m.rc, 1) << describe(m);
  EXPECT_NE(m.err.find("line 2"), std::string::npos) << describe(m);

  auto const c = run_cli(dir, {"compare", "--trace", bad, "--no-plot", "--out",
                               (dir.path() / "cmp").string()});
  EXPECT_EQ(c.rc, 1) << describe(c);
}

TEST(Cli, HelpExitsWithZero) {
  temp_dir dir;
  auto const r = run_cli(dir, {"--help"});
  EXPECT_EQ(r.rc, 0) << describe(r);
  EXPECT_NE(r.out.find("replay"), std::string::npos) << describe(r);
  auto const s = run_cli(dir, {"replay", "--help"});
  EXPECT_EQ(s.rc, 0) << describe(s);
  EXPECT_NE(s.out.find("--trace"), std::string::npos) << describe(s);
}

// ---- workload ------------------------------------------------------------------------------------

TEST(Cli, WorkloadJson) {
  temp_dir dir;
  std::vector<std::string> const args{"workload", "--dist", "zipfian", "--keys", "1000",
                                      "--requests", "20000", "--read-ratio", "0.9", "--policy",
                                      "lru,ccht-lru", "--capacity", "100,200", "--json"};
  auto const r = run_cli(dir, args);
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 4u);
  for (auto const& j : rows) {
    check_row(j);
    std::uint64_t const req = j["requests"], upd = j["updates"];
    EXPECT_EQ(req + upd, 20000u);
    EXPECT_NEAR(double(upd), 2000.0, 200.0);
    EXPECT_NE(j["trace"].get<std::string>().find("zipfian"), std::string::npos);
  }
  expect_no_json_on_stderr(r);
  // Same seed, same rows (times aside).
  auto const again = json_lines(run_cli(dir, args).out);
  ASSERT_EQ(again.size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(again[i]["hits"], rows[i]["hits"]);
    EXPECT_EQ(again[i]["evictions"], rows[i]["evictions"]);
  }
  for (std::string d : {"uniform", "latest", "scan", "scan-mix"}) {
    auto const w = run_cli(dir, {"workload", "--dist", d, "--keys", "500", "--requests", "5000",
                                 "--policy", "lru", "--capacity", "64", "--json"});
    ASSERT_EQ(w.rc, 0) << describe(w);
    auto const wr = json_lines(w.out);
    ASSERT_EQ(wr.size(), 1u) << d;
    check_row(wr[0]);
    if (d == "scan") { EXPECT_EQ(wr[0]["hits"], 0) << "a 500-key loop through 64 slots"; }
  }
}

// ---- bench ---------------------------------------------------------------------------------------

TEST(Cli, BenchJson) {
  temp_dir dir;
  for (std::string op : {"find", "insert", "mixed"}) {
    auto const r = run_cli(dir, {"bench", "--json", "--op", op, "--slots", "4096", "--batch",
                                 "10000", "--repeat", "1"});
    ASSERT_EQ(r.rc, 0) << describe(r);
    auto const rows = json_lines(r.out);
    ASSERT_FALSE(rows.empty()) << describe(r);
    bool saw_ccht = false;
    for (auto const& j : rows) {
      ASSERT_TRUE(j.contains("ops_per_s")) << j.dump();
      ASSERT_TRUE(j.contains("impl")) << j.dump();
      EXPECT_GT(j["ops_per_s"].get<double>(), 0.0) << j.dump();
      EXPECT_EQ(j["op"], op);
      EXPECT_EQ(j["batch"], 10000);
      EXPECT_EQ(j["slots"], 4096);
      if (j["impl"] == "ccht") {
        saw_ccht = true;
        ASSERT_TRUE(j.contains("buckets_per_op")) << j.dump();
        double const b = j["buckets_per_op"];
        EXPECT_GE(b, 1.0);
        EXPECT_LE(b, 2.0);
        if (op == "insert") { EXPECT_EQ(b, 2.0); }
      }
    }
    EXPECT_TRUE(saw_ccht) << describe(r);
  }
}

TEST(Cli, BenchPoliciesOnTheSameKeys) {
  // Every key absent from a capacity-limited table evicts one entry when inserted: the fresh
  // keys (a quarter of the ops) and the resident keys evicted since the fill, which differ a
  // little between policies. The plain table has no capacity below its slots (filled to half),
  // so its first 2048 new keys take free slots.
  temp_dir dir;
  auto const r = run_cli(dir, {"bench", "--json", "--op", "mixed", "--miss-ratio", "0.5",
                               "--slots", "4096", "--batch", "20000", "--repeat", "3",
                               "--threads", "1", "--ratio", "0.5", "--policy",
                               "cht-lru,ccht-double-lru,ccht-lru"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 3u) << describe(r);
  std::vector<std::string> const names{"cht-lru", "ccht-double-lru", "ccht-lru"};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto const& j = rows[i];
    EXPECT_EQ(j["policy"], names[i]) << j.dump();
    EXPECT_EQ(j["slots"], 4096) << j.dump();
    EXPECT_EQ(j["capacity"], 2048) << j.dump();
    EXPECT_GT(j["ops_per_s"].get<double>(), 0.0) << j.dump();
    EXPECT_GT(j["buckets_per_op"].get<double>(), 1.0) << j.dump();
    EXPECT_NEAR(j["vs_first"].get<double>(),
                j["ops_per_s"].get<double>() / rows[0]["ops_per_s"].get<double>(), 1e-9);
  }
  EXPECT_EQ(rows[0]["vs_first"].get<double>(), 1.0);
  std::size_t const cht = rows[0]["evictions"], dbl = rows[1]["evictions"], plain = rows[2]["evictions"];
  EXPECT_GT(cht, 15000u) << "a quarter of 60000 ops insert fresh keys";
  EXPECT_LT(cht, 30000u) << "at most half of the ops insert";
  EXPECT_NEAR(double(cht), double(dbl), 0.01 * double(cht));
  EXPECT_LT(plain, dbl) << "the plain table first fills its free half";
}

TEST(Cli, BenchPageCache) {
  // --mode page-cache: one row per batch (1, 64, 4096), the page cache beside the plain table.
  temp_dir dir;
  auto const r = run_cli(dir, {"bench", "--mode", "page-cache", "--pages", "4096", "--repeat",
                               "1", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 3u) << describe(r);
  std::vector<std::size_t> const batches{1, 64, 4096};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto const& j = rows[i];
    for (char const* k : {"batch", "pages", "page_bytes", "threads", "acquire_release_pages_per_s",
                          "table_find_ops_per_s", "ratio", "lookup_p50_us", "lookup_p99_us"}) {
      ASSERT_TRUE(j.contains(k)) << "missing '" << k << "' in " << j.dump();
    }
    EXPECT_EQ(j["mode"], "page-cache");
    EXPECT_EQ(j["batch"].get<std::size_t>(), batches[i]) << j.dump();
    EXPECT_EQ(j["pages"], 4096) << j.dump();
    EXPECT_EQ(j["page_bytes"], 64) << j.dump();  // the default
    double const acq = j["acquire_release_pages_per_s"], find = j["table_find_ops_per_s"];
    EXPECT_GT(acq, 0.0) << j.dump();
    EXPECT_GT(find, 0.0) << j.dump();
    EXPECT_NEAR(j["ratio"].get<double>(), acq / find, 1e-9 * (acq / find)) << j.dump();
    double const p50 = j["lookup_p50_us"], p99 = j["lookup_p99_us"];
    EXPECT_GT(p50, 0.0) << j.dump();
    EXPECT_GE(p99, p50) << j.dump();
  }
  expect_no_json_on_stderr(r);

  // Markdown: a header, a separator and the three batches.
  auto const md = run_cli(dir, {"bench", "--mode", "page-cache", "--pages", "4096", "--repeat",
                                "1", "--threads", "1"});
  ASSERT_EQ(md.rc, 0) << describe(md);
  EXPECT_EQ(md.out.rfind("| batch", 0), 0u) << md.out;
  EXPECT_NE(md.out.find("acquire+release Mpages/s"), std::string::npos) << md.out;
  std::istringstream in(md.out);
  std::string line;
  std::vector<std::string> first_cells;
  while (std::getline(in, line)) {
    std::size_t const b = line.find_first_not_of("| ");
    first_cells.push_back(line.substr(b, line.find(' ', b) - b));
  }
  ASSERT_EQ(first_cells.size(), 5u) << md.out;
  EXPECT_EQ(first_cells[2], "1");
  EXPECT_EQ(first_cells[3], "64");
  EXPECT_EQ(first_cells[4], "4096");

  auto const bad = run_cli(dir, {"bench", "--mode", "pages"});
  EXPECT_EQ(bad.rc, 2) << describe(bad);
  EXPECT_NE(bad.err.find("--mode"), std::string::npos) << describe(bad);
}

// ---- kv-replay -----------------------------------------------------------------------------------

/// Four requests over 3 pages. By hand, exact LRU with the request's keys pinned:
///   [1 2 3]    3 fills                                   hits 0, prefix 0
///   [1 2 4]    1, 2 hit; 4 evicts 3                      hits 2, prefix 2, 1 eviction
///   [1 5 1 2]  de-duplicated to [1 5 2] (1 repeat); 1 hit; 5 evicts 2 (4 is newer); 2 evicts 4
///                                                        hits 1, prefix 1, 2 evictions
///   [6 7 8 9]  6, 7, 8 evict 1, 5, 2; 9: all 3 pinned    no_space 1, 3 evictions
std::string const small_kv_trace =
    R"({"timestamp": 0, "input_length": 1536, "output_length": 8, "hash_ids": [1, 2, 3]})" "\n"
    R"({"timestamp": 1, "input_length": 1536, "output_length": 8, "hash_ids": [1, 2, 4]})" "\n"
    R"({"timestamp": 2, "input_length": 2048, "output_length": 8, "hash_ids": [1, 5, 1, 2]})" "\n"
    R"({"timestamp": 3, "input_length": 2048, "output_length": 8, "hash_ids": [6, 7, 8, 9]})" "\n";

/// Checks the fields every kv-replay row has, and their arithmetic.
void check_kv_row(json const& j) {
  for (char const* k : {"policy", "pages", "page_bytes", "requests", "page_refs", "page_hits",
                        "page_misses", "hit_ratio", "prefix_hit_pages", "prefill_tokens_saved",
                        "no_space", "evictions", "check_failures", "pending", "duplicate_refs"}) {
    ASSERT_TRUE(j.contains(k)) << "missing '" << k << "' in " << j.dump();
  }
  std::uint64_t const refs = j["page_refs"], hits = j["page_hits"], misses = j["page_misses"],
                      no_space = j["no_space"], pending = j["pending"];
  EXPECT_EQ(hits + misses + no_space + pending, refs) << j.dump();
  EXPECT_NEAR(j["hit_ratio"].get<double>(), refs ? double(hits) / double(refs) : 0.0, 1e-12);
  EXPECT_EQ(j["prefill_tokens_saved"].get<std::uint64_t>(),
            j["prefix_hit_pages"].get<std::uint64_t>() * 512) << j.dump();
  EXPECT_LE(j["prefix_hit_pages"].get<std::uint64_t>(), hits) << j.dump();
  EXPECT_EQ(j["check_failures"], 0) << j.dump();
  EXPECT_EQ(j["pending"], 0) << "a serial replay never finds a page being filled: " << j.dump();
  EXPECT_EQ(j["invariant_failures"], 0) << j.dump();
}

TEST(Cli, KvReplaySmallTraceExactCounts) {
  temp_dir dir;
  std::string const trace = dir.write("small.jsonl", small_kv_trace);
  auto const r = run_cli(dir, {"kv-replay", "--trace", trace, "--pages", "3", "--page-bytes",
                               "40", "--policy", "page-cache,lru,page-cache-coarse", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 3u) << describe(r);
  std::vector<std::string> const names{"page-cache", "lru", "page-cache-coarse"};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto const& j = rows[i];
    check_kv_row(j);
    EXPECT_EQ(j["policy"], names[i]);
    EXPECT_EQ(j["trace"], "small.jsonl");
    EXPECT_EQ(j["pages"], 3);
    EXPECT_EQ(j["page_bytes"], 40);
    EXPECT_EQ(j["requests"], 4);
    EXPECT_EQ(j["page_refs"], 13) << "14 ids, one repeated within its request";
    EXPECT_EQ(j["duplicate_refs"], 1);
    EXPECT_EQ(j["page_hits"], 3) << j.dump();
    EXPECT_EQ(j["page_misses"], 9) << j.dump();
    EXPECT_EQ(j["prefix_hit_pages"], 3) << j.dump();
    EXPECT_EQ(j["prefill_tokens_saved"], 3 * 512) << j.dump();
    EXPECT_EQ(j["no_space"], 1) << j.dump();
    EXPECT_EQ(j["evictions"], 6) << j.dump();
    EXPECT_EQ(j["pages_resident"], 3) << j.dump();
    EXPECT_FALSE(j.contains("host_pages")) << j.dump();
  }
  EXPECT_NE(r.err.find("4 requests"), std::string::npos) << describe(r);
  expect_no_json_on_stderr(r);

  // Without --json: a Markdown table, one row per policy (the default policies page-cache, lru).
  auto const md = run_cli(dir, {"kv-replay", "--trace", trace, "--pages", "3"});
  ASSERT_EQ(md.rc, 0) << describe(md);
  EXPECT_EQ(md.out.rfind("| policy", 0), 0u) << md.out;
  EXPECT_NE(md.out.find("| page-cache "), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| lru "), std::string::npos) << md.out;
  std::size_t lines = 0;
  for (char c : md.out) { lines += c == '\n'; }
  EXPECT_EQ(lines, 4u) << md.out;

  // Several page counts in one run: one row per (pages, policy).
  auto const multi = run_cli(dir, {"kv-replay", "--trace", trace, "--pages", "3,100",
                                   "--policy", "lru", "--json"});
  ASSERT_EQ(multi.rc, 0) << describe(multi);
  auto const mrows = json_lines(multi.out);
  ASSERT_EQ(mrows.size(), 2u);
  EXPECT_EQ(mrows[1]["pages"], 100);
  EXPECT_EQ(mrows[1]["page_hits"], 4) << "room for all: 1, 2 (twice) and 1 again hit";
  EXPECT_EQ(mrows[1]["evictions"], 0);
}

TEST(Cli, KvReplayHostTierExactCounts) {
  // The same trace over a host tier of 2 pages. By hand (exact LRU tiers; the page cache agrees):
  //   request 2: 3 is spilled down;  request 3: 2 and 4 are spilled (4 evicts 3 down there), then
  //   2's upper fill is found in the host tier (a lower hit);  request 4: 1, 5, 2 are spilled:
  //   1 evicts 4, 5 evicts 2, 2 finds both host pages pinned by the spill (a spill failure).
  temp_dir dir;
  std::string const trace = dir.write("small.jsonl", small_kv_trace);
  auto const r = run_cli(dir, {"kv-replay", "--trace", trace, "--pages", "3", "--tiers",
                               "host=2", "--policy", "page-cache,lru", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 2u) << describe(r);
  for (auto const& j : rows) {
    check_kv_row(j);
    for (char const* k : {"host_pages", "lower_hits", "spills"}) {
      ASSERT_TRUE(j.contains(k)) << "missing '" << k << "' in " << j.dump();
    }
    EXPECT_EQ(j["host_pages"], 2);
    EXPECT_EQ(j["page_refs"], 13);
    EXPECT_EQ(j["page_hits"], 4) << j.dump();
    EXPECT_EQ(j["lower_hits"], 1) << j.dump();
    EXPECT_EQ(j["page_misses"], 8) << j.dump();
    EXPECT_EQ(j["prefix_hit_pages"], 3) << j.dump();
    EXPECT_EQ(j["no_space"], 1) << j.dump();
    EXPECT_EQ(j["evictions"], 6) << j.dump();
    EXPECT_EQ(j["spills"], 5) << j.dump();
    EXPECT_EQ(j["spill_failures"], 1) << j.dump();
    EXPECT_EQ(j["host_evictions"], 3) << j.dump();
  }
}

TEST(Cli, KvReplayMalformedTraceNamesTheLine) {
  temp_dir dir;
  std::string const bad = dir.write(
      "bad.jsonl", small_kv_trace.substr(0, small_kv_trace.find('\n') + 1) +
                       R"({"timestamp": 1, "hash_ids": [1, 2]})" "\n"
                       R"({"timestamp": 2, "hash_ids": [1, "two"]})" "\n" +
                       small_kv_trace);
  auto const r = run_cli(dir, {"kv-replay", "--trace", bad, "--pages", "8", "--json"});
  EXPECT_EQ(r.rc, 1) << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);  // nothing replayed from a partial trace
  EXPECT_NE(r.err.find(bad + ": line 3"), std::string::npos) << describe(r);

  std::string const cut = dir.write("cut.jsonl", small_kv_trace + R"({"hash_ids": [3)");
  auto const c = run_cli(dir, {"kv-replay", "--trace", cut, "--pages", "8"});
  EXPECT_EQ(c.rc, 1) << describe(c);
  EXPECT_NE(c.err.find(cut + ": line 5"), std::string::npos) << describe(c);
}

TEST(Cli, KvReplayBadArgumentsExitWithTwo) {
  temp_dir dir;
  std::string const trace = dir.write("ok.jsonl", small_kv_trace);
  std::vector<bad_case> const cases{
      {{"kv-replay", "--trace", trace, "--pages", "0"}, "--pages must be at least 1"},
      {{"kv-replay", "--trace", trace, "--pages", "8", "--page-bytes", "0"},
       "--page-bytes must be at least 1"},
      {{"kv-replay", "--trace", trace}, "--pages"},
      {{"kv-replay", "--trace", trace, "--pages", "8", "--policy", "page-cache,arc"}, "arc"},
      {{"kv-replay", "--trace", trace, "--pages", "8", "--tiers", "disk=5"}, "--tiers"},
      {{"kv-replay", "--trace", trace, "--pages", "8", "--tiers", "host=0"}, "--tiers"},
      {{"kv-replay", "--trace", trace, "--pages", "8", "--ratio", "1.5"}, "--ratio"},
      {{"kv-replay", "--trace", (dir.path() / "missing.jsonl").string(), "--pages", "8"},
       "missing.jsonl"},
  };
  expect_refused(dir, cases);
  auto const h = run_cli(dir, {"kv-replay", "--help"});
  EXPECT_EQ(h.rc, 0) << describe(h);
  EXPECT_NE(h.out.find("mooncake_synthetic.jsonl"), std::string::npos)
      << "--help names the default trace\n" << describe(h);
}

TEST(Cli, KvReplayWithoutATraceReplaysASyntheticOne) {
  temp_dir dir;
  auto const r = run_cli(dir, {"kv-replay", "--pages", "200", "--json"}, "env -u CCHT_TRACES_DIR");
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_NE(r.err.find("synthetic"), std::string::npos) << describe(r);
  auto const rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 2u) << describe(r);  // page-cache and lru
  EXPECT_EQ(rows[0]["trace"], "synthetic");
  EXPECT_EQ(rows[0]["requests"], 2000);
  // A CCHT_TRACES_DIR without the trace is an error that names the file, not a silent fallback.
  auto const m = run_cli(dir, {"kv-replay", "--pages", "200"},
                         "CCHT_TRACES_DIR=" + quoted(dir.path().string()));
  EXPECT_EQ(m.rc, 2) << describe(m);
  EXPECT_NE(m.err.find("mooncake_synthetic.jsonl"), std::string::npos) << describe(m);
}

TEST(Cli, KvReplayMooncakeTrace) {
  CCHT_SKIP_WITHOUT_TRACES();
  temp_dir dir;
  std::string const mc = trace_path("mooncake_synthetic.jsonl");
  if (HasFailure()) { return; }
  auto const r = run_cli(dir, {"kv-replay", "--trace", mc, "--pages", "4000", "--policy",
                               "page-cache,lru", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 2u) << describe(r);
  for (auto const& j : rows) {
    check_kv_row(j);
    EXPECT_EQ(j["requests"], 3993);
    EXPECT_EQ(j["page_refs"], 121877);  // no request repeats a block
    EXPECT_EQ(j["no_space"], 0);
  }
  auto const& pc = rows[0];
  auto const& lru = rows[1];
  ASSERT_EQ(pc["policy"], "page-cache");
  ASSERT_EQ(lru["policy"], "lru");
  // With no repeats and no request over 4000 pages, pins never change the exact LRU: it is the
  // plain LRU of shared/traces/README.md (93823 misses at 4000).
  EXPECT_EQ(lru["page_misses"], 93823) << lru.dump();
  EXPECT_NEAR(pc["hit_ratio"].get<double>(), lru["hit_ratio"].get<double>(), 0.005)
      << pc.dump() << "\n" << lru.dump();
}

// ---- compare -------------------------------------------------------------------------------------

TEST(Cli, CompareWritesCsvAndJsonl) {
  temp_dir dir;
  fs::path const out = dir.path() / "results";
  auto const r = run_cli(dir, {"compare", "--keys", "2000", "--requests", "20000", "--out",
                               out.string(), "--no-plot"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_NE(r.out.find("Miss ratio"), std::string::npos) << describe(r);
  ASSERT_TRUE(fs::exists(out / "compare.csv"));
  ASSERT_TRUE(fs::exists(out / "compare.jsonl"));
  EXPECT_TRUE(fs::exists(out / "compare.md"));
  EXPECT_FALSE(fs::exists(out / "miss_ratio.png"));  // --no-plot

  // Five default workloads x four default capacities (32, 100, 200, 400) x six policies.
  std::size_t const expected = 5 * 4 * ccht::sim::known_policies().size();
  auto const rows = json_lines(slurp(out / "compare.jsonl"));
  ASSERT_EQ(rows.size(), expected);
  std::set<std::string> workloads;
  std::set<std::tuple<std::string, std::string, std::size_t>> keys;
  for (auto const& j : rows) {
    check_row(j);
    workloads.insert(j["trace"].get<std::string>());
    EXPECT_TRUE(keys.emplace(j["trace"].get<std::string>(), j["policy"].get<std::string>(),
                             j["capacity"].get<std::size_t>())
                    .second)
        << j.dump();
    EXPECT_EQ(j["requests"].get<std::uint64_t>() + j["updates"].get<std::uint64_t>(), 20000u);
  }
  EXPECT_EQ(workloads.size(), 5u);

  std::ifstream csv(out / "compare.csv");
  std::string header, line;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("trace,policy,capacity,", 0), 0u) << header;
  std::size_t n = 0;
  while (std::getline(csv, line)) {
    if (!line.empty()) { ++n; }
  }
  EXPECT_EQ(n, expected);
  EXPECT_NE(header.find("miss_ratio,evictions,seconds,throughput,backend,batch"), std::string::npos)
      << header;

  // The Markdown (stdout and compare.md) fits 100 columns, and its tables, split by columns,
  // still hold every (workload, capacity, policy) miss ratio and every ccht-* gap.
  for (std::string const& md : {r.out, slurp(out / "compare.md")}) {
    std::set<std::tuple<std::string, std::string, std::size_t>> cells, gap_cells;
    std::istringstream in(md);
    std::string l, section;
    std::vector<std::string> head;
    auto split_row = [](std::string const& row) {
      std::vector<std::string> v;
      std::istringstream cs(row.substr(1));
      std::string c;
      while (std::getline(cs, c, '|')) {
        auto const b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
        v.push_back(b == std::string::npos ? "" : c.substr(b, e - b + 1));
      }
      return v;
    };
    while (std::getline(in, l)) {
      EXPECT_LE(l.size(), 100u) << l;
      if (l.rfind("### ", 0) == 0) { section = l.substr(4); head.clear(); continue; }
      if (l.rfind("## ", 0) == 0) { section.clear(); head.clear(); continue; }
      if (l.empty() || l[0] != '|') { head.clear(); continue; }
      if (l.rfind("|-", 0) == 0) { continue; }
      auto const v = split_row(l);
      if (head.empty()) { head = v; continue; }
      if (section.empty() || head[0] != "policy") { continue; }  // the throughput table
      for (std::size_t c = 1; c < v.size() && c < head.size(); ++c) {
        auto const at = head[c].find('@');
        ASSERT_NE(at, std::string::npos) << head[c];
        std::size_t const cap = std::stoul(head[c].substr(at + 1));
        if (head[c].rfind("m@", 0) == 0) {
          cells.emplace(section, v[0], cap);
        } else if (!v[c].empty()) {
          gap_cells.emplace(section, v[0], cap);
        }
      }
    }
    EXPECT_EQ(cells, keys) << md;
    std::size_t ccht_cells = 0;
    for (auto const& k : keys) { ccht_cells += std::get<1>(k).rfind("ccht-", 0) == 0 ? 1 : 0; }
    EXPECT_EQ(gap_cells.size(), ccht_cells) << md;
  }
}

TEST(Cli, CompareOnATrace) {
  temp_dir dir;
  std::string const trace = dir.write("small.trace", as_lirs(small_keys()));
  fs::path const out = dir.path() / "cmp";
  auto const r = run_cli(dir, {"compare", "--trace", trace, "--policy", "lru,ccht-lru",
                               "--capacity", "64,128", "--out", out.string(), "--no-plot"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const rows = json_lines(slurp(out / "compare.jsonl"));
  ASSERT_EQ(rows.size(), 4u);
  for (auto const& j : rows) {
    check_row(j);
    EXPECT_EQ(j["trace"], "small.trace");
  }
}

}  // namespace

// ---- ccht weights ------------------------------------------------------------------------------

#ifndef CCHT_ST_FIXTURES_DIR
#define CCHT_ST_FIXTURES_DIR ""
#endif

namespace {

TEST(Cli, WeightsDigestIsWhatPythonWrote) {
  fs::path const fixtures = CCHT_ST_FIXTURES_DIR;
  if (fixtures.empty() || !fs::exists(fixtures / "manifest.json")) {
    GTEST_SKIP() << "no safetensors fixtures (" << fixtures
                 << "): run tools/dev.sh setup, which installs the safetensors package in .venv";
  }
  temp_dir dir;
  std::ifstream in(fixtures / "manifest.json");
  json const manifest = json::parse(in);
  std::vector<std::string> args{"weights", "--budget", "8MiB", "--page-bytes", "64KiB",
                                "--invocations", "5", "--digest", "--json"};
  std::map<std::pair<std::string, std::string>, json> expected;
  for (auto const& f : manifest["files"]) {
    std::string const path = (fixtures / f["file"].get<std::string>()).string();
    args.push_back("--file");
    args.push_back(path);
    for (auto const& t : f["tensors"]) { expected[{path, t["name"].get<std::string>()}] = t; }
  }
  auto const r = run_cli(dir, args);
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1 + expected.size()) << describe(r);
  auto const& run = lines[0];
  for (char const* k : {"loads", "hits", "misses", "bytes_loaded", "load_gbps", "warm_load_seconds",
                        "cold_load_seconds"}) {
    EXPECT_TRUE(run.contains(k)) << k;
  }
  EXPECT_EQ(run["loads"].get<int>(), 5);
  EXPECT_EQ(run["hits"].get<int>() + run["misses"].get<int>(), 5);
  EXPECT_EQ(run["verify_failures"].get<int>(), 0);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    auto const& d = lines[i];
    auto const it = expected.find({d["file"].get<std::string>(), d["name"].get<std::string>()});
    ASSERT_NE(it, expected.end()) << d.dump();
    EXPECT_EQ(d["dtype"], it->second["dtype"]) << d.dump();
    EXPECT_EQ(d["shape"], it->second["shape"]) << d.dump();
    EXPECT_EQ(d["bytes"], it->second["bytes"]) << d.dump();
    EXPECT_EQ(d["crc32"], it->second["crc32"]) << d.dump();  // Python's zlib.crc32
  }
}

TEST(Cli, WeightsCountsColdAndWarmLoads) {
  temp_dir dir;
  std::vector<std::string> files;
  std::vector<std::byte> bytes(300000);
  for (std::size_t i = 0; i < bytes.size(); ++i) { bytes[i] = static_cast<std::byte>(i * 7); }
  for (int m = 0; m < 3; ++m) {
    std::string name = "m";  // appends: `"m" + string&&` trips GCC 12's false -Wrestrict
    name += std::to_string(m);
    name += ".safetensors";
    std::string const p = (dir.path() / name).string();
    std::vector<ccht::st_tensor_data> ts = {
        {"w", ccht::st_dtype::F32, {75000}, bytes},
        {"b", ccht::st_dtype::U8, {1000}, std::span(bytes).first(1000)}};
    ccht::write_safetensors(p, ts);
    files.push_back(p);
  }
  // Each model is 5 pages of 64 KiB + 1 page; a budget of 12 pages holds two of the three.
  std::vector<std::string> args{"weights", "--budget", "768KiB", "--page-bytes", "64KiB",
                                "--invocations", "30", "--zipf", "0.5", "--json"};
  for (auto const& f : files) { args.insert(args.end(), {"--file", f}); }
  auto const r = run_cli(dir, args);
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto const j = json_lines(r.out).at(0);
  EXPECT_EQ(j["loads"].get<int>(), 30);
  EXPECT_GE(j["misses"].get<int>(), 3);  // every model is cold once
  EXPECT_GT(j["hits"].get<int>(), 0);
  EXPECT_LE(j["bytes_resident"].get<std::size_t>(), 768u * 1024);
  EXPECT_GE(j["bytes_loaded"].get<std::size_t>(), 3u * 301000);
  EXPECT_EQ(j["verify_failures"].get<int>(), 0);
}

TEST(Cli, WeightsErrors) {
  temp_dir dir;
  std::string const bad = (dir.path() / "bad.safetensors").string();
  {
    std::ofstream out(bad, std::ios::binary);
    out << std::string("\x40\x00\x00\x00\x00\x00\x00\x00", 8) << "{";
  }
  auto r = run_cli(dir, {"weights", "--file", bad, "--budget", "1MiB", "--page-bytes", "64KiB"});
  EXPECT_EQ(r.rc, 1) << describe(r);
  EXPECT_NE(r.err.find(bad), std::string::npos) << describe(r);
  r = run_cli(dir, {"weights", "--file", bad, "--budget", "12QB"});
  EXPECT_EQ(r.rc, 2) << describe(r);
  EXPECT_NE(r.err.find("--budget"), std::string::npos) << describe(r);
  r = run_cli(dir, {"weights", "--budget", "1MiB"});
  EXPECT_EQ(r.rc, 2) << describe(r);
  std::string const ok = (dir.path() / "ok.safetensors").string();
  std::vector<std::byte> b(16);
  std::vector<ccht::st_tensor_data> ts = {{"x", ccht::st_dtype::U8, {16}, b}};
  ccht::write_safetensors(ok, ts);
  r = run_cli(dir, {"weights", "--file", ok, "--budget", "100000", "--page-bytes", "64KiB"});
  EXPECT_EQ(r.rc, 1) << describe(r);  // the budget is not whole pages
  EXPECT_NE(r.err.find("does not divide"), std::string::npos) << describe(r);
}

}  // namespace
