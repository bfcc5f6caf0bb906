/**
 * @file safetensors.hpp
 * @brief A strict reader of safetensors headers, for the weight cache's model loader.
 *
 * The format: 8 bytes of little-endian header length N, N bytes of a JSON object, then the data
 * section. The JSON maps each tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}`
 * (offsets relative to the data section) and may hold `"__metadata__"`: an object of strings.
 *
 * Everything a hostile or damaged file can get wrong is an error (ccht::error invalid_argument)
 * whose message starts with the file name and names the tensor, before any byte is cached:
 * a file shorter than 8 bytes; a header length beyond the file or above 100 MB; a header that is
 * not JSON, not an object, or repeats a name; an entry that is not an object, lacks a field, has
 * an unknown field or dtype, a shape that is not a list of non-negative integers, or offsets that
 * are not two ordered integers; shape x dtype size not equal to the offsets' span (or
 * overflowing); offsets beyond the data section; tensors that overlap, leave a gap, or do not
 * end at the file's end (the rules of the reference implementation).
 *
 * The parse costs O(n log n) in the header's n entries, so the 100 MB limit bounds its time
 * too (a header of 200k tensors parsed in about a second, timed once by hand).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ccht {

/// Element type of a safetensors tensor (the names the format uses).
enum class st_dtype : std::uint8_t {
  BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64,
};

/// Bytes per element of @p t.
std::size_t dtype_bytes(st_dtype t) noexcept;
/// The format's spelling of @p t ("F32", "I64", ...).
char const* to_string(st_dtype t) noexcept;
/// Parses a dtype name; false when the name is unknown.
bool parse_dtype(std::string_view name, st_dtype& out) noexcept;

/// One tensor of a safetensors file.
struct st_tensor {
  std::string name;                  ///< the JSON key
  st_dtype dtype = st_dtype::U8;     ///< element type
  std::vector<std::uint64_t> shape;  ///< dimensions (empty: a scalar)
  std::uint64_t begin = 0;           ///< first byte, relative to the data section
  std::uint64_t end = 0;             ///< one past the last byte, relative to the data section
  /// Bytes of the tensor's data.
  std::uint64_t bytes() const noexcept { return end - begin; }
};

/// A parsed and validated safetensors header.
struct st_header {
  std::uint64_t data_offset = 0;              ///< file offset of the data section (8 + N)
  std::uint64_t data_bytes = 0;               ///< bytes of the data section
  std::vector<st_tensor> tensors;             ///< sorted by begin
  std::map<std::string, std::string> metadata;  ///< `__metadata__`
  /// The tensor named @p name, or null.
  st_tensor const* find(std::string_view name) const noexcept;
};

/// Largest header accepted (the reference implementation's limit).
inline constexpr std::uint64_t st_max_header_bytes = 100'000'000;

/**
 * @brief Validates a header given as the file's first bytes.
 * @param file_name used in error messages only
 * @param head the first 8 + N bytes of the file (or fewer: then the error says so)
 * @param file_size the file's size in bytes
 * @throws ccht::error invalid_argument naming the file (and the tensor) for every rule above
 */
st_header parse_safetensors(std::string_view file_name, std::span<std::byte const> head,
                            std::uint64_t file_size);

/// Reads and validates the header of the file at @p path. @throws ccht::error as above, or
/// invalid_argument when the file cannot be opened or read (with the system's reason)
st_header read_safetensors(std::string const& path);

/// One tensor to write with write_safetensors() (tests and examples make their own files).
struct st_tensor_data {
  std::string name;                  ///< tensor name
  st_dtype dtype = st_dtype::U8;     ///< element type
  std::vector<std::uint64_t> shape;  ///< dimensions
  std::span<std::byte const> data;   ///< exactly shape x dtype size bytes
};

/// Writes a safetensors file (tensors in the given order, header padded to 8 bytes with spaces).
/// @throws ccht::error invalid_argument for a size mismatch or a write failure
void write_safetensors(std::string const& path, std::span<st_tensor_data const> tensors,
                       std::map<std::string, std::string> const& metadata = {});

/// zlib's CRC-32 (polynomial 0xEDB88320, initial and final xor ~0) of @p bytes, continuing @p crc.
std::uint32_t crc32(std::span<std::byte const> bytes, std::uint32_t crc = 0) noexcept;

}  // namespace ccht
