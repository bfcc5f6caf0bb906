// CRC-32C and the value header of cache/remote_store.hpp. No hiredis here: the local layers
// (tiered_page_cache, model_loader) check values with these, whatever store holds them.
#include <ccht/cache/remote_store.hpp>

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ccht {
namespace {

constexpr std::uint32_t castagnoli = 0x82F63B78u;  // reflected polynomial

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) { c = (c & 1u) ? (c >> 1) ^ castagnoli : c >> 1; }
    t[i] = c;
  }
  return t;
}
constexpr auto table = make_table();

std::uint32_t crc_soft(unsigned char const* p, std::size_t n, std::uint32_t c) noexcept {
  for (std::size_t i = 0; i < n; ++i) { c = table[(c ^ p[i]) & 0xffu] ^ (c >> 8); }
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc_hw(unsigned char const* p, std::size_t n,
                                                        std::uint32_t c) noexcept {
  std::uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
  }
  c = static_cast<std::uint32_t>(c64);
  for (; n > 0; --n, ++p) { c = _mm_crc32_u8(c, *p); }
  return c;
}
bool const have_sse42 = __builtin_cpu_supports("sse4.2");
#endif

std::uint32_t header_crc(key_type key, std::uint64_t length, void const* payload,
                         std::size_t n) noexcept {
  unsigned char kl[16];
  std::memcpy(kl, &key, 8);
  std::memcpy(kl + 8, &length, 8);
  return crc32c(payload, n, crc32c(kl, sizeof kl));
}

}  // namespace

std::uint32_t crc32c(void const* bytes, std::size_t n, std::uint32_t crc) noexcept {
  auto const* p = static_cast<unsigned char const*>(bytes);
  std::uint32_t c = ~crc;
#if defined(__x86_64__)
  c = have_sse42 ? crc_hw(p, n, c) : crc_soft(p, n, c);
#else
  c = crc_soft(p, n, c);
#endif
  return ~c;
}

remote_value_header make_remote_header(key_type key, void const* payload, std::size_t n) noexcept {
  remote_value_header h;
  h.key = key;
  h.length = n;
  h.crc = header_crc(key, n, payload, n);
  return h;
}

char const* to_string(remote_value_check c) noexcept {
  switch (c) {
    case remote_value_check::ok: return "ok";
    case remote_value_check::short_value: return "shorter than its header";
    case remote_value_check::bad_magic: return "not a ccht value (bad magic)";
    case remote_value_check::wrong_key: return "stored under another key";
    case remote_value_check::wrong_length: return "wrong length";
    case remote_value_check::bad_checksum: return "checksum mismatch";
  }
  return "?";
}

remote_value_check check_remote_value(void const* value, std::size_t n, key_type key,
                                      std::size_t expected_bytes) noexcept {
  if (n < sizeof(remote_value_header)) { return remote_value_check::short_value; }
  remote_value_header h;
  std::memcpy(&h, value, sizeof h);
  if (h.magic != remote_value_header::magic_word) { return remote_value_check::bad_magic; }
  if (h.key != key) { return remote_value_check::wrong_key; }
  if (h.length != expected_bytes || n - sizeof h != expected_bytes) {
    return remote_value_check::wrong_length;
  }
  auto const* payload = static_cast<unsigned char const*>(value) + sizeof h;
  if (header_crc(key, h.length, payload, expected_bytes) != h.crc) {
    return remote_value_check::bad_checksum;
  }
  return remote_value_check::ok;
}

}  // namespace ccht
