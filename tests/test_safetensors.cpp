// The safetensors reader: files written by the real `safetensors` Python package (every dtype it
// writes; tests/weights/write_fixtures.py, run at build time when the project's .venv exists),
// every malformed case with its message, and fuzzing by truncation, byte flips and random bytes.
#include <ccht/cache/safetensors.hpp>
#include <ccht/error.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#ifndef CCHT_ST_FIXTURES_DIR
#define CCHT_ST_FIXTURES_DIR ""
#endif

namespace {

std::vector<std::byte> with_header(std::string const& json, std::size_t data_bytes,
                                   std::uint64_t declared = UINT64_MAX) {
  std::uint64_t const n = declared == UINT64_MAX ? json.size() : declared;
  std::vector<std::byte> f(8 + json.size() + data_bytes, std::byte{0x5a});
  for (int i = 0; i < 8; ++i) { f[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff); }
  std::memcpy(f.data() + 8, json.data(), json.size());
  return f;
}

/// The error message parsing @p f gives ("" when it parses).
std::string error_of(std::vector<std::byte> const& f) {
  try {
    ccht::parse_safetensors("model.safetensors", f, f.size());
  } catch (ccht::error const& e) {
    EXPECT_EQ(e.code(), ccht::error_code::invalid_argument);
    return e.what();
  }
  return "";
}

std::string const good =
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
    R"("b":{"dtype":"I64","shape":[1],"data_offsets":[16,24]}})";

TEST(Safetensors, ParsesAValidHeader) {
  auto const h = ccht::parse_safetensors("m", with_header(good, 24), 8 + good.size() + 24);
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[0].dtype, ccht::st_dtype::F32);
  EXPECT_EQ(h.tensors[0].shape, (std::vector<std::uint64_t>{2, 2}));
  EXPECT_EQ(h.tensors[1].begin, 16u);
  EXPECT_EQ(h.data_offset, 8 + good.size());
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.find("b")->bytes(), 8u);
  EXPECT_EQ(h.find("c"), nullptr);
}

struct bad_case {
  char const* what;
  std::string json;
  std::size_t data;
  char const* message;  // a part of the expected message
};

TEST(Safetensors, EveryMalformedCaseHasItsMessage) {
  std::vector<bad_case> const cases = {
      {"not json", "{\"a\": [", 0, "not valid JSON"},
      {"not an object", "[1,2]", 0, "not a JSON object"},
      {"entry not an object", R"({"a":3})", 0, "tensor 'a': entry is not a JSON object"},
      {"unknown dtype", R"({"a":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", 1,
       "tensor 'a': unknown dtype 'F7'"},
      {"missing dtype", R"({"a":{"shape":[1],"data_offsets":[0,1]}})", 1, "'dtype' is missing"},
      {"unknown field", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}})", 1,
       "unknown field 'x'"},
      {"negative dim", R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1,
       "not a non-negative integer"},
      {"float dim", R"({"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", 1,
       "not a non-negative integer"},
      {"three offsets", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 1,
       "'data_offsets' is missing or not two"},
      {"reversed offsets", R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", 4,
       "end before they begin"},
      {"size mismatch", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "tensor 'a': shape [3] of F32 is 12 bytes, but data_offsets [0, 8] span 8"},
      {"shape overflow",
       R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8,
       "overflows"},
      {"out of range", R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})", 8,
       "tensor 'a': data_offsets [0, 16] are out of range"},
      {"overlap",
       R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
       12, "tensor 'b': data_offsets [4, 12] overlap tensor 'a'"},
      {"gap",
       R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})",
       12, "leaving a gap"},
      {"trailing bytes", R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 9,
       "truncated or trailing bytes"},
      {"repeated name",
       R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
       4, "tensor 'a': the name appears twice"},
      {"bad metadata", R"({"__metadata__":{"k":1}})", 0, "'__metadata__' entry 'k' is not a string"},
      {"invalid utf-8", "{\"\xff\":1}", 0, "not valid JSON"},
  };
  for (auto const& c : cases) {
    std::string const msg = error_of(with_header(c.json, c.data));
    EXPECT_NE(msg.find("model.safetensors: "), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find(c.message), std::string::npos) << c.what << ": '" << msg << "'";
  }
  EXPECT_NE(error_of(std::vector<std::byte>(5)).find("shorter than the 8-byte header length"),
            std::string::npos);
  EXPECT_NE(error_of(with_header(good, 24, 1u << 20)).find("runs past the end of the file"),
            std::string::npos);
  EXPECT_NE(error_of(with_header(good, 24, 200'000'000)).find("exceeds the limit"),
            std::string::npos);
}

TEST(Safetensors, TruncationsAndRandomBytesNeverCrash) {
  auto const f = with_header(good, 24);
  for (std::size_t len = 0; len < f.size(); ++len) {
    std::vector<std::byte> t(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(len));
    EXPECT_FALSE(error_of(t).empty()) << "a file truncated to " << len << " bytes parsed";
  }
  std::mt19937_64 rng(11);
  std::size_t parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    auto m = f;
    int const flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) { m[rng() % m.size()] = static_cast<std::byte>(rng()); }
    try {
      auto const h = ccht::parse_safetensors("m", m, m.size());
      ++parsed;  // a flip in the data, or a harmless one: the result must still be consistent
      std::uint64_t at = 0;
      for (auto const& t : h.tensors) {
        EXPECT_EQ(t.begin, at);
        at = t.end;
      }
      EXPECT_EQ(at, h.data_bytes);
    } catch (ccht::error const&) {
    }
  }
  EXPECT_GT(parsed, 0u);
  for (int i = 0; i < 500; ++i) {
    std::vector<std::byte> r(rng() % 64);
    for (auto& b : r) { b = static_cast<std::byte>(rng()); }
    if (r.size() >= 8) { r[1] = r[2] = r[3] = r[4] = r[5] = r[6] = r[7] = std::byte{0}; }
    try {
      ccht::parse_safetensors("r", r, r.size());
    } catch (ccht::error const&) {
    }
  }
}

// A shape element nested 200k lists deep made the error message's json::dump() recurse until
// the stack overflowed (a crash, not an error; found while writing fuzz/safetensors.cpp). A
// header nests 3 levels at most, so deeper ones are refused before the DOM is even built.
TEST(Safetensors, DeepNestingIsAnErrorNotAStackOverflow) {
  std::size_t const depth = 200'000;
  std::string const deep = R"({"a":{"dtype":"U8","shape":[)" + std::string(depth, '[') +
                           std::string(depth, ']') + R"(],"data_offsets":[0,1]}})";
  std::string msg = error_of(with_header(deep, 1));
  EXPECT_NE(msg.find("the header nests lists and objects 200003 deep; a safetensors header has at "
                     "most 3 levels"),
            std::string::npos)
      << msg.substr(0, 300);
  msg = error_of(with_header(R"({"a":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}})", 1));
  EXPECT_NE(msg.find("nests lists and objects 4 deep"), std::string::npos) << msg;
  // Brackets inside names and strings are text, not nesting.
  std::string const names = R"({"[[[{{":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                            R"("__metadata__":{"k":"]]\"[[[["}})";
  EXPECT_EQ(error_of(with_header(names, 1)), "");
  // A long scalar is cut in the message.
  msg = error_of(with_header(R"({"a":{"dtype":"U8","shape":[")" + std::string(100000, 'x') +
                             R"("],"data_offsets":[0,1]}})", 1));
  EXPECT_NE(msg.find("'shape' holds \"xxx"), std::string::npos) << msg.substr(0, 300);
  EXPECT_LT(msg.size(), 300u);
}

/// A header of @p n one-byte U8 tensors named t0000000, t0000001, ... in file order.
std::string many_tensors(std::size_t n) {
  std::string json = "{";
  char name[16];
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(name, sizeof name, "t%07zu", i);
    json += (i ? ",\"" : "\"") + std::string(name) + R"(":{"dtype":"U8","shape":[1],"data_offsets":[)" +
            std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  }
  return json + "}";
}

// The header parse is O(n log n) in the tensors: 200k of them took minutes when nlohmann's parser
// callback found repeated names (it rescans the object per entry). No clock here: ctest's TIMEOUT
// of this test (60 s, tests/CMakeLists.txt) is what a quadratic parse runs into.
TEST(SafetensorsScale, TwoHundredThousandTensors) {
  std::size_t const n = 200'000;
  std::string json = many_tensors(n);
  auto const h = ccht::parse_safetensors("big", with_header(json, n), 8 + json.size() + n);
  ASSERT_EQ(h.tensors.size(), n);
  for (std::size_t i = 0; i < n; i += 997) {
    EXPECT_EQ(h.tensors[i].begin, i);
    EXPECT_EQ(h.tensors[i].bytes(), 1u);
  }
  EXPECT_EQ(h.tensors.back().name, "t0199999");

  // One repeated name among 200k is still named: the last tensor takes the name of tensor 123456.
  auto const last = json.rfind("\"t0199999\"");
  ASSERT_NE(last, std::string::npos);
  json.replace(last, 10, "\"t0123456\"");
  std::string const msg = error_of(with_header(json, n));
  EXPECT_NE(msg.find("tensor 't0123456': the name appears twice"), std::string::npos) << msg;
}

TEST(Safetensors, Crc32IsZlibs) {
  std::string const s = "123456789";
  EXPECT_EQ(ccht::crc32(std::as_bytes(std::span(s.data(), s.size()))), 0xCBF43926u);
  EXPECT_EQ(ccht::crc32({}), 0u);
}

TEST(Safetensors, WriterRoundTrips) {
  auto const dir = std::filesystem::temp_directory_path() / "ccht-st-writer";
  std::filesystem::create_directories(dir);
  std::string const p = (dir / "w.safetensors").string();
  std::vector<std::byte> a(24, std::byte{1}), b(3, std::byte{2});
  std::vector<ccht::st_tensor_data> ts = {{"a", ccht::st_dtype::F64, {3}, a},
                                          {"b", ccht::st_dtype::U8, {3, 1}, b}};
  ccht::write_safetensors(p, ts, {{"k", "v"}});
  auto const h = ccht::read_safetensors(p);
  EXPECT_EQ(h.data_offset % 8, 0u);
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.find("b")->shape, (std::vector<std::uint64_t>{3, 1}));
  EXPECT_EQ(h.metadata.at("k"), "v");
  std::vector<ccht::st_tensor_data> wrong = {{"a", ccht::st_dtype::F32, {3}, a}};
  EXPECT_THROW(ccht::write_safetensors(p, wrong), ccht::error);
  std::filesystem::remove_all(dir);
}

// Files written by the safetensors package: names, dtypes, shapes and offsets as it wrote them, and
// each tensor's CRC-32 as Python's zlib computed it from the arrays.
TEST(Safetensors, ReadsFilesTheSafetensorsPackageWrote) {
  std::filesystem::path const dir = CCHT_ST_FIXTURES_DIR;
  if (dir.empty() || !std::filesystem::exists(dir / "manifest.json")) {
    GTEST_SKIP() << "no safetensors fixtures (" << dir
                 << "): run tools/dev.sh setup, which installs the safetensors package in .venv";
  }
  std::ifstream in(dir / "manifest.json");
  auto const manifest = nlohmann::json::parse(in);
  std::set<std::string> dtypes_seen;
  for (auto const& file : manifest["files"]) {
    std::string const path = (dir / file["file"].get<std::string>()).string();
    auto const h = ccht::read_safetensors(path);
    std::ifstream bin(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
    ASSERT_EQ(h.tensors.size(), file["tensors"].size()) << path;
    for (auto const& t : file["tensors"]) {
      auto const* ti = h.find(t["name"].get<std::string>());
      ASSERT_NE(ti, nullptr) << t["name"];
      EXPECT_STREQ(ccht::to_string(ti->dtype), t["dtype"].get<std::string>().c_str());
      EXPECT_EQ(ti->shape, t["shape"].get<std::vector<std::uint64_t>>());
      auto const span = std::as_bytes(std::span(bytes.data() + h.data_offset + ti->begin, ti->bytes()));
      EXPECT_EQ(ccht::crc32(span), t["crc32"].get<std::uint32_t>()) << ti->name;
      dtypes_seen.insert(t["dtype"].get<std::string>());
    }
    for (auto const& [k, v] : file["metadata"].items()) { EXPECT_EQ(h.metadata.at(k), v.get<std::string>()); }
  }
  EXPECT_GE(dtypes_seen.size(), 11u) << "the fixtures cover every dtype numpy can write";
}

}  // namespace
