// Hostile and careless use of the `ccht` CLI (issue 31; docs/hostile-use.md): each command runs as
// a process under a deadline, so a hang is a failure (the process is killed), not a stuck suite.
#include "sim_test_support.hpp"

#include <ccht/cache/safetensors.hpp>
#include <ccht/detail/system.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#ifndef CCHT_CLI_PATH
#error "CCHT_CLI_PATH (the built ccht binary) must be defined by the build"
#endif

extern char** environ;

namespace {

using namespace ccht_sim_test;

/// @p prefix followed by @p i (appended: GCC 12 warns falsely on "literal" + std::string&&).
std::string numbered(char const* prefix, long long i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

struct run_result {
  int rc = -1;        ///< exit code, 128 + signal, or -1 when it was killed at the deadline
  bool hung = false;  ///< still running at the deadline
  std::string err;    ///< stderr
  std::string cmd;
};

/// Runs `ccht args...` (stdin /dev/null, stdout discarded, stderr kept) and kills it when it is
/// still running after @p deadline.
run_result run_with_deadline(temp_dir const& dir, std::vector<std::string> const& args,
                             std::chrono::seconds deadline) {
  run_result r;
  std::string const err_path = (dir.path() / "stderr").string();
  std::vector<std::string> argv_s{CCHT_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) {
    argv.push_back(a.data());
    r.cmd += a;
    r.cmd += ' ';
  }
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  int const rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << argv[0];
    return r;
  }
  auto const end = std::chrono::steady_clock::now() + deadline;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      r.hung = true;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!r.hung) { r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }
  r.err = slurp(err_path);
  return r;
}

std::string describe(run_result const& r) {
  return r.cmd + "\n" + (r.hung ? std::string("hung (killed at the deadline)")
                                 : "exit " + std::to_string(r.rc)) +
         "\nstderr: " + r.err.substr(0, 1500);
}

/// A small safetensors model of @p tensors U8 tensors.
void write_model(std::string const& path, int tensors, std::size_t bytes, int seed) {
  std::vector<std::vector<std::byte>> data(tensors);
  std::vector<ccht::st_tensor_data> ts;
  for (int t = 0; t < tensors; ++t) {
    data[t].assign(bytes, static_cast<std::byte>(t + seed));
    ts.push_back({numbered("t", t), ccht::st_dtype::U8, {bytes}, data[t]});
  }
  ccht::write_safetensors(path, ts);
}

// Case 1: 700 distinct 100-tensor models through a 4 MiB cache of 4 KiB pages aborted after 3 s
// ("terminate called ... unmapping pages ... failed"): every evicted object kept its mapping.
TEST(CliHostile, WeightsOverManyDistinctModelsRunsToTheEnd) {
  temp_dir dir;
  std::vector<std::string> args{"weights", "--budget", "4MiB", "--page-bytes", "4KiB",
                                "--invocations", "3000", "--zipf", "0", "--json"};
  for (int m = 0; m < 700; ++m) {
    std::string const p = (dir.path() / (numbered("m", m) + ".safetensors")).string();
    write_model(p, 100, 64 + m % 50, m);
    args.push_back("--file");
    args.push_back(p);
  }
  auto const r = run_with_deadline(dir, args, std::chrono::seconds(240));
  EXPECT_EQ(r.rc, 0) << describe(r);
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << describe(r);
}

// Case 9: a FIFO given as a model or a trace blocked in open() for ever.
TEST(CliHostile, FifoAsModelOrTraceIsRefused) {
  temp_dir dir;
  std::string const fifo = (dir.path() / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (auto const& args : std::vector<std::vector<std::string>>{
           {"weights", "--file", fifo, "--budget", "1MiB", "--page-bytes", "4KiB"},
           {"replay", "--trace", fifo, "--format", "plain"}}) {
    auto const r = run_with_deadline(dir, args, std::chrono::seconds(30));
    EXPECT_FALSE(r.hung) << describe(r);
    EXPECT_NE(r.rc, 0) << describe(r);
    EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << describe(r);
  }
}

// Case 8: `--slots-ratio 1e-6` asked for a table of a million times the capacity and was killed
// by the OOM killer; now it is refused before anything is allocated.
TEST(CliHostile, TableLargerThanTheMachineIsRefused) {
  temp_dir dir;
  std::string const trace = (dir.path() / "t.txt").string();
  {
    std::ofstream out(trace);
    for (int i = 0; i < 20000; ++i) { out << (i * 7919) % 5000 << '\n'; }
  }
  // A capacity whose table at ratio 1e-6 (8 bytes a slot) is 1.5 times the memory available.
  std::size_t const avail = ccht::detail::host_memory_available();
  if (avail == SIZE_MAX) { GTEST_SKIP() << "the memory available cannot be read"; }
  std::string const capacity = std::to_string(avail / 8 * 3 / 2 / 1000000 + 1);
  auto const r = run_with_deadline(
      dir, {"replay", "--trace", trace, "--format", "plain", "--policy", "ccht-double-lru",
            "--capacity", capacity, "--slots-ratio", "1e-6"},
      std::chrono::seconds(60));
  EXPECT_EQ(r.rc, 1) << describe(r);
  EXPECT_NE(r.err.find("available"), std::string::npos) << describe(r);
}

// Case 8: a weight-cache budget beyond the machine's memory populated shared memory until the
// machine ran out.
TEST(CliHostile, BudgetLargerThanTheMachineIsRefused) {
  temp_dir dir;
  std::string const model = (dir.path() / "m.safetensors").string();
  write_model(model, 2, 100, 0);
  auto const r = run_with_deadline(
      dir, {"weights", "--file", model, "--budget", "1024GiB", "--page-bytes", "4KiB",
            "--huge-pages", "off", "--invocations", "1"},
      std::chrono::seconds(60));
  EXPECT_EQ(r.rc, 1) << describe(r);
  EXPECT_NE(r.err.find("available"), std::string::npos) << describe(r);
}

}  // namespace
