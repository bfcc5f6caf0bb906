// The CUDA backend's mappable page pool (include/ccht/cache/detail/vm.hpp) over the driver's
// virtual memory management. Compiled with the CUDA backend; it has not run on a GPU yet (the
// CPU backend's memfd pool in host/cpu/vm_cpu.cpp runs the same mapping logic in the tests, and
// tests/test_map_rollback.cpp the rollback of a failed map).
// - Pages are created exportable (POSIX file descriptors) where the driver allows it, so a later
//   multi-process service can share them; otherwise with no handle type (state::handle_type).
// - Every entry point makes the pool's primary context current for its driver calls and puts
//   the caller's back after: the pool may be used from threads that never touched CUDA. The VMM
//   calls list no CUDA_ERROR_INVALID_CONTEXT in cuda.h, but nothing promises they never need one.
#include <ccht/cache/detail/map_rollback.hpp>
#include <ccht/cache/detail/vm.hpp>
#include <ccht/error.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <new>
#include <string>

namespace ccht::detail {
namespace {

// The driver API through the runtime's entry points, not by linking libcuda: binaries of the
// CUDA build must start on machines without a GPU driver (CI), where libcuda.so.1 is absent.
struct driver_api {
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) device_attribute = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primary_retain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) primary_release = nullptr;
  decltype(&::cuCtxGetCurrent) ctx_current = nullptr;
  decltype(&::cuCtxPushCurrent) ctx_push = nullptr;
  decltype(&::cuCtxPopCurrent) ctx_pop = nullptr;
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
    // Base names: the version argument (12000) picks the _v2 entry points the macros of cuda.h
    // name, so the pointers match their decltype.
    resolve(a.device_get, "cuDeviceGet");
    resolve(a.device_attribute, "cuDeviceGetAttribute");
    resolve(a.primary_retain, "cuDevicePrimaryCtxRetain");
    resolve(a.primary_release, "cuDevicePrimaryCtxRelease");
    resolve(a.ctx_current, "cuCtxGetCurrent");
    resolve(a.ctx_push, "cuCtxPushCurrent");
    resolve(a.ctx_pop, "cuCtxPopCurrent");
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

/// "NAME: text" of a driver result.
std::string describe(CUresult r) {
  char const* name = nullptr;
  char const* text = nullptr;
  drv().get_error_name(r, &name);
  drv().get_error_string(r, &text);
  std::string s = name ? name : "?";
  s += ": ";
  s += text ? text : "?";
  return s;
}

error_code code_for(CUresult r) {
  return r == CUDA_ERROR_OUT_OF_MEMORY ? error_code::out_of_memory : error_code::cuda_failure;
}

/// Throws for a failed driver call; @p bytes (when not 0) is the size it was given.
void check_cu(CUresult r, char const* what, std::size_t bytes = 0) {
  if (r == CUDA_SUCCESS) { return; }
  std::string msg = "mappable page pool: ";
  msg += what;
  if (bytes != 0) { msg += " of " + std::to_string(bytes) + " bytes"; }
  msg += " failed (" + describe(r) + ")";
  throw error(code_for(r), msg);
}

/**
 * Makes @p ctx current for the scope, then puts the caller's context back (push and pop, so the
 * runtime's notion of the thread's device is left as found). Without a retained context (a state
 * moved from, or a failed create) it does nothing.
 */
class context_scope {
 public:
  /// Throws when @p ctx cannot be made current.
  explicit context_scope(void* ctx) { check_cu(enter(ctx), "making the pool's context current"); }
  /// For noexcept paths: a failure leaves the thread's context as it was, and the driver calls
  /// that follow report their own errors (ignored there).
  context_scope(void* ctx, std::nothrow_t) noexcept { (void)enter(ctx); }
  ~context_scope() {
    if (pushed_) {
      CUcontext popped = nullptr;
      (void)drv().ctx_pop(&popped);
    }
  }
  context_scope(context_scope const&) = delete;
  context_scope& operator=(context_scope const&) = delete;

 private:
  CUresult enter(void* ctx) noexcept {
    if (ctx == nullptr) { return CUDA_SUCCESS; }
    auto const want = static_cast<CUcontext>(ctx);
    CUcontext current = nullptr;
    if (drv().ctx_current(&current) == CUDA_SUCCESS && current == want) { return CUDA_SUCCESS; }
    CUresult const r = drv().ctx_push(want);
    pushed_ = r == CUDA_SUCCESS;
    return r;
  }
  bool pushed_ = false;
};

CUmemAllocationProp prop_for(int device, CUmemAllocationHandleType handle_type) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = handle_type;
  return prop;
}

int device_attribute(CUdevice dev, CUdevice_attribute attr) {
  int v = 0;
  check_cu(drv().device_attribute(&v, attr, dev), "cuDeviceGetAttribute");
  return v;
}

/// The allocation granularity for @p prop; throws unless @p page_bytes is a multiple of it.
std::size_t granularity(CUmemAllocationProp const& prop, std::size_t page_bytes) {
  std::size_t gran = 0;
  check_cu(drv().granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           "cuMemGetAllocationGranularity", page_bytes);
  if (gran == 0 || page_bytes % gran != 0) {
    throw error(error_code::invalid_size,
                "mappable page pool: page_bytes " + std::to_string(page_bytes) +
                    " is not a multiple of the GPU's allocation granularity (" +
                    std::to_string(gran) + " bytes)");
  }
  return gran;
}

CUresult try_set_access(int device, std::byte* at, std::size_t len, CUmemAccess_flags flags) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = flags;
  return drv().set_access(reinterpret_cast<CUdeviceptr>(at), len, &access, 1);
}

/// Read-only access to a mapped range; read-write instead where the driver refuses read-only for
/// device memory (remembered in s.read_only_ok: the Python views are read-only either way).
CUresult try_set_read_only(vm<cuda_backend>::state const& s, std::byte* at, std::size_t len) {
  CUresult const r = try_set_access(s.device, at, len, CU_MEM_ACCESS_FLAGS_PROT_READ);
  if (r != CUDA_ERROR_NOT_SUPPORTED && r != CUDA_ERROR_INVALID_VALUE) { return r; }
  s.read_only_ok = false;
  return try_set_access(s.device, at, len, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
}

/// map_or_roll_back's mapper: pages first..first+count-1 of the pool at at, at + page_bytes, ...
/// The first failing call's result is kept for the error message.
struct run_mapper {
  vm<cuda_backend>::state const& s;
  std::byte* at;
  std::size_t page_bytes;
  std::uint32_t first;
  bool writable;
  CUresult result = CUDA_SUCCESS;
  char const* failed_call = nullptr;

  bool map(std::size_t i) noexcept {
    return keep(drv().map(addr(i), page_bytes, 0, s.handles[first + i], 0), "cuMemMap");
  }
  bool set_access(std::size_t n) noexcept {
    std::size_t const len = n * page_bytes;
    if (writable || !s.read_only_ok) {
      return keep(try_set_access(s.device, at, len, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
                  "cuMemSetAccess");
    }
    return keep(try_set_read_only(s, at, len), "cuMemSetAccess (read-only)");
  }
  bool unmap(std::size_t i) noexcept { return drv().unmap(addr(i), page_bytes) == CUDA_SUCCESS; }

 private:
  CUdeviceptr addr(std::size_t i) const noexcept {
    return reinterpret_cast<CUdeviceptr>(at + i * page_bytes);
  }
  bool keep(CUresult r, char const* call) noexcept {
    if (r != CUDA_SUCCESS) {
      result = r;
      failed_call = call;
    }
    return r == CUDA_SUCCESS;
  }
};

}  // namespace

std::byte* vm<cuda_backend>::create(state& s, std::size_t bytes, std::size_t page_bytes,
                                    huge_pages) {
  check_cuda(cudaFree(nullptr), "CUDA context creation");  // initialises the driver too
  check_cuda(cudaGetDevice(&s.device), "cudaGetDevice");
  CUdevice dev{};
  check_cu(drv().device_get(&dev, s.device), "cuDeviceGet");
  if (device_attribute(dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == 0) {
    throw error(error_code::cuda_failure,
                "mappable page pool: GPU " + std::to_string(s.device) +
                    " does not support virtual memory management (cuMemCreate, cuMemMap)");
  }
  CUcontext ctx = nullptr;
  check_cu(drv().primary_retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  s.context = ctx;
  s.page_bytes = page_bytes;
  std::byte* data = nullptr;
  try {
    context_scope const scope(s.context);
    // Exportable pages where the device says it can export them; the first cuMemCreate decides
    // (a driver may still refuse, e.g. in a container), and every page then has the same type.
    auto handle_type =
        device_attribute(dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) != 0
            ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
            : CU_MEM_HANDLE_TYPE_NONE;
    CUmemAllocationProp prop = prop_for(s.device, handle_type);
    std::size_t gran = granularity(prop, page_bytes);
    std::size_t const pages = bytes / page_bytes;
    s.handles.reserve(pages);
    for (std::size_t i = 0; i < pages; ++i) {
      CUmemGenericAllocationHandle h{};
      CUresult r = drv().create(&h, page_bytes, &prop, 0);
      if (r != CUDA_SUCCESS && i == 0 && handle_type != CU_MEM_HANDLE_TYPE_NONE &&
          r != CUDA_ERROR_OUT_OF_MEMORY) {
        handle_type = CU_MEM_HANDLE_TYPE_NONE;  // not exportable, but a working pool
        prop = prop_for(s.device, handle_type);
        gran = granularity(prop, page_bytes);
        r = drv().create(&h, page_bytes, &prop, 0);
      }
      check_cu(r, "cuMemCreate", page_bytes);
      s.handles.push_back(h);
    }
    s.handle_type = static_cast<int>(handle_type);
    s.align = gran;
    data = reserve(s, bytes);
    map(s, data, page_bytes, 0, pages, true);
  } catch (...) {
    destroy(s, data, bytes);
    throw;
  }
  return data;
}

void vm<cuda_backend>::destroy(state& s, std::byte* data, std::size_t bytes) noexcept {
  {
    context_scope const scope(s.context, std::nothrow);
    if (data != nullptr) {
      // Errors ignored: pages that a failed create never mapped, or a driver already shut down.
      for (std::size_t i = 0; i < s.handles.size(); ++i) {
        drv().unmap(reinterpret_cast<CUdeviceptr>(data + i * s.page_bytes), s.page_bytes);
      }
      drv().address_free(reinterpret_cast<CUdeviceptr>(data), bytes);
    }
    for (auto h : s.handles) { drv().release(h); }
  }
  s.handles.clear();
  if (s.context != nullptr) {
    CUdevice dev{};
    if (drv().device_get(&dev, s.device) == CUDA_SUCCESS) { (void)drv().primary_release(dev); }
    s.context = nullptr;
  }
}

std::byte* vm<cuda_backend>::reserve(state const& s, std::size_t bytes) {
  context_scope const scope(s.context);
  CUdeviceptr p = 0;
  check_cu(drv().address_reserve(&p, bytes, s.align, 0, 0), "cuMemAddressReserve", bytes);
  return reinterpret_cast<std::byte*>(p);
}

void vm<cuda_backend>::map(state const& s, std::byte* at, std::size_t page_bytes,
                           std::uint32_t first, std::size_t count, bool writable) {
  context_scope const scope(s.context);
  if (std::size_t{first} + count > s.handles.size()) {
    throw error(error_code::invalid_argument,
                "mappable page pool: pages " + std::to_string(first) + ".." +
                    std::to_string(std::size_t{first} + count) + " are outside the pool's " +
                    std::to_string(s.handles.size()));
  }
  run_mapper m{s, at, page_bytes, first, writable};
  map_run_result const r = map_or_roll_back(m, count);
  if (!r.failed) { return; }
  std::string msg = "mappable page pool: ";
  msg += describe_rollback(r, count);
  msg += " (";
  msg += m.failed_call;
  msg += " of " + std::to_string(r.access_failed ? count * page_bytes : page_bytes) +
         " bytes: " + describe(m.result) + ")";
  throw error(code_for(m.result), msg);
}

void vm<cuda_backend>::protect_read_only(state const& s, std::byte* at, std::size_t page_bytes,
                                         std::size_t count) {
  if (!s.read_only_ok) { return; }
  context_scope const scope(s.context);
  std::size_t const len = count * page_bytes;
  check_cu(try_set_read_only(s, at, len), "cuMemSetAccess (read-only)", len);
}

void vm<cuda_backend>::unmap(state const& s, std::byte* at, std::size_t page_bytes,
                             std::size_t count) {
  context_scope const scope(s.context);
  for (std::size_t i = 0; i < count; ++i) {
    check_cu(drv().unmap(reinterpret_cast<CUdeviceptr>(at + i * page_bytes), page_bytes),
             "cuMemUnmap", page_bytes);
  }
}

void vm<cuda_backend>::free(state const& s, std::byte* at, std::size_t bytes) noexcept {
  if (at == nullptr) { return; }
  context_scope const scope(s.context, std::nothrow);
  drv().address_free(reinterpret_cast<CUdeviceptr>(at), bytes);
}

}  // namespace ccht::detail
