// libFuzzer target: every trace reader (tools/sim/traces.hpp) and format auto-detection.
// Input: byte 0 picks the reader, byte 1 the csv options (or the file name's extension for
// detection), the rest is the trace. A trace it accepts holds no reserved key and no more
// requests than the bound given.
#include <sim/traces.hpp>

#include <ccht/core/types.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace {

using namespace ccht::sim;

/// Requests a trace may expand to here: large enough to matter, small enough that an ARC count
/// near the real bound (2^28 keys, 2 GiB) is an error instead of a slow input.
constexpr std::size_t max_requests = std::size_t{1} << 20;

enum class mode : std::uint8_t {
  lirs, plain, mooncake, csv, oracle, arc, detect, detect_named, requests, count
};

constexpr std::array<char const*, 9> names{"trace",         "t.jsonl", "t.json", "t.lis", "t.csv",
                                           "t.oracleGeneral", "t.bin",   "t.trace", "t.txt"};

void require(bool ok) {
  if (!ok) { std::abort(); }
}

void check_keys(std::vector<std::uint64_t> const& keys) {
  require(keys.size() <= max_requests);
  for (auto k : keys) { require(!ccht::is_reserved_key(k)); }
}

trace_format concrete(mode m) {
  switch (m) {
    case mode::lirs: return trace_format::lirs;
    case mode::plain: return trace_format::plain;
    case mode::mooncake: return trace_format::mooncake;
    case mode::csv: return trace_format::csv;
    case mode::oracle: return trace_format::oracle_general;
    default: return trace_format::arc;
  }
}

void run(mode m, std::uint8_t opt, std::string_view text) {
  csv_options csv;
  csv.key_column = 1 + (opt & 3);
  csv.delimiter = ",;\t|"[(opt >> 2) & 3];
  csv.has_header = (opt & 16) != 0;
  csv.hash_strings = (opt & 32) != 0;
  if (m == mode::requests) {
    std::size_t total = 0;
    for (auto const& r : parse_mooncake_requests(text, "fuzz", max_requests)) { total += r.size(); }
    require(total <= max_requests);
    return;
  }
  trace_format f = concrete(m);
  if (m == mode::detect || m == mode::detect_named) {
    std::string reason;
    std::string_view const name = names[m == mode::detect ? 0 : opt % names.size()];
    f = detect_trace_format(name, text, reason);
    require(f != trace_format::auto_detect && !reason.empty());
  }
  check_keys(parse_trace(text, f, "fuzz", csv, max_requests));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size < 2) { return 0; }
  auto const m = static_cast<mode>(data[0] % static_cast<std::uint8_t>(mode::count));
  std::string_view const text(reinterpret_cast<char const*>(data + 2), size - 2);
  try {
    run(m, data[1], text);
  } catch (trace_error const&) {  // a malformed trace: the only failure a reader may report
  }
  return 0;
}
