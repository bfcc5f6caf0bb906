/**
 * @file memory_space.hpp
 * @brief Tags naming where a table's storage lives, so that a ref knows who may dereference it.
 */
#pragma once

namespace ccht {

/// Storage in host memory (ccht::cpu_backend): refs work from host threads.
struct host_memory {
  /// Whether host code may call a ref's operations.
  static constexpr bool host_accessible = true;
  /// Name for messages.
  static constexpr char const* name = "host";
};

/// Storage in device memory (ccht::cuda_backend): refs work only in device code (kernels).
struct device_memory {
  /// Whether host code may call a ref's operations.
  static constexpr bool host_accessible = false;
  /// Name for messages.
  static constexpr char const* name = "device";
};

}  // namespace ccht
