// The CPU backend's mappable page pool (include/ccht/cache/detail/vm.hpp): a memfd holds the
// pages, the pool maps it once linearly, and objects map page offsets into reserved ranges.
#include <ccht/cache/detail/vm.hpp>
#include <ccht/detail/system.hpp>
#include <ccht/error.hpp>

#include <cerrno>
#include <cstring>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << 26)
#endif

namespace ccht::detail {
namespace {

constexpr std::size_t huge_bytes = std::size_t{2} << 20;

[[noreturn]] void fail(char const* what, std::size_t bytes, int err) {
  std::string msg = std::string("mappable page pool: ") + what + " of " + std::to_string(bytes) +
                    " bytes failed (" + std::strerror(err) + ")";
  if (err == ENOMEM) {
    msg += "; every mapped run of pages is one mapping: raise vm.max_map_count or use larger pages";
  }
  throw error(err == ENOMEM ? error_code::out_of_memory : error_code::invalid_argument, msg);
}

/// The memfd of @p bytes and its linear, populated mapping; null when @p huge and the system has
/// too few free huge pages (the caller falls back or fails).
std::byte* try_create(vm<cpu_backend>::state& s, std::size_t bytes, bool huge) {
  int const fd = ::memfd_create("ccht-page-pool", MFD_CLOEXEC | (huge ? MFD_HUGETLB | MFD_HUGE_2MB : 0U));
  if (fd < 0) {
    if (huge) { return nullptr; }
    fail("memfd_create", bytes, errno);
  }
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int const err = errno;
    ::close(fd);
    if (huge) { return nullptr; }
    fail("ftruncate", bytes, err);
  }
  // MAP_POPULATE: the pages exist from the start, so an object's mapping never allocates.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    int const err = errno;
    ::close(fd);
    if (huge) { return nullptr; }
    fail("mmap of the pool", bytes, err);
  }
  s.fd = fd;
  s.huge = huge;
  s.align = huge ? huge_bytes : static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return static_cast<std::byte*>(p);
}

}  // namespace

std::byte* vm<cpu_backend>::create(state& s, std::size_t bytes, std::size_t page_bytes,
                                   huge_pages h) {
  std::size_t const sys = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  bool const huge_fits = page_bytes % huge_bytes == 0;
  if (h == huge_pages::on && !huge_fits) {
    throw error(error_code::invalid_size, "mappable page pool: huge pages need page_bytes a multiple "
                                          "of 2 MiB, not " + std::to_string(page_bytes));
  }
  if (h != huge_pages::off && huge_fits) {
    if (std::byte* p = try_create(s, bytes, true)) { return p; }
    if (h == huge_pages::on) {
      throw error(error_code::out_of_memory,
                  "mappable page pool: " + std::to_string(bytes / huge_bytes) +
                      " free 2 MiB huge pages are needed (see /proc/sys/vm/nr_hugepages)");
    }
  }
  if (page_bytes % sys != 0) {
    throw error(error_code::invalid_size, "mappable page pool: page_bytes " +
                                              std::to_string(page_bytes) +
                                              " is not a multiple of the system page (" +
                                              std::to_string(sys) + " bytes)");
  }
  // The pool is populated at once (no object's mapping ever allocates), so a budget larger than
  // the machine can hold is refused here rather than left to the OOM killer.
  check_host_memory(bytes, "a mappable page pool of " + std::to_string(bytes) + " bytes",
                    "use a smaller budget");
  return try_create(s, bytes, false);
}

void vm<cpu_backend>::destroy(state& s, std::byte* data, std::size_t bytes) noexcept {
  if (data != nullptr) { ::munmap(data, bytes); }
  if (s.fd >= 0) { ::close(s.fd); }
  s.fd = -1;
}

std::byte* vm<cpu_backend>::reserve(state const& s, std::size_t bytes) {
  // Over-reserve by one alignment unit and trim, so huge pages can map at an aligned address.
  std::size_t const span = bytes + s.align;
  void* p = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) { fail("address reservation", bytes, errno); }
  auto const raw = reinterpret_cast<std::uintptr_t>(p);
  std::uintptr_t const start = (raw + s.align - 1) / s.align * s.align;
  if (start > raw) { ::munmap(p, start - raw); }
  std::size_t const tail = raw + span - (start + bytes);
  if (tail > 0) { ::munmap(reinterpret_cast<void*>(start + bytes), tail); }
  return reinterpret_cast<std::byte*>(start);
}

void vm<cpu_backend>::map(state const& s, std::byte* at, std::size_t page_bytes,
                          std::uint32_t first, std::size_t count, bool writable) {
  std::size_t const len = count * page_bytes;
  int const prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  // MAP_POPULATE fills the page tables now, in one call, instead of one fault per 4 KiB later.
  void* p = ::mmap(at, len, prot, MAP_SHARED | MAP_FIXED | MAP_POPULATE, s.fd,
                   static_cast<off_t>(std::size_t{first} * page_bytes));
  if (p == MAP_FAILED) { fail("mapping pages", len, errno); }
}

void vm<cpu_backend>::protect_read_only(state const&, std::byte* at, std::size_t page_bytes,
                                        std::size_t count) {
  std::size_t const len = count * page_bytes;
  if (::mprotect(at, len, PROT_READ) != 0) { fail("protecting pages", len, errno); }
}

void vm<cpu_backend>::unmap(state const&, std::byte* at, std::size_t page_bytes,
                            std::size_t count) {
  std::size_t const len = count * page_bytes;
  void* p = ::mmap(at, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
                   0);
  if (p == MAP_FAILED) { fail("unmapping pages", len, errno); }
}

void vm<cpu_backend>::free(state const&, std::byte* at, std::size_t bytes) noexcept {
  if (at != nullptr) { ::munmap(at, bytes); }
}

}  // namespace ccht::detail
