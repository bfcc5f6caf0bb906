/**
 * @file types.hpp
 * @brief Key, payload and status types shared by every layer, and the reserved key values.
 */
#pragma once

#include <cstdint>

namespace ccht {

/// Key type of every table: 64-bit unsigned integers.
using key_type = std::uint64_t;
/// Payload type of every table: an inline 64-bit value, or a block id into a value pool.
using value_type = std::uint64_t;
/// Recency/frequency word stored per slot; its meaning is set by the in-bucket policy.
using score_type = std::uint64_t;
/// Logical time: every operation carries a tick, and later operations carry larger ticks.
using tick_type = std::uint64_t;

/**
 * @brief Marks a free slot. Reserved: user keys must differ from it.
 *
 * Bulk operations reject it with ccht::error (code error_code::reserved_key).
 */
inline constexpr key_type empty_key = ~key_type{0};

/**
 * @brief Reserved for internal claims (slot hand-over by later layers). User keys must differ.
 */
inline constexpr key_type claimed_key = ~key_type{0} - 1;

/// True when @p k is one of the reserved sentinel values (empty_key, claimed_key).
constexpr bool is_reserved_key(key_type k) noexcept { return k >= claimed_key; }

/// What one element of a mixed batch asks for.
enum class op_code : std::uint8_t {
  find = 0,              ///< look the key up; a hit promotes it
  insert_or_assign = 1,  ///< upsert the key with the element's value
  erase = 2,             ///< remove the key if present
};

/// What happened to one element of a bulk operation (one byte per element).
enum class op_status : std::uint8_t {
  miss = 0,              ///< find: key absent; erase: key was not present
  hit = 1,               ///< find: key present, value written; erase: key removed
  assigned = 2,          ///< insert_or_assign: the key existed; value updated and entry promoted
  inserted = 3,          ///< insert_or_assign: new key placed in a free slot
  inserted_evicted = 4,  ///< insert_or_assign: new key placed after evicting another entry
  /// insert_or_assign of a pinnable policy: both candidate buckets are full of pinned entries
  /// (core/pin.hpp); nothing changed
  no_space = 5,
};

}  // namespace ccht
