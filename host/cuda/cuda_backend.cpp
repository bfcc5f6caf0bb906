// CUDA runtime helpers of ccht::cuda_backend (declared in include/ccht/backend.hpp).
//
// Plain C++ compiled by the host compiler: only the CUDA runtime API is used here, so this file
// needs no nvcc. Every failing runtime call becomes a ccht::error carrying the CUDA error name and
// string, so callers see one exception type whatever layer failed.
#include <ccht/backend.hpp>
#include <ccht/error.hpp>

#include <cuda_runtime_api.h>

#include <string>

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
