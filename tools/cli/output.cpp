#include "output.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <sstream>

namespace ccht::cli {

std::string markdown_table::str() const {
  std::vector<std::size_t> w(header_.size(), 3);
  for (std::size_t c = 0; c < header_.size(); ++c) { w[c] = std::max(w[c], header_[c].size()); }
  for (auto const& r : rows_) {
    for (std::size_t c = 0; c < r.size() && c < w.size(); ++c) { w[c] = std::max(w[c], r[c].size()); }
  }
  auto numeric = [](std::string const& s) {  // "12", "-0.41", "1.25x": right-aligned
    if (s.empty()) { return false; }
    char* end = nullptr;
    std::strtod(s.c_str(), &end);
    return end != s.c_str() && (*end == '\0' || (*end == 'x' && end[1] == '\0'));
  };
  std::ostringstream o;
  auto line = [&](std::vector<std::string> const& r, bool is_header) {
    o << '|';
    for (std::size_t c = 0; c < w.size(); ++c) {
      std::string const cell = c < r.size() ? r[c] : "";
      std::size_t const pad = w[c] - cell.size();
      bool const right = !is_header && numeric(cell);
      o << ' ' << (right ? std::string(pad, ' ') + cell : cell + std::string(pad, ' ')) << " |";
    }
    o << '\n';
  };
  line(header_, true);
  o << '|';
  for (std::size_t c = 0; c < w.size(); ++c) {
    bool const right = !rows_.empty() && c < rows_[0].size() && numeric(rows_[0][c]);
    o << (right ? std::string(w[c] + 1, '-') + ":|" : std::string(w[c] + 2, '-') + "|");
  }
  o << '\n';
  for (auto const& r : rows_) { line(r, false); }
  return o.str();
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

progress::progress(std::size_t total, std::string label)
    : total_(total), label_(std::move(label)), enabled_(isatty(2) != 0),
      start_(std::chrono::steady_clock::now()) {}

void progress::update(std::size_t done, double work) {
  if (!enabled_ || total_ == 0) { return; }
  double const secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double const frac = double(done) / double(total_);
  int const width = 30;
  int const filled = static_cast<int>(frac * width);
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < width) { bar += '>'; }
  bar.resize(width, ' ');
  double const eta = done ? secs / double(done) * double(total_ - done) : 0;
  std::fprintf(stderr, "\r[%s] %zu/%zu %s  %.2f M/s  ETA %.0fs   ", bar.c_str(), done, total_,
               label_.c_str(), secs > 0 ? work / secs / 1e6 : 0.0, eta);
  std::fflush(stderr);
}

void progress::finish() {
  if (enabled_) { std::fprintf(stderr, "\r%*s\r", 100, ""); }
}

}  // namespace ccht::cli
