/**
 * @file validate.hpp
 * @brief Host-side argument checks shared by every backend, so that bad input gets the same
 *        ccht::error everywhere and is rejected before the table is touched.
 */
#pragma once

#include <ccht/core/types.hpp>
#include <ccht/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ccht::detail {

/// Buckets for a requested slot count: rounded up to whole buckets, at least two.
inline std::uint32_t buckets_for_slots(std::size_t num_slots, int bucket_size) {
  if (num_slots == 0) { throw error(error_code::invalid_size, "a table needs at least one slot"); }
  std::size_t const b = num_slots / bucket_size + (num_slots % bucket_size != 0);
  if (b > std::size_t{0xffffffffu}) {
    throw error(error_code::invalid_size,
                std::to_string(num_slots) + " slots exceed the limit of 2^32 - 1 buckets");
  }
  return static_cast<std::uint32_t>(b < 2 ? 2 : b);
}

/// Checks that a span is non-null when non-empty and has exactly (or at least) @p n elements.
template <class T>
void check_span(std::span<T> s, std::size_t n, char const* op, char const* name,
                bool at_least = false) {
  if (at_least ? s.size() < n : s.size() != n) {
    throw error(error_code::invalid_size,
                std::string(op) + ": " + name + " has " + std::to_string(s.size()) +
                    " elements, expected " + (at_least ? "at least " : "") + std::to_string(n));
  }
  if (s.size() != 0 && s.data() == nullptr) {
    throw error(error_code::null_pointer,
                std::string(op) + ": " + name + " is null but has " + std::to_string(s.size()) +
                    " elements");
  }
}

/// Message for a reserved key found at @p index.
inline std::string reserved_key_message(char const* op, std::size_t index, key_type key) {
  return std::string(op) + ": key at index " + std::to_string(index) + " (" +
         std::to_string(key) + ") is a reserved sentinel; user keys must be below " +
         std::to_string(claimed_key);
}

/// Throws error_code::reserved_key for the first reserved key in host-readable @p keys.
inline void check_keys_host(std::span<key_type const> keys, char const* op) {
  bool any = false;  // branch-free pass first: it vectorises, and bad keys are rare
  for (key_type k : keys) { any |= is_reserved_key(k); }
  if (!any) [[likely]] { return; }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (is_reserved_key(keys[i])) {
      throw error(error_code::reserved_key, reserved_key_message(op, i, keys[i]));
    }
  }
}

/// Throws error_code::invalid_argument for the first op code that is not a ccht::op_code.
inline void check_ops_host(std::span<op_code const> ops, char const* op) {
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (static_cast<std::uint8_t>(ops[i]) > static_cast<std::uint8_t>(op_code::erase)) {
      throw error(error_code::invalid_argument,
                  std::string(op) + ": op code at index " + std::to_string(i) + " (" +
                      std::to_string(static_cast<unsigned>(ops[i])) + ") is not a ccht::op_code");
    }
  }
}

}  // namespace ccht::detail
