// Virtual-memory primitives of a mappable ccht::page_pool, one specialisation per backend with the
// same shape, so the weight cache's mapping logic is the same code on both (cache/weight_cache.hpp):
//   CPU:  a memfd_create pool (hugetlb pages when asked and available), mmap(MAP_FIXED|MAP_SHARED)
//         of page offsets into a reserved PROT_NONE range (host/cpu/vm_cpu.cpp).
//   CUDA: one cuMemCreate allocation per page, cuMemAddressReserve ranges, cuMemMap and
//         cuMemSetAccess (host/cuda/vm_cuda.cpp); cuMemMap maps whole allocations only, hence one
//         allocation per page.
// Unmapped parts of a reserved range fault on access (SIGSEGV on the CPU, an illegal address on
// the GPU), so a stale view of an evicted page never reads another object's bytes.
#pragma once

#include <ccht/backend.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ccht {

/// Whether a mappable pool uses huge pages (CPU: hugetlb 2 MiB pages through MFD_HUGETLB).
enum class huge_pages : std::uint8_t {
  automatic = 0,  ///< when page_bytes is a multiple of 2 MiB and the system has enough free ones
  on = 1,         ///< required: construction fails with out_of_memory when they are not there
  off = 2,        ///< never
};

namespace detail {

template <class Backend>
struct vm;

/// CPU: the pool is a memfd; a page is mapped by its file offset.
template <>
struct vm<cpu_backend> {
  struct state {
    int fd = -1;                ///< the pool's memfd
    bool huge = false;          ///< hugetlb pages in use
    std::size_t align = 4096;   ///< mapping granularity (the system page or 2 MiB)
  };
  /// Creates the pool and maps it once linearly (page i at data + i * page_bytes).
  static std::byte* create(state& s, std::size_t bytes, std::size_t page_bytes, huge_pages h);
  static void destroy(state& s, std::byte* data, std::size_t bytes) noexcept;
  /// Reserves @p bytes of address space (inaccessible), aligned to s.align.
  static std::byte* reserve(state const& s, std::size_t bytes);
  /// Maps @p count pages with consecutive ids from @p first at @p at, read-write or read-only.
  static void map(state const& s, std::byte* at, std::size_t page_bytes, std::uint32_t first,
                  std::size_t count, bool writable);
  /// Makes @p count mapped pages at @p at read-only (published objects: no holder can write
  /// what others are served).
  static void protect_read_only(state const& s, std::byte* at, std::size_t page_bytes,
                                std::size_t count);
  /// Makes @p count pages at @p at inaccessible again (still reserved).
  static void unmap(state const& s, std::byte* at, std::size_t page_bytes, std::size_t count);
  /// Returns a reserved range (mapped pages in it are unmapped with it).
  static void free(state const& s, std::byte* at, std::size_t bytes) noexcept;
};

#if CCHT_WITH_CUDA
/// CUDA: one physical allocation per page (cuMemMap cannot map part of an allocation), so map()
/// maps a run page by page and rolls back on failure (map_rollback.hpp).
template <>
struct vm<cuda_backend> {
  struct state {
    std::vector<unsigned long long> handles;  ///< CUmemGenericAllocationHandle per page
    int device = 0;
    /// The device's primary context (a CUcontext), retained by create and released by destroy;
    /// every entry point makes it current for its driver calls (callers may be fresh threads).
    void* context = nullptr;
    bool huge = true;          ///< GPU pages are at least the allocation granularity (2 MiB)
    std::size_t align = 0;     ///< cuMemGetAllocationGranularity (minimum)
    std::size_t page_bytes = 0;
    /// The CUmemAllocationHandleType the pages were created with: CU_MEM_HANDLE_TYPE_POSIX_FILE_
    /// DESCRIPTOR (exportable to other processes) where the driver allows it, else 0 (none).
    int handle_type = 0;
    /// Whether cuMemSetAccess accepted a read-only mapping (the first refusal turns it off).
    mutable bool read_only_ok = true;
  };
  static std::byte* create(state& s, std::size_t bytes, std::size_t page_bytes, huge_pages h);
  static void destroy(state& s, std::byte* data, std::size_t bytes) noexcept;
  static std::byte* reserve(state const& s, std::size_t bytes);
  static void map(state const& s, std::byte* at, std::size_t page_bytes, std::uint32_t first,
                  std::size_t count, bool writable);
  static void protect_read_only(state const& s, std::byte* at, std::size_t page_bytes,
                                std::size_t count);
  static void unmap(state const& s, std::byte* at, std::size_t page_bytes, std::size_t count);
  static void free(state const& s, std::byte* at, std::size_t bytes) noexcept;
};
#endif

}  // namespace detail
}  // namespace ccht
