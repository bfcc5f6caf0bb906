// `ccht kv-replay --remote` and `ccht weights --remote` end to end: the built binary, run as
// separate processes against a real redis-server on a loopback port that the test starts.
#include "redis_server.hpp"

#include <ccht/cache/safetensors.hpp>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#ifndef CCHT_CLI_PATH
#error "CCHT_CLI_PATH (the built ccht binary) must be defined by the build"
#endif

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ccht::test::redis_server;

struct cli_result {
  int rc = -1;
  std::string out, err, cmd;
  std::string text() const {
    return "command: " + cmd + "\nexit " + std::to_string(rc) + "\nstdout:\n" +
           out.substr(0, 2000) + "\nstderr:\n" + err.substr(0, 2000);
  }
};

std::string quoted(std::string const& s) {
  std::string q = "'";
  for (char c : s) { q += c == '\'' ? std::string("'\\''") : std::string(1, c); }
  return q + "'";
}

std::string slurp(fs::path const& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class cli_dir {
 public:
  cli_dir() {
    char tmpl[] = "/tmp/ccht-cli-remote-XXXXXX";
    if (char* d = ::mkdtemp(tmpl); d != nullptr) { path_ = d; }
  }
  ~cli_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path const& path() const { return path_; }

  /// Runs `env... ccht args...`, stdout and stderr captured apart.
  cli_result run(std::vector<std::string> const& args, std::string const& env = {}) const {
    cli_result r;
    r.cmd = env.empty() ? "" : env + " ";
    r.cmd += quoted(CCHT_CLI_PATH);
    for (auto const& a : args) {  // two appends: `" " + string&&` trips GCC 12's -Wrestrict
      r.cmd += ' ';
      r.cmd += quoted(a);
    }
    fs::path const out = path_ / "stdout", err = path_ / "stderr";
    std::string const full = r.cmd + " </dev/null >" + quoted(out) + " 2>" + quoted(err);
    int const st = std::system(full.c_str());
    r.rc = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

 private:
  fs::path path_;
};

json first_json(cli_result const& r) {
  std::istringstream in(r.out);
  std::string line;
  std::getline(in, line);
  return json::parse(line);
}

/// A Mooncake-format trace: requests share prefixes of a few long chains, so blocks recur.
std::string write_trace(fs::path const& dir) {
  std::mt19937_64 rng(7);
  std::string const p = (dir / "trace.jsonl").string();
  std::ofstream out(p);
  for (int r = 0; r < 400; ++r) {
    int const chain = int(rng() % 12);
    int const len = 4 + int(rng() % 28);
    json j{{"timestamp", r}, {"input_length", len * 512}, {"output_length", 1}};
    std::vector<std::uint64_t> ids;
    for (int b = 0; b < len; ++b) { ids.push_back(std::uint64_t(chain) * 1000 + std::uint64_t(b)); }
    j["hash_ids"] = ids;
    out << j.dump() << '\n';
  }
  return p;
}

TEST(CliRemote, KvReplayInASecondProcessHitsWhatTheFirstWrote) {
  redis_server server;
  START_OR_SKIP(server);
  cli_dir dir;
  std::string const trace = write_trace(dir.path());
  std::vector<std::string> args{"kv-replay", "--trace", trace, "--pages", "20", "--tiers",
                                "host=40", "--policy", "page-cache", "--remote", server.url(),
                                "--remote-prefix", "ccht:clitest:", "--json"};
  auto const a = dir.run(args);
  ASSERT_EQ(a.rc, 0) << a.text();
  auto const ja = first_json(a);
  for (char const* k : {"remote_hits", "remote_lookups", "remote_writes", "remote_store_hits",
                        "remote_misses", "remote_hit_bytes", "remote_put_bytes", "remote_errors",
                        "remote_integrity_failures", "remote_pages_per_s"}) {
    EXPECT_TRUE(ja.contains(k)) << k << "\n" << a.text();
  }
  EXPECT_EQ(ja["check_failures"].get<int>(), 0) << a.text();
  EXPECT_GT(ja["remote_writes"].get<std::uint64_t>(), 0u) << a.text();
  EXPECT_EQ(ja["remote_errors"].get<std::uint64_t>(), 0u) << a.text();

  auto const b = dir.run(args);  // a new process: its local tiers start empty
  ASSERT_EQ(b.rc, 0) << b.text();
  auto const jb = first_json(b);
  EXPECT_EQ(jb["check_failures"].get<int>(), 0) << b.text();  // every page byte for byte
  EXPECT_GT(jb["remote_hits"].get<std::uint64_t>(), ja["remote_hits"].get<std::uint64_t>())
      << a.text() << "\n" << b.text();
  EXPECT_GT(jb["hit_ratio"].get<double>(), ja["hit_ratio"].get<double>());
  EXPECT_EQ(jb["remote_hit_bytes"].get<std::uint64_t>(),
            jb["remote_store_hits"].get<std::uint64_t>() * jb["page_bytes"].get<std::uint64_t>());

  // Another prefix is another namespace: nothing of the first two runs is seen.
  args[12] = "ccht:other:";
  auto const c = dir.run(args);
  ASSERT_EQ(c.rc, 0) << c.text();
  EXPECT_LT(first_json(c)["remote_hits"].get<std::uint64_t>(),
            jb["remote_hits"].get<std::uint64_t>())
      << "a fresh prefix starts as empty as the first run did\n" << c.text();
}

// A --remote that never answers (a wrong port or host) still lets the run finish on its local
// tiers, but the run fails: one line on stderr says so, exit 1 (it used to exit 0 in silence,
// with only remote_errors in the JSON).
TEST(CliRemote, KvReplayWithNoServerServesLocallyButFails) {
  cli_dir dir;
  std::string const trace = write_trace(dir.path());
  int const port = ccht::test::free_loopback_port();  // nothing listens there
  std::vector<std::string> base{"kv-replay", "--trace", trace, "--pages", "20", "--tiers",
                                "host=40", "--policy", "page-cache", "--json"};
  auto const local = dir.run(base);
  ASSERT_EQ(local.rc, 0) << local.text();
  auto args = base;
  args.insert(args.end(), {"--remote", "redis://127.0.0.1:" + std::to_string(port),
                           "--remote-timeout-ms", "50"});
  auto const r = dir.run(args);
  EXPECT_EQ(r.rc, 1) << r.text();
  EXPECT_NE(r.err.find("ccht: error: remote tier (redis redis://127.0.0.1:" + std::to_string(port) +
                       "): no server was ever reached"),
            std::string::npos)
      << r.text();
  EXPECT_NE(r.err.find("connect to 127.0.0.1:" + std::to_string(port)), std::string::npos) << r.text();
  auto const j = first_json(r);
  EXPECT_EQ(j["check_failures"].get<int>(), 0);
  EXPECT_GT(j["remote_errors"].get<std::uint64_t>(), 0u) << r.text();
  // Remote hits can only be write-backs still queued (read-your-writes), never a loss.
  EXPECT_GE(j["page_hits"].get<std::uint64_t>(), first_json(local)["page_hits"].get<std::uint64_t>())
      << "the local tiers serve at least as without it";
}

// A server that refuses every write (here: no replica for min-replicas-to-write) fails the run.
TEST(CliRemote, WeightsWhoseWritesAreAllRefusedFail) {
  redis_server server({"--min-replicas-to-write", "1"});
  START_OR_SKIP(server);
  cli_dir dir;
  std::vector<std::byte> bytes(100000, std::byte{7});
  std::string const p = (dir.path() / "m.safetensors").string();
  std::vector<ccht::st_tensor_data> ts = {{"w", ccht::st_dtype::U8, {100000}, bytes}};
  ccht::write_safetensors(p, ts);
  auto const r = dir.run({"weights", "--file", p, "--budget", "1MiB", "--page-bytes", "64KiB",
                          "--invocations", "3", "--json", "--remote", server.url()});
  EXPECT_EQ(r.rc, 1) << r.text();
  EXPECT_NE(r.err.find("): every write failed ("), std::string::npos) << r.text();
  EXPECT_NE(r.err.find("NOREPLICAS"), std::string::npos) << r.text();
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.text();
}

// Arguments the remote tier could never work with are bad arguments (exit 2, one line, the
// reason, never the password), found before anything runs.
TEST(CliRemote, BadRemoteArgumentsExitWithTwo) {
  cli_dir dir;
  std::string const trace = write_trace(dir.path());
  std::string const at = "127.0.0.1:" + std::to_string(ccht::test::free_loopback_port());
  std::vector<std::string> const base{"kv-replay", "--trace", trace, "--pages", "20", "--tiers",
                                      "host=40", "--policy", "page-cache", "--json"};
  struct bad_case {
    std::vector<std::string> extra;
    std::string says;
  };
  std::vector<bad_case> const cases{
      // seconds x 1000 overflowed: Redis refused every write, and the run said nothing
      {{"--remote", "redis://" + at, "--remote-ttl", "9223372036854776"},
       "--remote-ttl: expected seconds in [0, 1000000000000000] (0: no expiry), got 9223372036854776"},
      // CLI11 alone took -1 for 2^64 - 1
      {{"--remote", "redis://" + at, "--remote-ttl", "-1"},
       "--remote-ttl: expected a non-negative integer, got '-1'"},
      {{"--remote", "redis://" + at, "--remote-timeout-ms", "0"},
       "--remote-timeout-ms: expected a positive integer, got '0'"},
      // an unescaped '@' in the password made "ss-w0rd@127.0.0.1" the host
      {{"--remote", "redis://:p@ss-w0rd@" + at},
       "--remote: ccht: invalid_argument: redis URL: '@' appears more than once: write a '@' in the "
       "user name or password as %40"},
      {{"--remote", "redis://bad host:6379"}, "host 'bad host' holds ' '"},
      {{"--remote", "redis://:pass?w0rd@" + at + "/x"}, "database 'x' is not a number"},
  };
  for (auto const& c : cases) {
    auto args = base;
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    auto const r = dir.run(args);
    EXPECT_EQ(r.rc, 2) << r.text();
    EXPECT_TRUE(r.out.empty()) << r.text();
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.says << "\n" << r.text();
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.text();
    for (char const* secret : {"ss-w0rd", "w0rd"}) {
      EXPECT_EQ(r.err.find(secret), std::string::npos) << r.text();
    }
  }
}

TEST(CliRemote, AWrongPasswordIsAClearErrorThatNeverShowsTheSecret) {
  redis_server server({"--requirepass", "right-pw-71"});
  START_OR_SKIP(server);
  cli_dir dir;
  std::string const trace = write_trace(dir.path());
  std::vector<std::string> base{"kv-replay", "--trace", trace, "--pages", "20", "--tiers",
                                "host=40", "--policy", "page-cache", "--json", "--remote"};
  auto in_url = base;
  in_url.push_back("redis://:wrong-pw-93@127.0.0.1:" + std::to_string(server.port()));
  auto const a = dir.run(in_url);
  EXPECT_EQ(a.rc, 2) << a.text();
  EXPECT_NE(a.err.find("AUTH"), std::string::npos) << a.text();
  EXPECT_EQ(a.err.find("wrong-pw-93"), std::string::npos) << a.text();
  EXPECT_EQ(a.out.find("wrong-pw-93"), std::string::npos) << a.text();

  auto in_env = base;
  in_env.push_back(server.url());
  auto const b = dir.run(in_env, "CCHT_REDIS_PASSWORD=wrong-env-pw-58");
  EXPECT_EQ(b.rc, 2) << b.text();
  EXPECT_EQ(b.err.find("wrong-env-pw-58"), std::string::npos) << b.text();

  auto const c = dir.run(in_env);  // no password at all: the server says NOAUTH, clearly
  EXPECT_EQ(c.rc, 2) << c.text();
  EXPECT_NE(c.err.find("NOAUTH"), std::string::npos) << c.text();

  auto const ok = dir.run(in_env, "CCHT_REDIS_PASSWORD=right-pw-71");
  ASSERT_EQ(ok.rc, 0) << ok.text();
  EXPECT_EQ(first_json(ok)["remote_errors"].get<std::uint64_t>(), 0u) << ok.text();
  EXPECT_EQ(ok.err.find("right-pw-71"), std::string::npos) << ok.text();
}

TEST(CliRemote, WeightsInASecondProcessLoadFromTheRemoteTier) {
  redis_server server;
  START_OR_SKIP(server);
  cli_dir dir;
  std::vector<std::byte> bytes(300000);
  for (std::size_t i = 0; i < bytes.size(); ++i) { bytes[i] = static_cast<std::byte>(i * 13 + 5); }
  std::vector<std::string> args{"weights", "--budget", "1MiB", "--page-bytes", "64KiB",
                                "--invocations", "6", "--digest", "--json", "--remote",
                                server.url()};
  for (int m = 0; m < 2; ++m) {
    std::string const p = (dir.path() / ("m" + std::to_string(m) + ".safetensors")).string();
    std::vector<ccht::st_tensor_data> ts = {
        {"w", ccht::st_dtype::F32, {75000}, bytes},
        {"b", ccht::st_dtype::U8, {1000}, std::span(bytes).subspan(std::size_t(m) * 7, 1000)}};
    ccht::write_safetensors(p, ts);
    args.insert(args.end(), {"--file", p});
  }
  auto const a = dir.run(args);
  ASSERT_EQ(a.rc, 0) << a.text();
  auto const ja = first_json(a);
  EXPECT_EQ(ja["verify_failures"].get<int>(), 0) << a.text();
  EXPECT_GT(ja["remote_writes"].get<std::uint64_t>(), 0u) << a.text();
  EXPECT_EQ(ja["remote_errors"].get<std::uint64_t>(), 0u) << a.text();

  auto const b = dir.run(args);
  ASSERT_EQ(b.rc, 0) << b.text();
  auto const jb = first_json(b);
  EXPECT_EQ(jb["verify_failures"].get<int>(), 0) << b.text();
  EXPECT_GT(jb["remote_loads"].get<std::uint64_t>(), 0u) << b.text();
  EXPECT_GT(jb["remote_bytes"].get<std::uint64_t>(), 0u) << b.text();
  // The digests (crc32 of each tensor as loaded) agree across the two processes.
  EXPECT_EQ(a.out.substr(a.out.find('\n')), b.out.substr(b.out.find('\n')));
}

}  // namespace
