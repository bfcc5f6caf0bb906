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
__attribute__((target("sse4.2"))) std::uint32_t crc_hw_serial(unsigned char const* p, std::size_t n,
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

// The crc32 instruction has a latency of 3 cycles and a throughput of 1: three independent
// streams over neighbouring blocks run about 3x faster than one. The raw CRC register is linear,
// so crc(A|B|C, c) = shift(crc(A, c), |B|+|C|) ^ shift(crc(B, 0), |C|) ^ crc(C, 0), where
// shift(v, L) is the register after L zero bytes: a linear map, applied with four byte tables.
constexpr std::size_t block = 256;

struct shift_table {
  std::uint32_t t[4][256];
  explicit shift_table(std::size_t zero_bytes) {
    std::uint32_t basis[32];
    for (int b = 0; b < 32; ++b) {
      std::uint32_t c = std::uint32_t{1} << b;
      for (std::size_t i = 0; i < zero_bytes; ++i) { c = table[c & 0xffu] ^ (c >> 8); }
      basis[b] = c;
    }
    for (int j = 0; j < 4; ++j) {
      for (std::uint32_t v = 0; v < 256; ++v) {
        std::uint32_t r = 0;
        for (int b = 0; b < 8; ++b) {
          if ((v >> b) & 1u) { r ^= basis[8 * j + b]; }
        }
        t[j][v] = r;
      }
    }
  }
  std::uint32_t operator()(std::uint32_t c) const noexcept {
    return t[0][c & 0xffu] ^ t[1][(c >> 8) & 0xffu] ^ t[2][(c >> 16) & 0xffu] ^ t[3][c >> 24];
  }
};

__attribute__((target("sse4.2"))) std::uint32_t crc_hw(unsigned char const* p, std::size_t n,
                                                        std::uint32_t c) noexcept {
  if (n >= 3 * block) {
    static shift_table const one(block), two(2 * block);
    for (; n >= 3 * block; n -= 3 * block, p += 3 * block) {
      std::uint64_t a = c, b = 0, d = 0;
      for (std::size_t i = 0; i < block; i += 8) {
        std::uint64_t wa, wb, wd;
        std::memcpy(&wa, p + i, 8);
        std::memcpy(&wb, p + block + i, 8);
        std::memcpy(&wd, p + 2 * block + i, 8);
        a = _mm_crc32_u64(a, wa);
        b = _mm_crc32_u64(b, wb);
        d = _mm_crc32_u64(d, wd);
      }
      c = two(std::uint32_t(a)) ^ one(std::uint32_t(b)) ^ std::uint32_t(d);
    }
  }
  return crc_hw_serial(p, n, c);
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
