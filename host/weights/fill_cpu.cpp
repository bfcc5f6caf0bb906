// File side of the model loader (include/ccht/cache/model_loader.hpp): file identity and keys,
// and the CPU backend's fill, pread(2) straight into the objects' mapped ranges.
#include <ccht/cache/model_loader.hpp>
#include <ccht/core/hash.hpp>
#include <ccht/detail/system.hpp>
#include <ccht/error.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ccht {

file_identity identify_file(std::string const& path) {
  struct ::stat st {};
  if (path.find('\0') != std::string::npos) { detail::require_regular_file(path); }  // refuses it
  if (::stat(path.c_str(), &st) != 0) {
    throw error(error_code::invalid_argument, path + ": cannot stat (" + std::strerror(errno) + ")");
  }
  if (!S_ISREG(st.st_mode)) {  // a FIFO would block its open() for ever; a directory has no header
    detail::require_regular_file(path);
  }
  return file_identity{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                       static_cast<std::uint64_t>(st.st_size),
                       std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec,
                       std::int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec};
}

key_type file_key(file_identity const& id) noexcept {
  std::uint64_t h = hash64(id.device, 0x66696c655f6b6579ull);
  for (std::uint64_t x : {id.inode, id.size, static_cast<std::uint64_t>(id.mtime_ns),
                          static_cast<std::uint64_t>(id.ctime_ns)}) {
    h = hash64(h ^ x, 0x9e3779b97f4a7c15ull);
  }
  return is_reserved_key(h) ? h - 2 : h;
}

key_type tensor_key(file_identity const& id, std::string_view name) noexcept {
  std::uint64_t h = hash64(file_key(id) ^ name.size(), 0x74656e736f72ull);
  for (std::size_t i = 0; i < name.size(); i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, name.data() + i, std::min<std::size_t>(8, name.size() - i));
    h = hash64(h ^ w, 0x13198a2e03707344ull);
  }
  return is_reserved_key(h) ? h - 2 : h;
}

key_type content_key(st_header const& h, std::uint64_t file_size) noexcept {
  auto mix_str = [](std::uint64_t x, std::string_view str) {
    x = hash64(x ^ str.size(), 0x636f6e74656e74ull);
    for (std::size_t i = 0; i < str.size(); i += 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, str.data() + i, std::min<std::size_t>(8, str.size() - i));
      x = hash64(x ^ w, 0x13198a2e03707344ull);
    }
    return x;
  };
  std::uint64_t x = hash64(file_size ^ h.data_offset, 0x6d6f64656c5f6964ull);
  x = hash64(x ^ h.data_bytes, 0x9e3779b97f4a7c15ull);
  for (auto const& t : h.tensors) {
    x = mix_str(x, t.name);
    x = hash64(x ^ static_cast<std::uint64_t>(t.dtype), 0x243f6a8885a308d3ull);
    for (std::uint64_t d : t.shape) { x = hash64(x ^ d, 0x452821e638d01377ull); }
    x = hash64(x ^ t.begin, 0xbe5466cf34e90c6cull);
    x = hash64(x ^ t.end, 0xc0ac29b7c97c50ddull);
  }
  for (auto const& [k, v] : h.metadata) { x = mix_str(mix_str(x, k), v); }
  return is_reserved_key(x) ? x - 2 : x;
}

key_type content_key(st_header const& h, std::uint64_t file_size, std::string const& path) {
  key_type x = content_key(h, file_size);
  int const fd = detail::open_regular_file(path);
  // Fine-tunes of one base model have equal headers: a few bytes of every tensor tell them apart.
  constexpr std::uint64_t sample = 64;
  constexpr int points = 4;
  unsigned char buf[sample];
  for (auto const& t : h.tensors) {
    std::uint64_t const n = t.bytes();
    if (n == 0) { continue; }
    for (int p = 0; p < points; ++p) {
      std::uint64_t const len = std::min(sample, n);
      std::uint64_t const at = h.data_offset + t.begin + (n - len) * std::uint64_t(p) / (points - 1);
      ssize_t const got = ::pread(fd, buf, len, off_t(at));
      if (got != ssize_t(len)) {
        ::close(fd);
        throw error(error_code::invalid_argument, "cannot read " + path + " (a sample of tensor " +
                                                      t.name + ")");
      }
      for (std::uint64_t i = 0; i < len; i += 8) {
        std::uint64_t w = 0;
        std::memcpy(&w, buf + i, std::min<std::uint64_t>(8, len - i));
        x = hash64(x ^ w, 0x5ea3b1e5a3b1e5ull + i);
      }
    }
  }
  ::close(fd);
  return is_reserved_key(x) ? x - 2 : x;
}

key_type remote_chunk_key(key_type content, std::uint32_t index) noexcept {
  std::uint64_t const h = hash64(content ^ (std::uint64_t{index} * 0xd6e8feb86659fd93ull),
                                 0x72656d6f74655f63ull);
  return is_reserved_key(h) ? h - 2 : h;
}

namespace detail {

int open_for_read(std::string const& path) { return open_regular_file(path); }

void close_file(int fd) noexcept { ::close(fd); }

void file_filler<cpu_backend>::fill(int fd, std::string const& path,
                                    std::span<fill_piece const> pieces,
                                    model_loader_options const& options) {
  // Cut the pieces into chunks so that threads share a few large reads evenly.
  std::size_t const chunk = options.io_chunk_bytes == 0 ? std::size_t{8} << 20 : options.io_chunk_bytes;
  std::vector<fill_piece> chunks;
  for (auto const& p : pieces) {
    for (std::size_t at = 0; at < p.bytes; at += chunk) {
      chunks.push_back({p.dst + at, p.offset + at, std::min(chunk, p.bytes - at)});
    }
  }
  std::atomic<std::size_t> next{0};
  std::atomic<int> failure{0};  // errno of the first failure; -1 for a short read
  auto work = [&] {
    for (std::size_t c = next++; c < chunks.size() && failure.load() == 0; c = next++) {
      auto const& p = chunks[c];
      std::size_t done = 0;
      while (done < p.bytes) {
        ssize_t const r = ::pread(fd, p.dst + done, p.bytes - done, static_cast<off_t>(p.offset + done));
        if (r < 0 && errno == EINTR) { continue; }
        if (r <= 0) {
          int expected = 0;
          failure.compare_exchange_strong(expected, r < 0 ? errno : -1);
          return;
        }
        done += static_cast<std::size_t>(r);
      }
    }
  };
  std::size_t const threads =
      std::min<std::size_t>(chunks.size(), options.io_threads < 1 ? 1 : options.io_threads);
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) { pool.emplace_back(work); }
  work();
  for (auto& t : pool) { t.join(); }
  if (int const f = failure.load(); f != 0) {
    throw error(error_code::invalid_argument,
                path + (f < 0 ? std::string(": the file is shorter than its header says")
                              : ": read failed (" + std::string(std::strerror(f)) + ")"));
  }
}

}  // namespace detail
}  // namespace ccht
