// Stream-ordered memory for the small per-batch device words of the CUDA backend's asynchronous
// calls (table batches in launcher_cuda.cu, page-cache batches in page_kernels.cu). Internal to
// the library; plain C++ over the CUDA runtime (words_pool.cpp).
#pragma once

#include <cuda_runtime_api.h>

namespace ccht::detail {

/**
 * @brief The stream-ordered pool for batch words on @p device, or null where the device has no
 *        memory pools (callers then fall back to cudaMalloc and cudaFree).
 *
 * Its release threshold is unbounded: the few bytes it holds are reused by the next batch instead
 * of going back to the driver at every synchronisation, as the device's default pool (threshold
 * 0) would do. Created once per device and kept until the process ends; each thread caches the
 * answer, so its mutex is taken once per thread and device.
 */
cudaMemPool_t words_pool(int device);

}  // namespace ccht::detail
