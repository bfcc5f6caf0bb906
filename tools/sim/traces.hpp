/**
 * @file traces.hpp
 * @brief Cache trace readers: LIRS, Mooncake JSONL, libCacheSim plain text / csv /
 *        oracleGeneral binary, and ARC `.lis`.
 *
 * A reader loads the whole file before returning, so a malformed file is never replayed in part:
 * the first problem throws ccht::sim::trace_error naming the file, the line (or record) and what
 * was expected.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ccht::sim {

/// Trace file formats.
enum class trace_format {
  auto_detect,     ///< guess from extension and content
  lirs,            ///< one non-negative integer a line; `*` lines are markers
  mooncake,        ///< JSON Lines; each object's `hash_ids` in order
  plain,           ///< libCacheSim plain text: one integer id a line
  csv,             ///< libCacheSim csv: the key in a chosen column
  oracle_general,  ///< libCacheSim oracleGeneral: 24-byte little-endian records
  arc,             ///< ARC `.lis`: `start count ignored seq`, expanded to count keys
};

/// Name of a format as the CLI spells it ("lirs", "mooncake", ...).
std::string_view to_string(trace_format f) noexcept;
/// Parses a CLI format name; throws std::invalid_argument for an unknown one.
trace_format parse_trace_format(std::string_view name);

/// Options of the csv reader.
struct csv_options {
  int key_column = 1;      ///< 1-based column holding the object id
  char delimiter = ',';    ///< field separator
  bool has_header = false; ///< skip the first line
  bool hash_strings = false; ///< hash non-numeric ids instead of rejecting them
};

/// A malformed trace: where and what was expected.
class trace_error : public std::runtime_error {
 public:
  /// @p where is "line N" or "record N".
  trace_error(std::string const& file, std::string const& where, std::string const& what)
      : std::runtime_error(file + ": " + where + ": " + what) {}
};

/// A loaded trace.
struct trace {
  std::string path;                 ///< file read
  trace_format format;              ///< format used (never auto_detect)
  std::string format_reason;        ///< why auto-detection chose it (empty when given)
  std::vector<std::uint64_t> keys;  ///< the request stream
};

/**
 * @brief Guesses the format of @p path from its extension, then its first bytes.
 * @param reason set to a one-line explanation of the choice
 */
trace_format detect_trace_format(std::string const& path, std::string& reason);

/**
 * @brief The same guess from a name (its extension) and the file's first bytes @p head (the
 *        first 4 KiB are looked at), for a trace that is not a file.
 */
trace_format detect_trace_format(std::string_view name, std::string_view head, std::string& reason);

/// Upper bound on requests one trace may expand to (2^28 keys = 2 GiB): an ARC line's count could
/// otherwise ask for any amount of memory before anything fails.
inline constexpr std::size_t max_trace_requests = std::size_t{1} << 28;

/// Parses trace text (or bytes) already in memory; @p name is used in error messages. A trace
/// that expands to more than @p max_requests requests (Mooncake ids, ARC blocks, oracleGeneral
/// records) is a trace_error.
std::vector<std::uint64_t> parse_trace(std::string_view data, trace_format format,
                                       std::string const& name, csv_options const& csv = {},
                                       std::size_t max_requests = max_trace_requests);

/// Reads a whole trace file. Throws trace_error (malformed) or std::runtime_error (I/O).
trace read_trace(std::string const& path, trace_format format = trace_format::auto_detect,
                 csv_options const& csv = {});

/// Parses a Mooncake JSONL trace keeping request boundaries: one vector of `hash_ids` per line
/// (in file order, duplicates kept). Throws trace_error naming @p name and the line, like
/// parse_trace(data, trace_format::mooncake, name).
std::vector<std::vector<std::uint64_t>> parse_mooncake_requests(
    std::string_view data, std::string const& name, std::size_t max_requests = max_trace_requests);

/// Reads a whole Mooncake JSONL file as requests (see parse_mooncake_requests). Throws
/// trace_error (malformed) or std::runtime_error (I/O).
std::vector<std::vector<std::uint64_t>> read_mooncake_requests(std::string const& path);

}  // namespace ccht::sim
