// Trace readers. Each parser walks the whole input and throws at the first malformed line or
// record, so callers only ever see complete traces.
#include "traces.hpp"

#include <ccht/core/hash.hpp>
#include <ccht/core/types.hpp>
#include <ccht/detail/system.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ccht::sim {
namespace {

std::string line_at(std::size_t n) { return "line " + std::to_string(n); }

/// A JSON value for an error message: scalars as written (40 characters at most), containers by
/// kind (dump() recurses: a deeply nested id would overflow the stack).
std::string shown_json(nlohmann::json const& j) {
  if (j.is_array()) { return "a list"; }
  if (j.is_object()) { return "an object"; }
  std::string s = j.dump();
  return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

std::string shown(std::string_view s) {
  std::string out(s.substr(0, 40));
  for (char& c : out) {
    if (!std::isprint(static_cast<unsigned char>(c))) { c = '?'; }
  }
  return "'" + out + (s.size() > 40 ? "...'" : "'");
}

/// Calls f(line_number, line) for each line, '\r' stripped. Blank lines are only allowed at the
/// end of the input.
template <class F>
void for_each_line(std::string_view data, std::string const& name, F&& f) {
  std::size_t line_no = 0, pos = 0;
  std::size_t blank_line = 0;  // first blank line seen, 0 = none
  while (pos < data.size()) {
    std::size_t end = data.find('\n', pos);
    if (end == std::string_view::npos) { end = data.size(); }
    std::string_view line = data.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') { line.remove_suffix(1); }
    if (line.find_first_not_of(" \t") == std::string_view::npos) {
      if (blank_line == 0) { blank_line = line_no; }
      continue;
    }
    if (blank_line != 0) {
      throw trace_error(name, line_at(blank_line), "blank line inside the trace");
    }
    f(line_no, line);
  }
}

std::string_view trim(std::string_view s) {
  std::size_t const b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) { return {}; }
  std::size_t const e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

/// Parses a whole field as a non-negative integer key that ccht can store.
std::uint64_t parse_key(std::string_view field, std::string const& name, std::string const& where,
                        char const* what = "a non-negative integer key") {
  std::uint64_t v = 0;
  auto const [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (ec == std::errc::result_out_of_range) {
    throw trace_error(name, where, std::string("number ") + shown(field) + " does not fit in 64 bits");
  }
  if (ec != std::errc() || ptr != field.data() + field.size() || field.empty()) {
    throw trace_error(name, where, std::string("expected ") + what + ", got " + shown(field));
  }
  if (is_reserved_key(v)) {
    throw trace_error(name, where,
                      "key " + std::to_string(v) + " is reserved by ccht (keys must be below " +
                          std::to_string(claimed_key) + ")");
  }
  return v;
}

/// Throws unless @p have (at most @p max) and @p more requests stay within @p max (no overflow).
void check_total(std::size_t have, std::size_t more, std::size_t max, std::string const& name,
                 std::string const& where) {
  if (have > max || more > max - have) {
    throw trace_error(name, where, "trace expands to more than " + std::to_string(max) + " requests");
  }
}

std::vector<std::uint64_t> parse_lines_of_keys(std::string_view data, std::string const& name,
                                               bool allow_star) {
  std::vector<std::uint64_t> keys;
  for_each_line(data, name, [&](std::size_t n, std::string_view line) {
    line = trim(line);
    if (allow_star && line == "*") { return; }
    keys.push_back(parse_key(line, name, line_at(n)));
  });
  return keys;
}

/// Calls f(line_number, hash_ids) for each request of a Mooncake JSONL trace.
template <class F>
void for_each_mooncake_request(std::string_view data, std::string const& name, std::size_t max,
                               F&& f) {
  std::size_t total = 0;
  std::vector<std::uint64_t> ids;
  for_each_line(data, name, [&](std::size_t n, std::string_view line) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (nlohmann::json::exception const& e) {  // parse_error, or out_of_range for 1e999
      throw trace_error(name, line_at(n), std::string("expected a JSON object: ") + e.what());
    }
    if (!j.is_object() || !j.contains("hash_ids") || !j["hash_ids"].is_array()) {
      throw trace_error(name, line_at(n), "expected a JSON object with a \"hash_ids\" array");
    }
    ids.clear();
    for (auto const& id : j["hash_ids"]) {
      if (!id.is_number_unsigned()) {
        throw trace_error(name, line_at(n),
                          "expected non-negative integers in \"hash_ids\", got " + shown_json(id));
      }
      auto const k = id.get<std::uint64_t>();
      if (is_reserved_key(k)) {
        throw trace_error(name, line_at(n), "key " + std::to_string(k) + " is reserved by ccht");
      }
      ids.push_back(k);
    }
    check_total(total, ids.size(), max, name, line_at(n));
    total += ids.size();
    f(n, ids);
  });
}

std::vector<std::uint64_t> parse_mooncake(std::string_view data, std::string const& name,
                                          std::size_t max) {
  std::vector<std::uint64_t> keys;
  for_each_mooncake_request(data, name, max, [&](std::size_t, std::vector<std::uint64_t> const& ids) {
    keys.insert(keys.end(), ids.begin(), ids.end());
  });
  return keys;
}

std::string read_file(std::string const& path) {
  ccht::detail::require_regular_file(path);  // a FIFO would block the open below for ever
  std::ifstream in(path, std::ios::binary);
  if (!in) { throw std::runtime_error(path + ": cannot open: " + std::strerror(errno)); }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) { throw std::runtime_error(path + ": read error"); }
  return std::move(buf).str();
}

std::vector<std::uint64_t> parse_csv(std::string_view data, std::string const& name,
                                     csv_options const& opt) {
  if (opt.key_column < 1) {
    throw std::invalid_argument("csv key column must be 1 or more, got " +
                                std::to_string(opt.key_column));
  }
  std::vector<std::uint64_t> keys;
  bool header_pending = opt.has_header;
  for_each_line(data, name, [&](std::size_t n, std::string_view line) {
    if (header_pending) {
      header_pending = false;
      return;
    }
    int col = 1;
    std::size_t pos = 0;
    while (col < opt.key_column) {
      std::size_t const d = line.find(opt.delimiter, pos);
      if (d == std::string_view::npos) {
        throw trace_error(name, line_at(n),
                          "expected at least " + std::to_string(opt.key_column) + " columns, got " +
                              std::to_string(col));
      }
      pos = d + 1;
      ++col;
    }
    std::string_view field = line.substr(pos, line.find(opt.delimiter, pos) - pos);
    field = trim(field);
    if (field.size() >= 2 && field.front() == '"' && field.back() == '"') {
      field = field.substr(1, field.size() - 2);
    }
    bool const numeric = !field.empty() && std::all_of(field.begin(), field.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    if (!numeric && opt.hash_strings && !field.empty()) {
      std::uint64_t h = 0;
      for (char c : field) { h = hash64(h ^ static_cast<unsigned char>(c), 0x100000001b3ull); }
      keys.push_back(h % claimed_key);  // stay below the reserved keys
    } else {
      keys.push_back(parse_key(field, name, line_at(n), "an integer object id"));
    }
  });
  return keys;
}

std::vector<std::uint64_t> parse_oracle_general(std::string_view data, std::string const& name,
                                                std::size_t max) {
  constexpr std::size_t record = 24;
  static_assert(std::endian::native == std::endian::little, "oracleGeneral is little-endian");
  if (data.size() % record != 0) {
    throw trace_error(name, "record " + std::to_string(data.size() / record + 1),
                      "truncated: the file has " + std::to_string(data.size()) +
                          " bytes, not a multiple of the 24-byte record");
  }
  std::size_t const n = data.size() / record;
  check_total(0, n, max, name, "record " + std::to_string(n));
  std::vector<std::uint64_t> keys(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t id;
    std::memcpy(&id, data.data() + i * record + 4, sizeof(id));
    if (is_reserved_key(id)) {
      throw trace_error(name, "record " + std::to_string(i + 1),
                        "object id " + std::to_string(id) + " is reserved by ccht");
    }
    keys[i] = id;
  }
  return keys;
}

std::vector<std::uint64_t> parse_arc(std::string_view data, std::string const& name,
                                     std::size_t max) {
  std::vector<std::uint64_t> keys;
  for_each_line(data, name, [&](std::size_t n, std::string_view line) {
    std::uint64_t f[4];
    int count = 0;
    std::size_t pos = 0;
    while (true) {
      pos = line.find_first_not_of(" \t", pos);
      if (pos == std::string_view::npos) { break; }
      std::size_t const end = std::min(line.find_first_of(" \t", pos), line.size());
      if (count == 4) {
        throw trace_error(name, line_at(n), "expected 4 fields 'start count ignored seq', got more");
      }
      f[count++] = parse_key(line.substr(pos, end - pos), name, line_at(n), "an integer field");
      pos = end;
    }
    if (count != 4) {
      throw trace_error(name, line_at(n),
                        "expected 4 fields 'start count ignored seq', got " + std::to_string(count));
    }
    std::uint64_t const start = f[0], len = f[1];
    if (len == 0) { throw trace_error(name, line_at(n), "expected a count of at least 1, got 0"); }
    if (len > max || start + len < start || is_reserved_key(start + len - 1)) {
      throw trace_error(name, line_at(n), "block " + std::to_string(start) + " + " +
                                              std::to_string(len) + " runs past the key space");
    }
    check_total(keys.size(), len, max, name, line_at(n));
    for (std::uint64_t k = start; k < start + len; ++k) { keys.push_back(k); }
  });
  return keys;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string_view to_string(trace_format f) noexcept {
  switch (f) {
    case trace_format::auto_detect: return "auto";
    case trace_format::lirs: return "lirs";
    case trace_format::mooncake: return "mooncake";
    case trace_format::plain: return "plain";
    case trace_format::csv: return "csv";
    case trace_format::oracle_general: return "oracle-general";
    case trace_format::arc: return "arc";
  }
  return "?";
}

trace_format parse_trace_format(std::string_view name) {
  for (auto f : {trace_format::auto_detect, trace_format::lirs, trace_format::mooncake,
                 trace_format::plain, trace_format::csv, trace_format::oracle_general,
                 trace_format::arc}) {
    if (name == to_string(f)) { return f; }
  }
  throw std::invalid_argument("unknown trace format '" + std::string(name) +
                              "' (expected auto, lirs, mooncake, plain, csv, oracle-general, arc)");
}

trace_format detect_trace_format(std::string const& path, std::string& reason) {
  ccht::detail::require_regular_file(path);  // a FIFO would block the open below for ever
  std::ifstream in(path, std::ios::binary);
  if (!in) { throw std::runtime_error(path + ": cannot open"); }
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return detect_trace_format(std::string_view(path), head, reason);
}

trace_format detect_trace_format(std::string_view path, std::string_view head, std::string& reason) {
  struct ext_rule {
    char const* ext;
    trace_format f;
  };
  for (auto const& r : {ext_rule{".jsonl", trace_format::mooncake},
                        ext_rule{".json", trace_format::mooncake},
                        ext_rule{".lis", trace_format::arc}, ext_rule{".csv", trace_format::csv},
                        ext_rule{".oracleGeneral", trace_format::oracle_general},
                        ext_rule{".bin", trace_format::oracle_general},
                        ext_rule{".trace", trace_format::lirs},
                        ext_rule{".txt", trace_format::plain}}) {
    if (ends_with(path, r.ext)) {
      reason = std::string("extension ") + r.ext;
      return r.f;
    }
  }
  head = head.substr(0, 4096);
  bool const binary = std::any_of(head.begin(), head.end(), [](char c) {
    auto const u = static_cast<unsigned char>(c);
    return u == 0 || (u < 32 && u != '\n' && u != '\r' && u != '\t');
  });
  if (binary) {
    reason = "binary content";
    return trace_format::oracle_general;
  }
  std::string_view first = head;
  first = first.substr(0, first.find('\n'));
  if (!first.empty() && first.back() == '\r') { first.remove_suffix(1); }  // before trimming
  first = trim(first);
  if (!first.empty() && first.front() == '{') {
    reason = "first line is a JSON object";
    return trace_format::mooncake;
  }
  if (first.find(',') != std::string_view::npos) {
    reason = "first line has commas";
    return trace_format::csv;
  }
  if (first.find_first_of(" \t") != std::string_view::npos) {
    reason = "first line has several fields";
    return trace_format::arc;
  }
  reason = "one integer a line";
  return trace_format::lirs;
}

std::vector<std::uint64_t> parse_trace(std::string_view data, trace_format format,
                                       std::string const& name, csv_options const& csv,
                                       std::size_t max_requests) {
  switch (format) {
    case trace_format::lirs: return parse_lines_of_keys(data, name, true);
    case trace_format::plain: return parse_lines_of_keys(data, name, false);
    case trace_format::mooncake: return parse_mooncake(data, name, max_requests);
    case trace_format::csv: return parse_csv(data, name, csv);
    case trace_format::oracle_general: return parse_oracle_general(data, name, max_requests);
    case trace_format::arc: return parse_arc(data, name, max_requests);
    case trace_format::auto_detect: break;
  }
  throw std::invalid_argument("parse_trace needs a concrete format");
}

trace read_trace(std::string const& path, trace_format format, csv_options const& csv) {
  trace t;
  t.path = path;
  if (format == trace_format::auto_detect) { format = detect_trace_format(path, t.format_reason); }
  t.format = format;
  std::string const data = read_file(path);
  t.keys = parse_trace(data, format, path, csv);
  return t;
}

std::vector<std::vector<std::uint64_t>> parse_mooncake_requests(std::string_view data,
                                                                std::string const& name,
                                                                std::size_t max_requests) {
  std::vector<std::vector<std::uint64_t>> reqs;
  for_each_mooncake_request(data, name, max_requests, [&](std::size_t, std::vector<std::uint64_t> const& ids) {
    reqs.push_back(ids);
  });
  return reqs;
}

std::vector<std::vector<std::uint64_t>> read_mooncake_requests(std::string const& path) {
  return parse_mooncake_requests(read_file(path), path);
}

}  // namespace ccht::sim
