/**
 * @file remote_store.hpp
 * @brief ccht::remote_store: the interface of a shared key-value tier below the local caches
 *        (pages, tensor chunks), and the integrity header every stored value carries.
 *
 * The local layers (ccht::tiered_page_cache, ccht::model_loader) talk to this interface only, so
 * they link nothing more; ccht::redis_tier (cache/redis_tier.hpp, library ccht::remote) is the
 * implementation over Redis or Valkey.
 *
 * **Contract.** Every call is batched and bounded in time: a store that is down, slow or
 * returns a bad value makes elements misses (counted), never an exception from get / put /
 * exists, and never data handed back that was not stored under that key with that length.
 * Values are opaque bytes of a size the caller names; host memory only.
 */
#pragma once

#include <ccht/core/types.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ccht {

/// Counters of a remote_store (monotonic, from every thread of the store).
struct remote_stats {
  std::uint64_t gets = 0;       ///< keys asked for by get()
  std::uint64_t hits = 0;       ///< keys found with a valid header
  std::uint64_t misses = 0;     ///< keys not found, invalid, or not asked (errors, backoff)
  std::uint64_t hit_bytes = 0;  ///< payload bytes of the hits
  std::uint64_t puts = 0;       ///< values stored (put and write-back)
  std::uint64_t put_bytes = 0;  ///< payload bytes stored
  std::uint64_t exists_checks = 0;  ///< keys asked for by exists()
  std::uint64_t integrity_failures = 0;  ///< values whose header or checksum did not match
  std::uint64_t errors = 0;     ///< failed connects, commands and replies (timeouts included)
  std::uint64_t timeouts = 0;   ///< calls cut short by the time budget
  std::uint64_t connects = 0;   ///< successful connections (the first ones included)
  std::uint64_t skipped = 0;    ///< keys not sent because their server was backing off
  std::uint64_t queued = 0;     ///< values accepted by put_async()
  std::uint64_t dropped = 0;    ///< values put_async() refused (queue full) or lost (errors)
  std::uint64_t round_trips = 0;  ///< pipeline flushes (one wait for replies each)
  double seconds = 0;           ///< time spent in calls to the servers (all threads)
};

/**
 * @brief A shared store of byte values by 64-bit key (see the file comment for the contract).
 *        Implementations are safe to call from several threads.
 */
class remote_store {
 public:
  virtual ~remote_store() = default;

  /**
   * @brief Fetches values: element i is a hit when a value stored under keys[i] holds exactly
   *        sizes[i] payload bytes and its header checks out; its bytes go to dst[i].
   * @param dst,sizes destination (host memory) and expected size per key
   * @param found per key, whether it was a hit (dst[i] is left unspecified on a miss)
   * @return the number of hits
   */
  virtual std::size_t get(std::span<key_type const> keys, std::span<std::byte* const> dst,
                          std::span<std::size_t const> sizes, std::span<bool> found) = 0;

  /**
   * @brief Stores values synchronously (pipelined). It supersedes this object's earlier
   *        put_async() of the same keys: once it returns, neither get() nor the server yields
   *        an older queued value for them.
   * @return the number stored
   */
  virtual std::size_t put(std::span<key_type const> keys, std::span<std::byte const* const> src,
                          std::span<std::size_t const> sizes) = 0;

  /**
   * @brief Copies the values into the write-back queue and returns at once; a background
   *        thread stores them. Values the bounded queue cannot take are dropped and counted.
   *        Until a value is stored, get() and exists() on this store object find it (the
   *        newest one queued for its key): a page written back is never missing meanwhile.
   * @return the number queued
   */
  virtual std::size_t put_async(std::span<key_type const> keys,
                                std::span<std::byte const* const> src,
                                std::span<std::size_t const> sizes) = 0;

  /// Per key, whether the store holds a value for it (no header check). @return the count
  virtual std::size_t exists(std::span<key_type const> keys, std::span<bool> found) = 0;

  /// Waits until the write-back queue is empty. @return false when @p timeout passed first
  virtual bool flush(std::chrono::milliseconds timeout = std::chrono::seconds(10)) = 0;

  /// Counters so far.
  virtual remote_stats stats() const = 0;

  /// A description safe to print (no secret), e.g. the URL with its password masked.
  virtual std::string describe() const = 0;
};

/// CRC-32C (Castagnoli) of @p bytes, continuing from @p crc (0 to start).
std::uint32_t crc32c(void const* bytes, std::size_t n, std::uint32_t crc = 0) noexcept;

/**
 * @brief The header in front of every stored value: magic, checksum, key and length, so that a
 *        value written by another program, under another key, truncated or altered is rejected.
 */
struct remote_value_header {
  static constexpr std::uint32_t magic_word = 0x31544343u;  ///< "CCT1", little-endian
  std::uint32_t magic = magic_word;  ///< format tag
  std::uint32_t crc = 0;             ///< crc32c of key, length and payload
  std::uint64_t key = 0;             ///< the ccht key stored
  std::uint64_t length = 0;          ///< payload bytes after the header
};
static_assert(sizeof(remote_value_header) == 24);

/// The header for @p key and @p n payload bytes at @p payload.
remote_value_header make_remote_header(key_type key, void const* payload, std::size_t n) noexcept;

/// Why a stored value was rejected (ok when it is valid).
enum class remote_value_check : std::uint8_t { ok, short_value, bad_magic, wrong_key, wrong_length, bad_checksum };

/// Name of a remote_value_check.
char const* to_string(remote_value_check c) noexcept;

/**
 * @brief Checks a stored value (@p value, @p n bytes: header then payload) against the key and
 *        payload size expected.
 */
remote_value_check check_remote_value(void const* value, std::size_t n, key_type key,
                                      std::size_t expected_bytes) noexcept;

}  // namespace ccht
