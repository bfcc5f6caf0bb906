// CUDA runtime helpers of ccht::cuda_backend (declared in include/ccht/backend.hpp).
//
// Plain C++ compiled by the host compiler: only the CUDA runtime API is used here, so this file
// needs no nvcc. Every failing runtime call becomes a ccht::error carrying the CUDA error name and
// string, so callers see one exception type whatever layer failed.
#include <ccht/backend.hpp>
#include <ccht/error.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace ccht {
namespace detail {

namespace {

/// Error code for a failed runtime call: allocation failures and a missing GPU get their own codes
/// so that callers can react (shrink the table, fall back to the CPU backend) without parsing.
error_code code_for(cudaError_t status) noexcept {
  switch (status) {
    case cudaErrorMemoryAllocation: return error_code::out_of_memory;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: return error_code::no_device;
    default: return error_code::cuda_failure;
  }
}

std::string describe(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

/// Free events per device: a release records one per call, so they are made once and reused.
struct event_pool {
  std::mutex mu;
  std::vector<std::vector<cudaEvent_t>> free;  ///< per device
};

event_pool& events() {
  // Never destroyed: events may come back during static destruction, after the runtime unloaded.
  static auto* pool = new event_pool;
  return *pool;
}

}  // namespace

void check_cuda(cudaError_t status, char const* what) {
  if (status == cudaSuccess) { return; }
  // Reset the thread's last-error state so that a later, unrelated cudaGetLastError() does not
  // report this failure again (sticky errors stay sticky regardless).
  (void)cudaGetLastError();
  throw error(code_for(status), std::string(what) + " failed (" + describe(status) + ")");
}

void check_no_pending_error(char const* what) {
  cudaError_t const pending = cudaPeekAtLastError();
  if (pending == cudaSuccess) { return; }
  // Reported here, with its origin, so the error checked after ccht's own launch is ccht's.
  (void)cudaGetLastError();
  throw error(code_for(pending),
              std::string(what) + ": a CUDA error was pending from earlier work, before ccht " +
                  "launched anything (" + describe(pending) +
                  "); check the preceding CUDA calls or kernel launches");
}

}  // namespace detail

void* cuda_backend::allocate(std::size_t bytes) {
  void* p = nullptr;
  // cudaMalloc(0) succeeds with a null pointer; keep the CPU backend's "never null" contract.
  cudaError_t const status = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw error(detail::code_for(status), "cudaMalloc of " + std::to_string(bytes) +
                                              " bytes failed (" + detail::describe(status) + ")");
  }
  return p;
}

void cuda_backend::deallocate(void* p) noexcept {
  if (p == nullptr) { return; }
  // Errors are ignored: this runs in destructors, possibly after the runtime has shut down at
  // program exit (cudaErrorCudartUnloading), when the memory is gone anyway.
  if (cudaFree(p) != cudaSuccess) { (void)cudaGetLastError(); }
}

void cuda_backend::copy_to_host(void* dst, void const* src, std::size_t bytes, stream_type stream) {
  if (bytes == 0) { return; }
  // cudaMemcpyDefault: the source may be device or managed memory (unified addressing).
  detail::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
                     "cudaMemcpyAsync (to host)");
  detail::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void cuda_backend::copy_from_host(void* dst, void const* src, std::size_t bytes,
                                  stream_type stream) {
  if (bytes == 0) { return; }
  detail::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
                     "cudaMemcpyAsync (from host)");
  // Synchronous with respect to the stream: the caller may free or reuse @p src on return.
  detail::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void cuda_backend::synchronize(stream_type stream) {
  detail::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

cuda_event cuda_backend::record_event(stream_type stream) {
  cuda_event e;
  detail::check_cuda(cudaGetDevice(&e.device), "cudaGetDevice");
  {
    detail::event_pool& pool = detail::events();
    std::lock_guard lock(pool.mu);
    auto const d = static_cast<std::size_t>(e.device);
    if (d < pool.free.size() && !pool.free[d].empty()) {
      e.event = pool.free[d].back();
      pool.free[d].pop_back();
    }
  }
  if (e.event == nullptr) {
    detail::check_cuda(cudaEventCreateWithFlags(&e.event, cudaEventDisableTiming),
                       "cudaEventCreateWithFlags");
  }
  cudaError_t const status = cudaEventRecord(e.event, stream);
  if (status != cudaSuccess) {
    free_event(e);
    detail::check_cuda(status, "cudaEventRecord");
  }
  return e;
}

bool cuda_backend::event_done(event_type const& e) {
  cudaError_t const status = cudaEventQuery(e.event);
  if (status == cudaErrorNotReady) {
    // Not an error; should the runtime have kept it as the last error, clear it (only it), so
    // that ccht's next launch does not report it as pending.
    if (cudaPeekAtLastError() == cudaErrorNotReady) { (void)cudaGetLastError(); }
    return false;
  }
  detail::check_cuda(status, "cudaEventQuery");
  return true;
}

void cuda_backend::wait_event(event_type const& e) {
  detail::check_cuda(cudaEventSynchronize(e.event), "cudaEventSynchronize");
}

void cuda_backend::free_event(event_type const& e) noexcept {
  if (e.event == nullptr) { return; }
  detail::event_pool& pool = detail::events();
  try {
    std::lock_guard lock(pool.mu);
    auto const d = static_cast<std::size_t>(e.device);
    if (pool.free.size() <= d) { pool.free.resize(d + 1); }
    pool.free[d].push_back(e.event);
  } catch (...) {  // no memory for the pool: destroy instead (errors ignored, as in deallocate)
    if (cudaEventDestroy(e.event) != cudaSuccess) { (void)cudaGetLastError(); }
  }
}

bool cuda_backend::available() noexcept {
  int count = 0;
  cudaError_t const status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace ccht
