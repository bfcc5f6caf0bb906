/**
 * @file launcher.hpp
 * @brief The per-backend layer under ccht::table: storage management and bulk loops/kernels.
 *
 * ccht::table checks arguments once for every backend and then calls launcher<Backend>. Each
 * backend declares the same interface here and defines it in its own folder (host/cpu for the
 * CPU backend, kernels/ for CUDA), with explicit instantiations for every table policy
 * (CCHT_TABLE_POLICIES in include/ccht/policy_list.hpp). Pointers are backend memory and sizes
 * are already validated. n may be 0 for insert_or_assign, erase and execute (async calls): then
 * only the count word is zeroed.
 *
 * Reserved keys: a launcher rejects a batch holding a reserved key as a whole. The CPU launcher
 * throws at once. The CUDA launcher cannot: its validation kernel writes the smallest offending
 * index to @p reject (a backend word initialised to ~0, or the table's sticky word when null)
 * and the operation kernel then does nothing.
 */
#pragma once

#include <ccht/backend.hpp>
#include <ccht/core/accounting.hpp>
#include <ccht/core/bucket.hpp>
#include <ccht/core/types.hpp>

#include <cstddef>
#include <cstdint>

namespace ccht::detail {

/// Storage of one table, as the launchers see it.
struct table_state {
  bucket_array_view<default_bucket_size> view{};  ///< buckets, versions, sizes, seed
  tick_type* clock = nullptr;                      ///< logical clock (backend memory)
  std::size_t* sticky_reject = nullptr;  ///< CUDA: first rejected index of an async call, ~0 if none
  int cpu_threads = 0;                   ///< CPU: threads per bulk call (0: OpenMP default)
  access_counts* counts = nullptr;       ///< access counters (backend memory) when counting
  bool tail_index = false;  ///< create() allocates view.tails (double LRU / LRU-CHT layer)
  /// With tail_index: create() also allocates view.upper, in the same allocation after the tails
  bool upper_index = false;
  /// With upper_index: create() also allocates view.victim_age (the own-first search)
  bool own_first = false;
  /// CPU, double_lru: large bulk inserts choose their victims in one pass (bulk_victim_select)
  bool bulk_select = false;
};

/// Marks "no reserved key seen" in a reject word.
inline constexpr std::size_t no_reject = ~std::size_t{0};

#define CCHT_DECLARE_LAUNCHER_INTERFACE(STREAM)                                                   \
  using stream_type = STREAM;                                                                     \
  /** Allocates and initialises storage for @p num_buckets buckets; frees all on failure.        \
      Also allocates the live-entry word when s.view.capacity != 0, the tail index when      \
      s.tail_index, and the access counters when @p count_accesses (a backend may ignore    \
      it). */                                                                                 \
  static void create(table_state& s, std::uint32_t num_buckets, std::uint64_t seed,               \
                     bool count_accesses);                                                         \
  /** Frees storage; leaves @p s empty. */                                                        \
  static void destroy(table_state& s) noexcept;                                                   \
  static std::size_t size(table_state const& s, stream_type stream);                              \
  static void clear(table_state const& s, stream_type stream);                                    \
  template <class Policy>                                                                         \
  static void find(table_state const& s, key_type const* keys, value_type* values, bool* found,   \
                   std::size_t n, std::size_t* reject, stream_type stream);                        \
  static void contains(table_state const& s, key_type const* keys, bool* found, std::size_t n,    \
                       std::size_t* reject, stream_type stream);                                  \
  template <class Policy>                                                                         \
  static void insert_or_assign(table_state const& s, key_type const* keys,                        \
                               value_type const* values, std::size_t n, key_type* evicted_keys,   \
                               value_type* evicted_values, std::size_t* num_evicted,              \
                               std::size_t* reject, stream_type stream);                          \
  static void erase(table_state const& s, key_type const* keys, std::size_t n,                    \
                    std::size_t* num_erased, std::size_t* reject, stream_type stream);            \
  template <class Policy>                                                                         \
  static void execute(table_state const& s, op_code const* ops, key_type const* keys,             \
                      value_type const* values, value_type* values_out, op_status* status,        \
                      std::size_t n, key_type* evicted_keys, value_type* evicted_values,          \
                      std::size_t* num_evicted, std::size_t* reject, stream_type stream);         \
  static std::size_t export_entries(table_state const& s, key_type* keys, value_type* values,     \
                                    std::size_t capacity, stream_type stream);                    \
  /** Access counters so far (all zero when the table does not count); on CUDA it waits           \
      for the table's whole device first (table::access_stats documents the contract). */         \
  static access_counts read_counts(table_state const& s);                                         \
  /** Zeroes the access counters (nothing when the table does not count); same wait. */           \
  static void reset_counts(table_state const& s);                                                 \
  /** Throws ccht::error if an earlier async call was rejected, and resets the sticky word. */    \
  static void check_async_error(table_state const& s, stream_type stream);                        \
  /** The stream a synchronous call given @p stream runs on (CUDA: the default stream becomes   \
      the calling thread's per-thread default stream, so host threads do not serialise). */    \
  static stream_type sync_stream(stream_type stream) noexcept;                                    \
  /** Two backend words for a synchronous call: [0] = count, [1] = reject index (~0). */          \
  static std::size_t* acquire_words(stream_type stream);                                          \
  /** Waits for @p stream, copies the two words to @p host and releases them. */                  \
  static void release_words(std::size_t* words, std::size_t host[2], stream_type stream);

/// Backend layer; specialised below for each backend.
template <class Backend>
struct launcher;

/// CPU backend layer (host/cpu/).
template <>
struct launcher<cpu_backend> {
  CCHT_DECLARE_LAUNCHER_INTERFACE(host_stream)
};

#if CCHT_WITH_CUDA
/// CUDA backend layer (kernels/).
template <>
struct launcher<cuda_backend> {
  CCHT_DECLARE_LAUNCHER_INTERFACE(cudaStream_t)
};
#endif

#undef CCHT_DECLARE_LAUNCHER_INTERFACE

}  // namespace ccht::detail
