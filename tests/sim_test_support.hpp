// Helpers of the simulation-library and CLI tests (ccht_tests_sim): where the shared traces are,
// and a per-test temporary folder.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include <unistd.h>

#ifndef CCHT_TRACES_DIR_DEFAULT
#define CCHT_TRACES_DIR_DEFAULT "../shared/traces"
#endif

namespace ccht_sim_test {

namespace fs = std::filesystem;

/// The shared traces folder: $CCHT_TRACES_DIR, else the CMake cache variable CCHT_TRACES_DIR
/// (default `<source>/../shared/traces`).
inline fs::path traces_dir() {
  if (char const* e = std::getenv("CCHT_TRACES_DIR"); e != nullptr && *e != '\0') { return e; }
  return CCHT_TRACES_DIR_DEFAULT;
}

/// Whether the traces folder exists (tests that need it skip, visibly, when it does not).
inline bool have_traces() {
  std::error_code ec;
  return fs::is_directory(traces_dir(), ec);
}

/// Skips the current test when the traces folder is absent, naming the folder looked in.
#define CCHT_SKIP_WITHOUT_TRACES()                                                           \
  do {                                                                                       \
    if (!::ccht_sim_test::have_traces()) {                                                   \
      GTEST_SKIP() << "shared traces folder not found: " << ::ccht_sim_test::traces_dir()    \
                   << " (set CCHT_TRACES_DIR or the CMake cache variable CCHT_TRACES_DIR)"; \
    }                                                                                        \
  } while (0)

/// Path of a shared trace; fails the test when the folder exists but the file does not.
inline std::string trace_path(std::string const& file) {
  fs::path const p = traces_dir() / file;
  if (!fs::exists(p)) { ADD_FAILURE() << "traces folder present but " << p << " is missing"; }
  return p.string();
}

/// A fresh folder for one test, removed afterwards.
class temp_dir {
 public:
  temp_dir() {
    auto const* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "ccht";
    for (char& c : name) {
      if (c == '/' || c == ' ') { c = '_'; }
    }
    path_ = fs::temp_directory_path() / "ccht-sim-tests" /
            (name + "-" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  temp_dir(temp_dir const&) = delete;
  temp_dir& operator=(temp_dir const&) = delete;

  fs::path const& path() const { return path_; }
  /// Writes @p bytes to @p name inside the folder and returns the full path.
  std::string write(std::string const& name, std::string_view bytes) const {
    fs::path const p = path_ / name;
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good()) << "cannot write " << p;
    return p.string();
  }

 private:
  fs::path path_;
};

/// Reads a whole file.
inline std::string slurp(fs::path const& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace ccht_sim_test
