/**
 * @file error.hpp
 * @brief ccht::error, the one exception type the library throws, and its codes.
 */
#pragma once

#include <stdexcept>
#include <string>

namespace ccht {

/// What went wrong, carried by ccht::error.
enum class error_code {
  invalid_size,   ///< a size is zero where it must not be, or sizes disagree, or are too large
  null_pointer,   ///< a buffer is null although its size is not zero
  reserved_key,   ///< a key equals a reserved sentinel (ccht::empty_key, ccht::claimed_key)
  out_of_memory,  ///< allocation failed (host or device)
  cuda_failure,   ///< a CUDA runtime call failed; the message holds the CUDA error string
  no_device,      ///< the CUDA backend was used where no GPU is present
  invalid_argument,  ///< an argument has a value outside its domain (e.g. an unknown op code)
};

/// Short name of an error code ("invalid_size", ...).
inline char const* to_string(error_code c) noexcept {
  switch (c) {
    case error_code::invalid_size: return "invalid_size";
    case error_code::null_pointer: return "null_pointer";
    case error_code::reserved_key: return "reserved_key";
    case error_code::out_of_memory: return "out_of_memory";
    case error_code::cuda_failure: return "cuda_failure";
    case error_code::no_device: return "no_device";
    case error_code::invalid_argument: return "invalid_argument";
  }
  return "unknown";
}

/**
 * @brief The exception thrown by every ccht operation on bad input or resource failure.
 *
 * A bulk operation that throws leaves the table unchanged: inputs are validated before any slot
 * is touched.
 */
class error : public std::runtime_error {
 public:
  /// Builds an error with a code and a message saying what was wrong.
  error(error_code code, std::string const& what)
      : std::runtime_error("ccht: " + std::string(to_string(code)) + ": " + what), code_(code) {}
  /// The error's code.
  error_code code() const noexcept { return code_; }

 private:
  error_code code_;
};

}  // namespace ccht
