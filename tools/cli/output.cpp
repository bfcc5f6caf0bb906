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
    bool right = false;  // by the column's first non-empty cell
    for (auto const& r : rows_) {
      if (c < r.size() && !r[c].empty()) {
        right = numeric(r[c]);
        break;
      }
    }
    o << (right ? std::string(w[c] + 1, '-') + ":|" : std::string(w[c] + 2, '-') + "|");
  }
  o << '\n';
  for (auto const& r : rows_) { line(r, false); }
  return o.str();
}

std::string markdown_table::str_fitting(std::size_t width, std::size_t keep) const {
  keep = std::min(keep, header_.size());
  auto col_width = [&](std::size_t c) {  // as str() pads it, with "| " and " " around
    std::size_t w = std::max<std::size_t>(3, header_[c].size());
    for (auto const& r : rows_) {
      if (c < r.size()) { w = std::max(w, r[c].size()); }
    }
    return w + 3;
  };
  std::size_t base = 1;  // the closing '|'
  for (std::size_t c = 0; c < keep; ++c) { base += col_width(c); }
  std::string out;
  for (std::size_t c = keep; c < header_.size() || (c == keep && c == header_.size());) {
    std::vector<std::size_t> cols;
    for (std::size_t k = 0; k < keep; ++k) { cols.push_back(k); }
    std::size_t used = base;
    while (c < header_.size() && (cols.size() == keep || used + col_width(c) <= width)) {
      used += col_width(c);
      cols.push_back(c++);
    }
    auto pick = [&](std::vector<std::string> const& r) {
      std::vector<std::string> v;
      for (std::size_t k : cols) { v.push_back(k < r.size() ? r[k] : ""); }
      return v;
    };
    markdown_table part(pick(header_));
    for (auto const& r : rows_) { part.add(pick(r)); }
    if (!out.empty()) { out += '\n'; }
    out += part.str();
    if (cols.size() == keep) { break; }  // only key columns: one table
  }
  return out;
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
