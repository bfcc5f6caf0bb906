/**
 * @file config.hpp
 * @brief Portability macros shared by host and device code.
 */
#pragma once

#if defined(__CUDACC__)
/// Marks a function callable from host and device code.
#define CCHT_HOST_DEVICE __host__ __device__
/// Marks a function that must be inlined on both host and device.
#define CCHT_FORCEINLINE __forceinline__
#else
#define CCHT_HOST_DEVICE
#define CCHT_FORCEINLINE inline __attribute__((always_inline))
#endif

#if defined(__CUDA_ARCH__)
/// True while compiling device code.
#define CCHT_DEVICE_CODE 1
#else
#define CCHT_DEVICE_CODE 0
#endif
