// The safetensors reader and writer (include/ccht/cache/safetensors.hpp). Strict: the first
// violated rule is reported, naming the file and the tensor, before anything is cached.
#include <ccht/cache/safetensors.hpp>
#include <ccht/detail/system.hpp>
#include <ccht/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ccht {
namespace {

struct dtype_row {
  st_dtype t;
  char const* name;
  std::size_t bytes;
};
constexpr std::array<dtype_row, 15> dtypes{{
    {st_dtype::BOOL, "BOOL", 1}, {st_dtype::U8, "U8", 1},           {st_dtype::I8, "I8", 1},
    {st_dtype::F8_E5M2, "F8_E5M2", 1}, {st_dtype::F8_E4M3, "F8_E4M3", 1},
    {st_dtype::I16, "I16", 2},   {st_dtype::U16, "U16", 2},         {st_dtype::F16, "F16", 2},
    {st_dtype::BF16, "BF16", 2}, {st_dtype::I32, "I32", 4},         {st_dtype::U32, "U32", 4},
    {st_dtype::F32, "F32", 4},   {st_dtype::F64, "F64", 8},         {st_dtype::I64, "I64", 8},
    {st_dtype::U64, "U64", 8},
}};

[[noreturn]] void fail(std::string_view file, std::string const& what) {
  throw error(error_code::invalid_argument, std::string(file) + ": " + what);
}
[[noreturn]] void fail_tensor(std::string_view file, std::string const& name,
                              std::string const& what) {
  fail(file, "tensor '" + name + "': " + what);
}

/// A JSON value for an error message: scalars as written (40 characters at most), containers by
/// kind (dump() recurses, and a message need not hold a whole list).
std::string shown(nlohmann::json const& j) {
  if (j.is_array()) { return "a list"; }
  if (j.is_object()) { return "an object"; }
  std::string s = j.dump();
  return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

/// What a scan of the header's text sees before it is parsed.
struct text_scan {
  std::size_t deepest = 0;   ///< deepest nesting of lists and objects
  std::size_t top_keys = 0;  ///< keys of the outermost object (its ':' outside strings)
};

/// Scans JSON @p text, brackets and colons inside strings not counted. A safetensors header
/// needs 3 levels (header, entry, shape); deeper ones cost the DOM memory per level (and made
/// error messages recurse) and are refused before it is built. The key count tells whether the
/// parsed object, which keeps one entry per name, lost a repeated one.
text_scan scan(std::string_view text) {
  text_scan r;
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) { escaped = false; }
      else if (c == '\\') { escaped = true; }
      else if (c == '"') { in_string = false; }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      r.deepest = std::max(r.deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    } else if (c == ':' && depth == 1) {
      ++r.top_keys;
    }
  }
  return r;
}

/// Nesting levels of a valid header: the header object, a tensor's object, its shape list.
constexpr std::size_t max_nesting = 3;

bool as_u64(nlohmann::json const& j, std::uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<std::uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<std::int64_t>() >= 0) {
    out = static_cast<std::uint64_t>(j.get<std::int64_t>());
    return true;
  }
  return false;
}

std::string shape_text(std::vector<std::uint64_t> const& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) { s += (i ? ", " : "") + std::to_string(shape[i]); }
  return s + "]";
}

st_tensor parse_entry(std::string_view file, std::string const& name, nlohmann::json const& v,
                      std::uint64_t data_bytes) {
  if (!v.is_object()) { fail_tensor(file, name, "entry is not a JSON object"); }
  for (auto const& [k, _] : v.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets") {
      fail_tensor(file, name, "unknown field '" + k + "'");
    }
  }
  st_tensor t;
  t.name = name;
  auto const dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) { fail_tensor(file, name, "'dtype' is missing or not a string"); }
  if (!parse_dtype(dt->get<std::string>(), t.dtype)) {
    fail_tensor(file, name, "unknown dtype '" + dt->get<std::string>() + "'");
  }
  auto const sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) { fail_tensor(file, name, "'shape' is missing or not a list"); }
  std::uint64_t elems = 1;
  bool overflow = false;
  for (auto const& d : *sh) {
    std::uint64_t x = 0;
    if (!as_u64(d, x)) {
      fail_tensor(file, name, "'shape' holds " + shown(d) + ", not a non-negative integer");
    }
    t.shape.push_back(x);
    if (x != 0 && elems > std::numeric_limits<std::uint64_t>::max() / x) { overflow = true; }
    elems *= x;
  }
  auto const off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !as_u64((*off)[0], t.begin) ||
      !as_u64((*off)[1], t.end)) {
    fail_tensor(file, name, "'data_offsets' is missing or not two non-negative integers");
  }
  if (t.end < t.begin) {
    fail_tensor(file, name, "data_offsets [" + std::to_string(t.begin) + ", " +
                                std::to_string(t.end) + "] end before they begin");
  }
  std::size_t const eb = dtype_bytes(t.dtype);
  if (overflow || elems > std::numeric_limits<std::uint64_t>::max() / eb) {
    fail_tensor(file, name, "shape " + shape_text(t.shape) + " overflows 64 bits of bytes");
  }
  if (elems * eb != t.end - t.begin) {
    fail_tensor(file, name, "shape " + shape_text(t.shape) + " of " + to_string(t.dtype) + " is " +
                                std::to_string(elems * eb) + " bytes, but data_offsets [" +
                                std::to_string(t.begin) + ", " + std::to_string(t.end) +
                                "] span " + std::to_string(t.end - t.begin));
  }
  if (t.end > data_bytes) {
    fail_tensor(file, name, "data_offsets [" + std::to_string(t.begin) + ", " +
                                std::to_string(t.end) + "] are out of range: the data section is " +
                                std::to_string(data_bytes) + " bytes");
  }
  return t;
}

/// Collects the keys of the top-level object (depth 1) of a header already parsed once.
class top_level_keys final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<std::string> keys;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, string_t const&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth_, true; }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return ++depth_, true; }
  bool end_array() override { return --depth_, true; }
  bool key(string_t& k) override {
    if (depth_ == 1) { keys.push_back(std::move(k)); }
    return true;
  }
  bool parse_error(std::size_t, std::string const&, nlohmann::detail::exception const&) override {
    return false;
  }

 private:
  int depth_ = 0;
};

/// The name the header's top-level object holds twice, when the text has more keys than the
/// parsed object. A second pass over the text names it in O(n log n) (nlohmann's parser callback,
/// used before for every header, rescanned the object per entry: quadratic).
std::optional<std::string> repeated_name(std::string_view text) {
  top_level_keys sax;
  nlohmann::json::sax_parse(text.begin(), text.end(), &sax);
  std::sort(sax.keys.begin(), sax.keys.end());
  auto const it = std::adjacent_find(sax.keys.begin(), sax.keys.end());
  if (it == sax.keys.end()) { return std::nullopt; }
  return *it;
}

}  // namespace

std::size_t dtype_bytes(st_dtype t) noexcept {
  for (auto const& r : dtypes) {
    if (r.t == t) { return r.bytes; }
  }
  return 1;
}

char const* to_string(st_dtype t) noexcept {
  for (auto const& r : dtypes) {
    if (r.t == t) { return r.name; }
  }
  return "?";
}

bool parse_dtype(std::string_view name, st_dtype& out) noexcept {
  for (auto const& r : dtypes) {
    if (name == r.name) {
      out = r.t;
      return true;
    }
  }
  return false;
}

st_tensor const* st_header::find(std::string_view name) const noexcept {
  for (auto const& t : tensors) {
    if (t.name == name) { return &t; }
  }
  return nullptr;
}

st_header parse_safetensors(std::string_view file, std::span<std::byte const> head,
                            std::uint64_t file_size) {
  if (file_size < 8 || head.size() < 8) {
    fail(file, "the file is " + std::to_string(file_size) +
                   " bytes, shorter than the 8-byte header length");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) { n = (n << 8) | std::to_integer<std::uint64_t>(head[i]); }
  if (n > st_max_header_bytes) {
    fail(file, "header length " + std::to_string(n) + " exceeds the limit of " +
                   std::to_string(st_max_header_bytes) + " bytes");
  }
  if (n > file_size - 8) {
    fail(file, "header length " + std::to_string(n) + " runs past the end of the file (" +
                   std::to_string(file_size) + " bytes)");
  }
  if (head.size() < 8 + n) {
    fail(file, "only " + std::to_string(head.size()) + " of the header's " +
                   std::to_string(8 + n) + " bytes could be read");
  }
  st_header h;
  h.data_offset = 8 + n;
  h.data_bytes = file_size - h.data_offset;

  auto const* first = reinterpret_cast<char const*>(head.data() + 8);
  auto const text = scan(std::string_view(first, n));
  if (text.deepest > max_nesting) {
    fail(file, "the header nests lists and objects " + std::to_string(text.deepest) + " deep; a "
               "safetensors header has at most " + std::to_string(max_nesting) + " levels");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(first, first + n);
  } catch (nlohmann::json::exception const& e) {
    fail(file, std::string("the header is not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) { fail(file, "the header is not a JSON object"); }
  if (text.top_keys != j.size()) {
    if (auto const repeated = repeated_name(std::string_view(first, n))) {
      fail_tensor(file, *repeated, "the name appears twice in the header");
    }
  }
  for (auto const& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) { fail(file, "'__metadata__' is not a JSON object"); }
      for (auto const& [mk, mv] : v.items()) {
        if (!mv.is_string()) { fail(file, "'__metadata__' entry '" + mk + "' is not a string"); }
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(file, name, v, h.data_bytes));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](st_tensor const& a, st_tensor const& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t at = 0;
  std::string prev;
  for (auto const& t : h.tensors) {
    if (t.begin < at) {
      fail_tensor(file, t.name, "data_offsets [" + std::to_string(t.begin) + ", " +
                                    std::to_string(t.end) + "] overlap tensor '" + prev + "'");
    }
    if (t.begin > at) {
      fail_tensor(file, t.name, "data_offsets begin at " + std::to_string(t.begin) +
                                    ", leaving a gap after byte " + std::to_string(at));
    }
    at = t.end;
    prev = t.name;
  }
  if (at != h.data_bytes) {
    fail(file, "the tensors end at data byte " + std::to_string(at) + " but the data section is " +
                   std::to_string(h.data_bytes) + " bytes (truncated or trailing bytes)");
  }
  return h;
}

st_header read_safetensors(std::string const& path) {
  int const fd = detail::open_regular_file(path);  // never blocks on a FIFO
  struct ::stat st {};
  if (::fstat(fd, &st) != 0) {
    int const err = errno;
    ::close(fd);
    fail(path, std::string("cannot stat (") + std::strerror(err) + ")");
  }
  auto const size = static_cast<std::uint64_t>(st.st_size);
  std::vector<std::byte> head(std::min<std::uint64_t>(size, 8));
  auto read_at = [&](std::byte* dst, std::size_t len, std::uint64_t off) {
    std::size_t done = 0;
    while (done < len) {
      ssize_t const r = ::pread(fd, dst + done, len - done, static_cast<off_t>(off + done));
      if (r < 0 && errno == EINTR) { continue; }
      if (r <= 0) { break; }
      done += static_cast<std::size_t>(r);
    }
    return done;
  };
  head.resize(read_at(head.data(), head.size(), 0));
  if (head.size() == 8) {
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) { n = (n << 8) | std::to_integer<std::uint64_t>(head[i]); }
    if (n <= st_max_header_bytes && n <= size - 8) {
      head.resize(8 + n);
      head.resize(8 + read_at(head.data() + 8, n, 8));
    }
  }
  ::close(fd);
  return parse_safetensors(path, head, size);
}

void write_safetensors(std::string const& path, std::span<st_tensor_data const> tensors,
                       std::map<std::string, std::string> const& metadata) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) { j["__metadata__"] = metadata; }
  std::uint64_t at = 0;
  for (auto const& t : tensors) {
    std::uint64_t elems = 1;
    for (auto d : t.shape) { elems *= d; }
    if (elems * dtype_bytes(t.dtype) != t.data.size()) {
      fail_tensor(path, t.name, "shape " + shape_text(t.shape) + " of " + to_string(t.dtype) +
                                    " does not match its " + std::to_string(t.data.size()) +
                                    " bytes");
    }
    j[t.name] = {{"dtype", to_string(t.dtype)},
                 {"shape", t.shape},
                 {"data_offsets", {at, at + t.data.size()}}};
    at += t.data.size();
  }
  std::string header = j.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  std::uint64_t n = header.size();
  char len[8];
  for (int i = 0; i < 8; ++i) { len[i] = static_cast<char>((n >> (8 * i)) & 0xff); }
  out.write(len, 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (auto const& t : tensors) {
    out.write(reinterpret_cast<char const*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
  }
  out.close();
  if (!out) { fail(path, "writing the file failed"); }
}

std::uint32_t crc32(std::span<std::byte const> bytes, std::uint32_t crc) noexcept {
  static auto const table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) { c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1; }
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (std::byte b : bytes) { crc = table[(crc ^ std::to_integer<std::uint32_t>(b)) & 0xff] ^ (crc >> 8); }
  return ~crc;
}

}  // namespace ccht
