// Output helpers of the ccht CLI: Markdown tables, JSON Lines, CSV, and a progress bar that
// only draws when stderr is a terminal.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace ccht::cli {

/// A table of strings printed as Markdown (pipes, header separator, right-aligned numbers).
class markdown_table {
 public:
  explicit markdown_table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string str() const;
  /**
   * The same rows as tables no wider than @p width characters: each repeats the first @p keep
   * columns and takes as many of the others, in order, as fit (at least one), so no terminal
   * wraps them. Tables are separated by a blank line.
   */
  std::string str_fitting(std::size_t width, std::size_t keep) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

/// Formats @p v with @p digits decimals.
std::string fixed(double v, int digits);

/// Progress on stderr: "[=====>    ] 3/24 label  1.2 M/s  ETA 5s". Silent unless a terminal.
class progress {
 public:
  progress(std::size_t total, std::string label);
  /// Marks @p done units complete; @p work is the amount of work done so far (for the rate).
  void update(std::size_t done, double work = 0);
  /// Clears the line.
  void finish();

 private:
  std::size_t total_;
  std::string label_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ccht::cli
