// libFuzzer target: the safetensors header reader (parse_safetensors, the whole file as bytes).
// A header it accepts must describe a consistent file: tensors back to back from data byte 0 to
// the end, each exactly shape x dtype bytes.
#include <ccht/cache/safetensors.hpp>
#include <ccht/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

namespace {

void require(bool ok) {
  if (!ok) { std::abort(); }
}

void check(ccht::st_header const& h, std::size_t file_size) {
  require(h.data_offset >= 8 && h.data_offset + h.data_bytes == file_size);
  std::uint64_t at = 0;
  for (auto const& t : h.tensors) {
    require(t.begin == at && t.end >= t.begin);
    std::uint64_t elems = 1;
    for (auto d : t.shape) { elems *= d; }  // cannot overflow: the reader checked
    require(elems * ccht::dtype_bytes(t.dtype) == t.bytes());
    at = t.end;
  }
  require(at == h.data_bytes);
  if (h.tensors.size() <= 64) {  // find() is a linear scan
    for (auto const& t : h.tensors) { require(h.find(t.name) != nullptr); }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  std::span<std::byte const> const bytes(reinterpret_cast<std::byte const*>(data), size);
  try {
    check(ccht::parse_safetensors("fuzz.safetensors", bytes, size), size);
  } catch (ccht::error const& e) {
    require(e.code() == ccht::error_code::invalid_argument);
  }
  return 0;
}
