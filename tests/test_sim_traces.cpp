// Trace readers: every format's valid inputs, malformed inputs (the error names the file and the
// line or record), a seeded random-mutation loop, and format detection.
#include "sim_test_support.hpp"

#include <sim/traces.hpp>

#include <ccht/core/types.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using namespace ccht_sim_test;
namespace sim = ccht::sim;
using keys_t = std::vector<std::uint64_t>;
using sim::trace_format;

constexpr std::uint64_t max_key = ccht::claimed_key - 1;  // 2^64 - 3, the largest usable key

keys_t parse(std::string_view data, trace_format f, sim::csv_options const& csv = {}) {
  return sim::parse_trace(data, f, "mem", csv);
}

/// Expects parse to throw trace_error whose message starts "<name>: <where>: " and contains
/// @p what (when given).
void expect_error(std::string_view data, trace_format f, std::string const& where,
                  std::string const& what = "", sim::csv_options const& csv = {}) {
  std::string const name = "input.x";
  try {
    auto const keys = sim::parse_trace(data, f, name, csv);
    ADD_FAILURE() << "no trace_error for " << ::testing::PrintToString(std::string(data))
                  << " (" << sim::to_string(f) << "): parsed " << keys.size() << " keys";
  } catch (sim::trace_error const& e) {
    std::string const msg = e.what();
    std::string const prefix = name + ": " + where + ": ";
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << "message '" << msg << "' should start with '" << prefix
                                        << "' for " << ::testing::PrintToString(std::string(data));
    if (!what.empty()) {
      EXPECT_NE(msg.find(what), std::string::npos) << "message '" << msg << "' lacks '" << what << "'";
    }
  } catch (std::exception const& e) {
    ADD_FAILURE() << "wrong exception for " << ::testing::PrintToString(std::string(data)) << ": "
                  << e.what();
  }
}

/// One oracleGeneral record: u32 timestamp, u64 id, u32 size, i64 next access (little-endian).
std::string og_record(std::uint64_t id, std::uint32_t ts = 1, std::uint32_t size = 4096,
                      std::int64_t next = -1) {
  std::string r(24, '\0');
  std::memcpy(r.data(), &ts, 4);
  std::memcpy(r.data() + 4, &id, 8);
  std::memcpy(r.data() + 12, &size, 4);
  std::memcpy(r.data() + 16, &next, 8);
  return r;
}

// ---- LIRS and plain ------------------------------------------------------------------------------

TEST(TraceLirs, ValidInputs) {
  EXPECT_EQ(parse("1\n2\n3\n", trace_format::lirs), (keys_t{1, 2, 3}));
  EXPECT_EQ(parse("1\n2\n*\n3\n", trace_format::lirs), (keys_t{1, 2, 3}));
  EXPECT_EQ(parse("*\n*\n5\n*", trace_format::lirs), (keys_t{5}));
  EXPECT_EQ(parse("1\r\n2\r\n*\r\n3\r\n", trace_format::lirs), (keys_t{1, 2, 3}));
  EXPECT_EQ(parse("1\n2\n\n", trace_format::lirs), (keys_t{1, 2}));      // trailing blank line
  EXPECT_EQ(parse("1\r\n2\r\n\r\n", trace_format::lirs), (keys_t{1, 2}));
  EXPECT_EQ(parse("7", trace_format::lirs), (keys_t{7}));                 // no final newline
  EXPECT_EQ(parse(" 8\t\n  9 \n", trace_format::lirs), (keys_t{8, 9}));  // padding
  EXPECT_EQ(parse("0\n18446744073709551613\n", trace_format::lirs), (keys_t{0, max_key}));
  EXPECT_EQ(parse("007\n", trace_format::lirs), (keys_t{7}));
  EXPECT_TRUE(parse("", trace_format::lirs).empty());
  EXPECT_TRUE(parse("\n", trace_format::lirs).empty());
  EXPECT_TRUE(parse("\r\n\r\n", trace_format::lirs).empty());
  EXPECT_TRUE(parse("*\n", trace_format::lirs).empty());
  EXPECT_EQ(parse("4\n5\n", trace_format::plain), (keys_t{4, 5}));
  EXPECT_EQ(parse("4\r\n5\r\n\r\n", trace_format::plain), (keys_t{4, 5}));
}

TEST(TraceLirs, MalformedInputsNameTheLine) {
  for (auto f : {trace_format::lirs, trace_format::plain}) {
    SCOPED_TRACE(std::string(sim::to_string(f)));
    expect_error("1\n2\n\n3\n", f, "line 3", "blank line");
    expect_error("1\n \t\n2\n", f, "line 2", "blank line");
    expect_error("\n1\n", f, "line 1", "blank line");
    expect_error("1\r\n\r\n2\r\n", f, "line 2", "blank line");
    expect_error("1\n-5\n", f, "line 2");
    expect_error("1\n2\n18446744073709551616\n", f, "line 3", "64 bits");
    expect_error("99999999999999999999999999999\n", f, "line 1", "64 bits");
    expect_error("3\n18446744073709551615\n", f, "line 2", "reserved");
    expect_error("3\n4\n18446744073709551614\n", f, "line 3", "reserved");
    expect_error("1\nabc\n", f, "line 2");
    expect_error("1 2\n", f, "line 1");
    expect_error("12a\n", f, "line 1");
    expect_error("+5\n", f, "line 1");
    expect_error("0x10\n", f, "line 1");
    expect_error("1.5\n", f, "line 1");
    expect_error(std::string("1\n\xff\xfe\x00\x01\n", 7), f, "line 2");
    expect_error("1\n**\n", f, "line 2");
  }
  expect_error("1\n*\n2\n", trace_format::plain, "line 2");  // markers are LIRS only
}

TEST(TraceLirs, RandomValidFilesRoundTrip) {
  std::mt19937_64 rng(99);
  for (int iter = 0; iter < 200; ++iter) {
    keys_t want;
    std::string text;
    bool const crlf = rng() % 2;
    int const n = static_cast<int>(rng() % 50);
    for (int i = 0; i < n; ++i) {
      if (rng() % 8 == 0) { text += "*"; text += crlf ? "\r\n" : "\n"; }
      std::uint64_t k = rng() % 3 == 0 ? rng() % 100 : rng();
      if (ccht::is_reserved_key(k)) { k = max_key; }
      want.push_back(k);
      if (rng() % 5 == 0) { text += ' '; }
      text += std::to_string(k);
      text += crlf ? "\r\n" : "\n";
    }
    if (rng() % 2) { text += crlf ? "\r\n" : "\n"; }
    ASSERT_EQ(parse(text, trace_format::lirs), want) << text;
  }
}

// ---- Mooncake JSONL ------------------------------------------------------------------------------

TEST(TraceMooncake, ValidInputs) {
  std::string const two =
      R"({"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1, 2]})"
      "\n"
      R"({"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [2, 3]})"
      "\n";
  EXPECT_EQ(parse(two, trace_format::mooncake), (keys_t{0, 1, 2, 2, 3}));
  EXPECT_EQ(parse(two + "\n", trace_format::mooncake), (keys_t{0, 1, 2, 2, 3}));
  EXPECT_EQ(parse(R"({"hash_ids": [9]})" "\r\n" R"({"hash_ids": []})" "\r\n",
                  trace_format::mooncake),
            (keys_t{9}));
  EXPECT_EQ(parse(R"(  {"hash_ids":[18446744073709551613], "extra": {"a": [1]}}  )",
                  trace_format::mooncake),
            (keys_t{max_key}));
  EXPECT_TRUE(parse("", trace_format::mooncake).empty());
  EXPECT_TRUE(parse("\n", trace_format::mooncake).empty());
}

TEST(TraceMooncake, MalformedInputsNameTheLine) {
  std::string const ok = R"({"timestamp": 0, "hash_ids": [1, 2]})" "\n";
  auto const f = trace_format::mooncake;
  expect_error(ok + R"({"timestamp": 7, "hash_ids": [4, 5)", f, "line 2", "JSON");  // cut
  expect_error(ok + ok + R"({"timestamp": 7, "hash)" "\n", f, "line 3");
  expect_error(ok + "\n" + ok, f, "line 2", "blank line");
  expect_error("[1, 2]\n", f, "line 1", "hash_ids");
  expect_error(ok + R"({"timestamp": 1})" "\n", f, "line 2", "hash_ids");
  expect_error(R"({"hash_ids": 5})", f, "line 1", "hash_ids");
  expect_error(R"({"hash_ids": "1,2"})", f, "line 1", "hash_ids");
  expect_error(R"({"hash_ids": [1, -1]})", f, "line 1", "non-negative");
  expect_error(R"({"hash_ids": [1.5]})", f, "line 1", "non-negative");
  expect_error(R"({"hash_ids": ["7"]})", f, "line 1", "non-negative");
  expect_error(R"({"hash_ids": [null]})", f, "line 1", "non-negative");
  expect_error(R"({"hash_ids": [18446744073709551616]})", f, "line 1");
  // A number too large even for a double: nlohmann throws out_of_range, not parse_error.
  expect_error(ok + R"({"hash_ids": [1e400]})", f, "line 2");
  expect_error(R"({"timestamp": -1e999, "hash_ids": [1]})", f, "line 1");
  expect_error(R"({"hash_ids": [18446744073709551615]})", f, "line 1", "reserved");
  expect_error(ok + R"({"hash_ids": [3, 18446744073709551614]})", f, "line 2", "reserved");
  expect_error(R"({"hash_ids": [1]} {"hash_ids": [2]})", f, "line 1");
  expect_error(ok + std::string("\x00\x01\xff", 3), f, "line 2");
  expect_error("12\n", f, "line 1");
}

TEST(TraceMooncake, RequestsKeepTheirBoundaries) {
  // parse_mooncake_requests (the KV replay's reader): one vector per line, repeats and empty
  // requests kept; its concatenation is the flat key stream; errors name the line the same way.
  std::string const text = R"({"hash_ids": [0, 1, 2]})" "\n" R"({"hash_ids": []})" "\r\n"
                           R"({"timestamp": 5, "hash_ids": [2, 3, 2]})" "\n\n";
  auto const reqs = sim::parse_mooncake_requests(text, "mem");
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0], (keys_t{0, 1, 2}));
  EXPECT_TRUE(reqs[1].empty());
  EXPECT_EQ(reqs[2], (keys_t{2, 3, 2}));
  keys_t flat;
  for (auto const& r : reqs) { flat.insert(flat.end(), r.begin(), r.end()); }
  EXPECT_EQ(flat, parse(text, trace_format::mooncake));
  try {
    sim::parse_mooncake_requests(text.substr(0, text.size() - 1) + "{\"hash_ids\": [1, x]}\n",
                                 "input.jsonl");
    ADD_FAILURE() << "no trace_error for a bad line 4";
  } catch (sim::trace_error const& e) {
    EXPECT_EQ(std::string(e.what()).rfind("input.jsonl: line 4: ", 0), 0u) << e.what();
  }
}

// ---- csv -----------------------------------------------------------------------------------------

sim::csv_options csv(int column, char delim = ',', bool header = false, bool hash = false) {
  sim::csv_options o;
  o.key_column = column;
  o.delimiter = delim;
  o.has_header = header;
  o.hash_strings = hash;
  return o;
}

TEST(TraceCsv, ValidInputs) {
  auto const f = trace_format::csv;
  EXPECT_EQ(parse("1,a\n2,b\n", f), (keys_t{1, 2}));
  EXPECT_EQ(parse("ts,id,size\n0,10,5\n1,11,5\n", f, csv(2, ',', true)), (keys_t{10, 11}));
  EXPECT_EQ(parse("a;5\nb;6", f, csv(2, ';')), (keys_t{5, 6}));
  EXPECT_EQ(parse("a\t5\tx\nb\t6\ty\n", f, csv(2, '\t')), (keys_t{5, 6}));
  EXPECT_EQ(parse("\"12\",x\n 13 ,y\n", f, csv(1)), (keys_t{12, 13}));
  EXPECT_EQ(parse("1,2\r\n3,4\r\n\r\n", f, csv(2)), (keys_t{2, 4}));  // CRLF, last column
  EXPECT_EQ(parse("1,2,3", f, csv(3)), (keys_t{3}));
  EXPECT_EQ(parse("x,18446744073709551613\n", f, csv(2)), (keys_t{max_key}));
  EXPECT_TRUE(parse("", f, csv(2)).empty());
  EXPECT_TRUE(parse("id,size\n", f, csv(1, ',', true)).empty());  // header only
  EXPECT_TRUE(parse("id,size\r\n\r\n", f, csv(1, ',', true)).empty());
}

TEST(TraceCsv, HashStrings) {
  auto const keys = parse("abc,1\nabd,2\nabc,3\n5,4\n\"abc\",5\n", trace_format::csv,
                          csv(1, ',', false, true));
  ASSERT_EQ(keys.size(), 5u);
  EXPECT_EQ(keys[0], keys[2]);
  EXPECT_EQ(keys[0], keys[4]);  // quotes are not part of the id
  EXPECT_NE(keys[0], keys[1]);
  EXPECT_EQ(keys[3], 5u);       // numeric ids stay numbers
  for (auto k : keys) { EXPECT_FALSE(ccht::is_reserved_key(k)); }
  // Many distinct strings: no reserved key, few collisions.
  std::string text;
  for (int i = 0; i < 5000; ++i) { text += "obj-" + std::to_string(i) + "\n"; }
  auto const many = parse(text, trace_format::csv, csv(1, ',', false, true));
  std::unordered_map<std::uint64_t, int> seen;
  for (auto k : many) {
    ASSERT_FALSE(ccht::is_reserved_key(k));
    ++seen[k];
  }
  EXPECT_EQ(seen.size(), 5000u);
  // Same input, same keys (the hash is fixed, not seeded per run).
  EXPECT_EQ(parse(text, trace_format::csv, csv(1, ',', false, true)), many);
}

TEST(TraceCsv, MalformedInputsNameTheLine) {
  auto const f = trace_format::csv;
  expect_error("1,2,3\n4,5\n", f, "line 2", "columns", csv(3));
  expect_error("h1,h2\n1,2\n3\n", f, "line 3", "columns", csv(2, ',', true));
  expect_error("1;2\n", f, "line 1", "columns", csv(2));  // wrong delimiter
  expect_error("abc,1\n", f, "line 1", "", csv(1));      // non-numeric without hashing
  expect_error("1,\n", f, "line 1", "", csv(2));          // empty field
  expect_error("1,\n", f, "line 1", "", csv(2, ',', false, true));
  expect_error("1\n-3\n", f, "line 2", "", csv(1));
  expect_error("18446744073709551616\n", f, "line 1", "64 bits", csv(1));
  expect_error("18446744073709551616\n", f, "line 1", "64 bits", csv(1, ',', false, true));
  expect_error("x,18446744073709551615\n", f, "line 1", "reserved", csv(2));
  expect_error("x,18446744073709551614\n", f, "line 1", "reserved", csv(2));
  expect_error("1,1\n\n2,2\n", f, "line 2", "blank line", csv(1));
  for (int bad : {0, -1}) {
    EXPECT_THROW(parse("1\n", f, csv(bad)), std::invalid_argument) << bad;
  }
}

// ---- oracleGeneral binary ------------------------------------------------------------------------

TEST(TraceOracleGeneral, ValidInputs) {
  auto const f = trace_format::oracle_general;
  std::string const data = og_record(10) + og_record(0, 2, 1, 5) + og_record(max_key, 3);
  EXPECT_EQ(parse(data, f), (keys_t{10, 0, max_key}));
  EXPECT_TRUE(parse("", f).empty());
}

TEST(TraceOracleGeneral, MalformedInputsNameTheRecord) {
  auto const f = trace_format::oracle_general;
  std::string const two = og_record(1) + og_record(2);
  expect_error(two + og_record(3).substr(0, 10), f, "record 3", "truncated");  // cut mid-record
  expect_error(og_record(3).substr(0, 23), f, "record 1", "truncated");
  expect_error(std::string("x"), f, "record 1", "truncated");
  expect_error(two + og_record(ccht::empty_key), f, "record 3", "reserved");
  expect_error(og_record(ccht::claimed_key) + two, f, "record 1", "reserved");
}

// ---- ARC .lis ------------------------------------------------------------------------------------

TEST(TraceArc, ValidInputs) {
  auto const f = trace_format::arc;
  EXPECT_EQ(parse("0 3 0 0\n10 2 0 1\n", f), (keys_t{0, 1, 2, 10, 11}));
  EXPECT_EQ(parse("  5\t1  0\t 2 \r\n7 1 0 3\r\n\r\n", f), (keys_t{5, 7}));
  EXPECT_EQ(parse("18446744073709551612 2 0 0\n", f), (keys_t{max_key - 1, max_key}));
  EXPECT_TRUE(parse("", f).empty());
}

TEST(TraceArc, MalformedInputsNameTheLine) {
  auto const f = trace_format::arc;
  expect_error("0 1 0 0\n1 2 3\n", f, "line 2", "got 3");
  expect_error("1 2 3 4 5\n", f, "line 1", "got more");
  expect_error("7\n", f, "line 1", "got 1");
  expect_error("0 1 0 0\n0 1 0 0\n5 0 0 0\n", f, "line 3", "at least 1");
  expect_error("18446744073709551613 2 0 0\n", f, "line 1", "key space");  // last key reserved
  expect_error("18446744073709551000 1000 0 0\n", f, "line 1", "key space");
  expect_error("100 18446744073709551000 0 0\n", f, "line 1", "key space");  // wraps
  expect_error("0 2147483649 0 0\n", f, "line 1");  // more than max_trace_requests, no allocation
  expect_error("0 -1 0 0\n", f, "line 1");
  expect_error("0 99999999999999999999 0 0\n", f, "line 1", "64 bits");
  expect_error("18446744073709551615 1 0 0\n", f, "line 1", "reserved");
  expect_error("a b c d\n", f, "line 1");
  expect_error("0 1 0 0\n\n0 1 0 0\n", f, "line 2", "blank line");
  expect_error("0,1,0,0\n", f, "line 1");
}

// ---- random mutations ----------------------------------------------------------------------------

/// Applies 1-4 random byte edits (bit flip, random byte, insert, delete, truncate, duplicate).
std::string mutate(std::string s, std::mt19937_64& rng) {
  int const edits = 1 + static_cast<int>(rng() % 4);
  char const interesting[] = {'\n', '\r', ' ', '\t', ',', '*', '-', '0', '9', '{', '}', '[', ']',
                              '"', ':', '\0', '\xff'};
  for (int e = 0; e < edits; ++e) {
    std::size_t const pos = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 7) {
      case 0:
        if (!s.empty()) { s[pos] = static_cast<char>(s[pos] ^ (1 << (rng() % 8))); }
        break;
      case 1:
        if (!s.empty()) { s[pos] = static_cast<char>(rng()); }
        break;
      case 2: s.insert(s.begin() + static_cast<std::ptrdiff_t>(pos), static_cast<char>(rng())); break;
      case 3:
        s.insert(s.begin() + static_cast<std::ptrdiff_t>(pos),
                 interesting[rng() % sizeof(interesting)]);
        break;
      case 4:
        if (!s.empty()) { s.erase(pos, 1 + rng() % 3); }
        break;
      case 5: s.resize(pos); break;
      case 6:
        if (!s.empty()) { s.insert(pos, s.substr(rng() % s.size(), 1 + rng() % 8)); }
        break;
    }
  }
  return s;
}

struct fuzz_case {
  trace_format f;
  std::string seed_input;
  sim::csv_options csv;
};

TEST(TraceFuzz, MutatedInputsParseOrThrowTraceError) {
  std::string og;
  for (std::uint64_t i = 0; i < 6; ++i) { og += og_record(i * 1000 + 7, std::uint32_t(i)); }
  std::vector<fuzz_case> const cases{
      {trace_format::lirs, "1\n22\n*\n333\r\n4444\n18446744073709551613\n\n", {}},
      {trace_format::plain, "5\n6\n7\n", {}},
      {trace_format::mooncake,
       R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1, 2, 3]})" "\n"
       R"({"timestamp": 9, "hash_ids": [3, 18446744073709551613]})" "\r\n",
       {}},
      {trace_format::csv, "ts,id,size\n0,10,5\n1,\"11\",5\r\n2,obj,1\n", csv(2, ',', true, true)},
      {trace_format::csv, "0;10\n1;11\n", csv(2, ';')},
      {trace_format::oracle_general, og, {}},
      {trace_format::arc, "0 3 0 0\n10 2 0 1\r\n12 1 0 2\n", {}},
  };
  std::mt19937_64 rng(20240601);
  std::size_t parsed = 0, rejected = 0;
  for (auto const& c : cases) {
    ASSERT_NO_THROW(sim::parse_trace(c.seed_input, c.f, "seed", c.csv)) << sim::to_string(c.f);
    for (int iter = 0; iter < 3000; ++iter) {
      std::string const input = mutate(c.seed_input, rng);
      try {
        auto const keys = sim::parse_trace(input, c.f, "fuzz", c.csv);
        ++parsed;
        for (auto k : keys) {
          ASSERT_FALSE(ccht::is_reserved_key(k))
              << sim::to_string(c.f) << " returned a reserved key for "
              << ::testing::PrintToString(input);
        }
        ASSERT_LE(keys.size(), 20000u) << ::testing::PrintToString(input);
      } catch (sim::trace_error const& e) {
        ++rejected;
        ASSERT_EQ(std::string(e.what()).rfind("fuzz: ", 0), 0u) << e.what();
      } catch (std::invalid_argument const&) {
        ++rejected;
      } catch (std::exception const& e) {
        FAIL() << sim::to_string(c.f) << ": unexpected " << typeid(e).name() << " '" << e.what()
               << "' for " << ::testing::PrintToString(input);
      } catch (...) {
        FAIL() << sim::to_string(c.f) << ": non-standard exception for "
               << ::testing::PrintToString(input);
      }
    }
  }
  // Both outcomes occur, so the loop exercised the readers rather than one early exit.
  EXPECT_GT(parsed, 1000u);
  EXPECT_GT(rejected, 1000u);
}

TEST(TraceFuzz, MutatedFilesThroughAutoDetection) {
  temp_dir dir;
  std::vector<std::string> const seeds{
      "1\n2\n3\n", R"({"hash_ids": [1, 2]})" "\n", "1,2\n3,4\n", "0 2 0 0\n", og_record(5) + og_record(6)};
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    std::string const input = mutate(seeds[iter % seeds.size()], rng);
    std::string const path = dir.write(std::string("t").append(std::to_string(iter)), input);  // no extension
    try {
      sim::trace const t = sim::read_trace(path);
      EXPECT_NE(t.format, trace_format::auto_detect);
      EXPECT_FALSE(t.format_reason.empty());
    } catch (sim::trace_error const& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    } catch (std::invalid_argument const&) {
    } catch (std::exception const& e) {
      ADD_FAILURE() << "unexpected exception '" << e.what() << "' for "
                    << ::testing::PrintToString(input);
    }
  }
}

// ---- files and detection -------------------------------------------------------------------------

TEST(TraceFiles, ReadTraceNamesTheFileInErrors) {
  temp_dir dir;
  std::string const bad = dir.write("bad.trace", "1\n2\nthree\n");
  try {
    sim::read_trace(bad);
    ADD_FAILURE() << "no throw";
  } catch (sim::trace_error const& e) {
    EXPECT_EQ(std::string(e.what()).rfind(bad + ": line 3: ", 0), 0u) << e.what();
  }
  std::string const cut = dir.write("cut.bin", og_record(1) + og_record(2).substr(0, 5));
  try {
    sim::read_trace(cut);
    ADD_FAILURE() << "no throw";
  } catch (sim::trace_error const& e) {
    EXPECT_EQ(std::string(e.what()).rfind(cut + ": record 2: ", 0), 0u) << e.what();
  }
  std::string const empty = dir.write("empty.trace", "");
  sim::trace const t = sim::read_trace(empty);
  EXPECT_TRUE(t.keys.empty());
  EXPECT_EQ(t.path, empty);
  EXPECT_EQ(t.format, trace_format::lirs);
  for (auto f : {trace_format::mooncake, trace_format::csv, trace_format::oracle_general,
                 trace_format::arc, trace_format::plain}) {
    EXPECT_TRUE(sim::read_trace(empty, f).keys.empty()) << sim::to_string(f);
  }
  // Given format: no reason; the format wins over the extension.
  sim::trace const given = sim::read_trace(dir.write("x.trace", "0 2 0 0\n"), trace_format::arc);
  EXPECT_EQ(given.keys, (keys_t{0, 1}));
  EXPECT_TRUE(given.format_reason.empty());
  EXPECT_THROW(sim::read_trace((dir.path() / "missing.trace").string()), std::runtime_error);
  EXPECT_THROW(sim::read_trace((dir.path() / "missing").string()), std::runtime_error);
  EXPECT_THROW(sim::parse_trace("1\n", trace_format::auto_detect, "x"), std::invalid_argument);
}

TEST(TraceFiles, DetectByExtension) {
  temp_dir dir;
  struct ext_case {
    char const* name;
    trace_format f;
  };
  // The content is deliberately of another kind: the extension decides.
  for (auto const& c : {ext_case{"a.jsonl", trace_format::mooncake},
                        ext_case{"a.json", trace_format::mooncake},
                        ext_case{"a.lis", trace_format::arc}, ext_case{"a.csv", trace_format::csv},
                        ext_case{"a.oracleGeneral", trace_format::oracle_general},
                        ext_case{"a.bin", trace_format::oracle_general},
                        ext_case{"a.trace", trace_format::lirs},
                        ext_case{"a.txt", trace_format::plain}}) {
    std::string const p = dir.write(c.name, "{\"x\": 1, \"y\": 2}\n");
    std::string reason;
    EXPECT_EQ(sim::detect_trace_format(p, reason), c.f) << c.name;
    EXPECT_NE(reason.find("extension"), std::string::npos) << c.name << ": " << reason;
  }
}

TEST(TraceFiles, DetectByContent) {
  temp_dir dir;
  struct content_case {
    std::string data;
    trace_format f;
  };
  std::vector<content_case> const cases{
      {og_record(5) + og_record(6), trace_format::oracle_general},
      {R"({"timestamp": 1, "hash_ids": [1]})" "\n", trace_format::mooncake},
      {"  {\"hash_ids\": [1]}\r\n", trace_format::mooncake},
      {"1,2,3\n4,5,6\n", trace_format::csv},
      {"0 3 0 0\n", trace_format::arc},
      {"0\t3\t0\t0\r\n", trace_format::arc},
      {"1\n2\n", trace_format::lirs},
      {"1\r\n2\r\n", trace_format::lirs},
      {"*\n1\n", trace_format::lirs},
      {"1 \r\n2\r\n", trace_format::lirs},  // trailing space before CRLF is still one field
      {"", trace_format::lirs},
  };
  int i = 0;
  for (auto const& c : cases) {
    std::string const p = dir.write("noext" + std::to_string(i++), c.data);
    std::string reason;
    EXPECT_EQ(sim::detect_trace_format(p, reason), c.f)
        << ::testing::PrintToString(c.data) << " detected because: " << reason;
    EXPECT_FALSE(reason.empty());
    // Whatever is detected must also read.
    EXPECT_NO_THROW(sim::read_trace(p)) << ::testing::PrintToString(c.data);
  }
  std::string reason;
  EXPECT_THROW(sim::detect_trace_format((dir.path() / "absent").string(), reason),
               std::runtime_error);
  // An unknown extension falls back to the content.
  std::string const gz = dir.write("t.unknown", "0 1 0 0\n");
  EXPECT_EQ(sim::detect_trace_format(gz, reason), trace_format::arc);
}

TEST(TraceFiles, FormatNamesRoundTrip) {
  for (auto f : {trace_format::auto_detect, trace_format::lirs, trace_format::mooncake,
                 trace_format::plain, trace_format::csv, trace_format::oracle_general,
                 trace_format::arc}) {
    EXPECT_EQ(sim::parse_trace_format(sim::to_string(f)), f);
  }
  EXPECT_EQ(sim::parse_trace_format("oracle-general"), trace_format::oracle_general);
  EXPECT_THROW(sim::parse_trace_format("LIRS"), std::invalid_argument);
  EXPECT_THROW(sim::parse_trace_format(""), std::invalid_argument);
}

}  // namespace
