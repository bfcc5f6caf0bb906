// Host-machine checks (include/ccht/detail/system.hpp).
#include <ccht/detail/system.hpp>
#include <ccht/error.hpp>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ccht::detail {
namespace {

constexpr std::size_t unknown = std::numeric_limits<std::size_t>::max();

/// MemAvailable of /proc/meminfo in bytes, or unknown.
std::size_t meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  std::uint64_t kib = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") { return static_cast<std::size_t>(kib) * 1024; }
  }
  return unknown;
}

/// One number from a cgroup v2 file ("max" or unreadable: unknown).
std::size_t cgroup_value(char const* file) {
  std::ifstream in(std::string("/sys/fs/cgroup/") + file);
  std::string text;
  if (!(in >> text) || text == "max") { return unknown; }
  char* end = nullptr;
  unsigned long long const v = std::strtoull(text.c_str(), &end, 10);
  return end != nullptr && *end == '\0' ? static_cast<std::size_t>(v) : unknown;
}

char const* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) { return "a directory"; }
  if (S_ISFIFO(mode)) { return "a FIFO"; }
  if (S_ISSOCK(mode)) { return "a socket"; }
  if (S_ISCHR(mode)) { return "a character device"; }
  if (S_ISBLK(mode)) { return "a block device"; }
  return "an unusual file type";
}

/// @p path with a NUL byte shown as \0 (a message is read up to its first NUL).
std::string printable(std::string const& path) {
  std::string out;
  for (char c : path) {
    if (c == '\0') {
      out += "\\0";
    } else {
      out += c;
    }
  }
  return out;
}

[[noreturn]] void refuse(std::string const& what, std::string const& path, std::string const& why) {
  throw error(error_code::invalid_argument,
              (what.empty() ? "" : what + ": ") + printable(path) + ": " + why);
}

}  // namespace

std::size_t host_memory_available() noexcept {
  try {
    std::size_t avail = meminfo_available();
    std::size_t const limit = cgroup_value("memory.max");
    if (limit != unknown) {
      std::size_t const used = cgroup_value("memory.current");
      std::size_t const left = used == unknown ? limit : (limit > used ? limit - used : 0);
      avail = avail == unknown ? left : std::min(avail, left);
    }
    return avail;
  } catch (...) {
    return unknown;
  }
}

std::string format_bytes(std::uint64_t bytes) {
  char buf[64];
  constexpr std::uint64_t mib = std::uint64_t{1} << 20, gib = std::uint64_t{1} << 30;
  if (bytes >= gib) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / gib);
  } else if (bytes >= mib) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / mib);
  } else {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " bytes", bytes);
  }
  return buf;
}

void check_host_memory(std::size_t bytes, std::string const& what, std::string const& hint) {
  if (bytes < memory_check_threshold) { return; }
  std::size_t const avail = host_memory_available();
  if (avail == unknown || bytes <= avail) { return; }
  throw error(error_code::out_of_memory,
              what + " needs " + format_bytes(bytes) + " but the machine has " +
                  format_bytes(avail) + " available" + (hint.empty() ? "" : "; " + hint));
}

int open_regular_file(std::string const& path, std::string const& what) {
  if (path.find('\0') != std::string::npos) { refuse(what, path, "the path contains a NUL byte"); }
  // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
  int const fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) { refuse(what, path, std::string("cannot open (") + std::strerror(errno) + ")"); }
  struct ::stat st {};
  if (::fstat(fd, &st) != 0) {
    int const err = errno;
    ::close(fd);
    refuse(what, path, std::string("cannot stat (") + std::strerror(err) + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse(what, path, std::string("is not a regular file (") + file_kind(st.st_mode) + ")");
  }
  int const flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) { (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK); }
  return fd;
}

void require_regular_file(std::string const& path, std::string const& what) {
  if (path.find('\0') != std::string::npos) { refuse(what, path, "the path contains a NUL byte"); }
  struct ::stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    refuse(what, path, std::string("cannot open (") + std::strerror(errno) + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    refuse(what, path, std::string("is not a regular file (") + file_kind(st.st_mode) + ")");
  }
}

}  // namespace ccht::detail
