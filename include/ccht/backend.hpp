/**
 * @file backend.hpp
 * @brief Backend tags that select where a ccht::table lives and runs (stdgpu-style).
 *
 * Each backend provides a stream type, an event type that marks the work enqueued on a stream
 * so far, and the few memory primitives the table and the tests need. CPU and CUDA tables can
 * live in one program.
 */
#pragma once

#include <ccht/config.hpp>
#include <ccht/detail/system.hpp>
#include <ccht/error.hpp>
#include <ccht/memory_space.hpp>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#if CCHT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ccht {

/// Stream type of the CPU backend: work is done before the call returns, so it carries nothing.
struct host_stream {};

/// Event type of the CPU backend: the work before it is done by the time it is recorded.
struct host_event {};

/**
 * @brief The CPU backend: host memory, batches run over OpenMP threads (or serially when built
 *        without OpenMP), the same core as the GPU with a one-thread tile.
 */
struct cpu_backend {
  /// Stream type accepted by bulk operations.
  using stream_type = host_stream;
  /// Where table storage lives: refs are usable from host threads.
  using memory_space = host_memory;
  /// Name for tools and test output.
  static constexpr char const* name = "cpu";
  /// Allocates @p bytes aligned to 128 bytes. Throws ccht::error (out_of_memory), also when a
  /// large allocation exceeds the memory the machine has available (detail::check_host_memory).
  static void* allocate(std::size_t bytes) {
    std::size_t const rounded = (bytes + 127) / 128 * 128;
    if (rounded < bytes) { throw error(error_code::out_of_memory, "allocation size overflows"); }
    detail::check_host_memory(rounded, "a host allocation");
    void* p = std::aligned_alloc(128, rounded == 0 ? 128 : rounded);
    if (p == nullptr) {
      throw error(error_code::out_of_memory,
                  "host allocation of " + std::to_string(bytes) + " bytes failed");
    }
    return p;
  }
  /// Frees memory from allocate().
  static void deallocate(void* p) noexcept { std::free(p); }
  /// Copies backend memory to host memory.
  static void copy_to_host(void* dst, void const* src, std::size_t bytes, stream_type = {}) {
    if (bytes) { std::memcpy(dst, src, bytes); }
  }
  /// Copies host memory to backend memory.
  static void copy_from_host(void* dst, void const* src, std::size_t bytes, stream_type = {}) {
    if (bytes) { std::memcpy(dst, src, bytes); }
  }
  /// Waits for work on @p stream (nothing to wait for on the CPU).
  static void synchronize(stream_type = {}) {}
  /// Event type: marks the work enqueued on a stream so far.
  using event_type = host_event;
  /// Marks the work enqueued on a stream so far (on the CPU it is already done).
  static event_type record_event(stream_type = {}) noexcept { return {}; }
  /// Whether the work an event marks is done (always, on the CPU).
  static bool event_done(event_type) noexcept { return true; }
  /// Blocks until the work an event marks is done (nothing to wait for on the CPU).
  static void wait_event(event_type) noexcept {}
  /// Gives back an event from record_event() (nothing to give back on the CPU).
  static void free_event(event_type) noexcept {}
  /// Whether the backend can run here.
  static bool available() noexcept { return true; }
};

#if CCHT_WITH_CUDA
/// Event type of the CUDA backend: a pooled cudaEvent_t (timing disabled) and its device.
struct cuda_event {
  cudaEvent_t event = nullptr;  ///< the event
  int device = 0;               ///< the device it was created on (its pool)
};

/**
 * @brief The CUDA backend: device memory, warp-cooperative kernels, stream-ordered operations.
 *
 * Buffers passed to a CUDA table's bulk operations are device (or managed) memory.
 */
struct cuda_backend {
  /// Stream type accepted by bulk operations.
  using stream_type = cudaStream_t;
  /// Where table storage lives: refs are usable in device code only.
  using memory_space = device_memory;
  /// Name for tools and test output.
  static constexpr char const* name = "cuda";
  /// cudaMalloc; throws ccht::error (out_of_memory or cuda_failure) with the CUDA error string.
  static void* allocate(std::size_t bytes);
  /// cudaFree.
  static void deallocate(void* p) noexcept;
  /// Device-to-host copy, synchronous with respect to @p stream.
  static void copy_to_host(void* dst, void const* src, std::size_t bytes, stream_type stream = {});
  /// Host-to-device copy, synchronous with respect to @p stream.
  static void copy_from_host(void* dst, void const* src, std::size_t bytes,
                             stream_type stream = {});
  /// cudaStreamSynchronize; throws ccht::error on failure.
  static void synchronize(stream_type stream = {});
  /// Event type: marks the work enqueued on a stream so far.
  using event_type = cuda_event;
  /// cudaEventRecord on @p stream of an event from a per-device pool (created with
  /// cudaEventDisableTiming when the pool is empty). @p stream must belong to the current device.
  /// Throws ccht::error on failure (the event goes back to the pool).
  static event_type record_event(stream_type stream = {});
  /// cudaEventQuery: whether the work before @p e is done. Throws ccht::error on failure.
  static bool event_done(event_type const& e);
  /// cudaEventSynchronize: blocks until the work before @p e is done. Throws ccht::error on
  /// failure.
  static void wait_event(event_type const& e);
  /// Returns @p e to its device's pool (it may still be pending: recording it again is allowed).
  static void free_event(event_type const& e) noexcept;
  /// Whether a usable GPU is present.
  static bool available() noexcept;
};

namespace detail {
/// Throws ccht::error (cuda_failure, or out_of_memory for cudaErrorMemoryAllocation) on failure.
void check_cuda(cudaError_t status, char const* what);
/// Throws ccht::error naming @p what if a CUDA error is pending on this thread from earlier
/// work (cudaPeekAtLastError), and clears it: called before ccht launches, so that the error
/// checked after a launch is the launch's own.
void check_no_pending_error(char const* what);
}  // namespace detail
#endif

}  // namespace ccht
