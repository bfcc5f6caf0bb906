// The CUDA backend's mappable page pool (include/ccht/cache/detail/vm.hpp) over the driver's
// virtual memory management. Compiled with the CUDA backend; it has not run on a GPU yet (the
// CPU backend's memfd pool in host/cpu/vm_cpu.cpp runs the same mapping logic in the tests).
#include <ccht/cache/detail/vm.hpp>
#include <ccht/error.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

namespace ccht::detail {
namespace {

// The driver API through the runtime's entry points, not by linking libcuda: binaries of the
// CUDA build must start on machines without a GPU driver (CI), where libcuda.so.1 is absent.
struct driver_api {
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemAddressReserve) address_reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
};

template <class F>
void resolve(F& f, char const* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  check_cuda(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q), name);
  if (p == nullptr || q != cudaDriverEntryPointSuccess) {
    throw error(error_code::cuda_failure, std::string("the CUDA driver has no ") + name);
  }
  f = reinterpret_cast<F>(p);
}

driver_api const& drv() {
  static driver_api const api = [] {
    driver_api a;
    resolve(a.get_error_name, "cuGetErrorName");
    resolve(a.get_error_string, "cuGetErrorString");
    resolve(a.granularity, "cuMemGetAllocationGranularity");
    resolve(a.create, "cuMemCreate");
    resolve(a.release, "cuMemRelease");
    resolve(a.address_reserve, "cuMemAddressReserve");
    resolve(a.address_free, "cuMemAddressFree");
    resolve(a.map, "cuMemMap");
    resolve(a.unmap, "cuMemUnmap");
    resolve(a.set_access, "cuMemSetAccess");
    return a;
  }();
  return api;
}

void check_cu(CUresult r, char const* what, std::size_t bytes) {
  if (r == CUDA_SUCCESS) { return; }
  char const* name = nullptr;
  char const* text = nullptr;
  drv().get_error_name(r, &name);
  drv().get_error_string(r, &text);
  throw error(r == CUDA_ERROR_OUT_OF_MEMORY ? error_code::out_of_memory : error_code::cuda_failure,
              std::string("mappable page pool: ") + what + " of " + std::to_string(bytes) +
                  " bytes failed (" + (name ? name : "?") + ": " + (text ? text : "?") + ")");
}

CUmemAllocationProp prop_for(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUresult try_set_access(int device, std::byte* at, std::size_t len, CUmemAccess_flags flags) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = flags;
  return drv().set_access(reinterpret_cast<CUdeviceptr>(at), len, &access, 1);
}

void set_access(int device, std::byte* at, std::size_t len) {
  check_cu(try_set_access(device, at, len, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), "cuMemSetAccess",
           len);
}

}  // namespace

std::byte* vm<cuda_backend>::create(state& s, std::size_t bytes, std::size_t page_bytes,
                                    huge_pages) {
  check_cuda(cudaFree(nullptr), "CUDA context creation");  // the driver API needs a context
  check_cuda(cudaGetDevice(&s.device), "cudaGetDevice");
  CUmemAllocationProp const prop = prop_for(s.device);
  std::size_t gran = 0;
  check_cu(drv().granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           "cuMemGetAllocationGranularity", page_bytes);
  if (gran == 0 || page_bytes % gran != 0) {
    throw error(error_code::invalid_size,
                "mappable page pool: page_bytes " + std::to_string(page_bytes) +
                    " is not a multiple of the GPU's allocation granularity (" +
                    std::to_string(gran) + " bytes)");
  }
  s.align = gran;
  std::size_t const pages = bytes / page_bytes;
  std::byte* data = reserve(s, bytes);
  try {
    s.handles.reserve(pages);
    for (std::size_t i = 0; i < pages; ++i) {
      CUmemGenericAllocationHandle h{};
      check_cu(drv().create(&h, page_bytes, &prop, 0), "cuMemCreate", page_bytes);
      s.handles.push_back(h);
    }
    map(s, data, page_bytes, 0, pages, true);
  } catch (...) {
    destroy(s, data, bytes);
    throw;
  }
  return data;
}

void vm<cuda_backend>::destroy(state& s, std::byte* data, std::size_t bytes) noexcept {
  if (data != nullptr) {
    std::size_t const page_bytes = s.handles.empty() ? bytes : bytes / s.handles.size();
    for (std::size_t i = 0; i < s.handles.size(); ++i) {
      drv().unmap(reinterpret_cast<CUdeviceptr>(data + i * page_bytes), page_bytes);
    }
    drv().address_free(reinterpret_cast<CUdeviceptr>(data), bytes);
  }
  for (auto h : s.handles) { drv().release(h); }
  s.handles.clear();
}

std::byte* vm<cuda_backend>::reserve(state const& s, std::size_t bytes) {
  CUdeviceptr p = 0;
  check_cu(drv().address_reserve(&p, bytes, s.align, 0, 0), "cuMemAddressReserve", bytes);
  return reinterpret_cast<std::byte*>(p);
}

void vm<cuda_backend>::map(state const& s, std::byte* at, std::size_t page_bytes,
                           std::uint32_t first, std::size_t count, bool writable) {
  for (std::size_t i = 0; i < count; ++i) {
    check_cu(drv().map(reinterpret_cast<CUdeviceptr>(at + i * page_bytes), page_bytes, 0,
                      s.handles.at(first + i), 0),
             "cuMemMap", page_bytes);
  }
  if (writable || !s.read_only_ok) {
    set_access(s.device, at, count * page_bytes);
  } else {
    protect_read_only(s, at, page_bytes, count);  // one call; read-write where refused
  }
}

// Not yet run on a GPU: where the driver refuses read-only access to device memory, mappings
// stay read-write (the Python views are read-only either way) instead of failing every publish.
void vm<cuda_backend>::protect_read_only(state const& s, std::byte* at, std::size_t page_bytes,
                                         std::size_t count) {
  if (!s.read_only_ok) { return; }
  std::size_t const len = count * page_bytes;
  CUresult const r = try_set_access(s.device, at, len, CU_MEM_ACCESS_FLAGS_PROT_READ);
  if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE) {
    s.read_only_ok = false;
    check_cu(try_set_access(s.device, at, len, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
             "cuMemSetAccess", len);
    return;
  }
  check_cu(r, "cuMemSetAccess (read-only)", len);
}

void vm<cuda_backend>::unmap(state const&, std::byte* at, std::size_t page_bytes,
                             std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    check_cu(drv().unmap(reinterpret_cast<CUdeviceptr>(at + i * page_bytes), page_bytes),
             "cuMemUnmap", page_bytes);
  }
}

void vm<cuda_backend>::free(state const&, std::byte* at, std::size_t bytes) noexcept {
  if (at != nullptr) { drv().address_free(reinterpret_cast<CUdeviceptr>(at), bytes); }
}

}  // namespace ccht::detail
