/**
 * @file accounting.hpp
 * @brief Memory-access accounting: buckets (and bytes) each operation reads and writes.
 *
 * The core takes an optional `access_counts*`; a null pointer costs one predictable branch per
 * counted event. Counts follow the layout of bucket.hpp in 32-byte sectors: a bucket probe reads
 * its version word (one sector) and its keys (B * 8 bytes); a hit reads one value sector; a
 * promotion writes one score sector; an eviction reads the scores line; a slot write writes one
 * sector each of key, value and score plus the version word. A kick (kick-out policies) reads the
 * displaced entry's value and score sectors and writes its slot; the next bucket of the chain is
 * a probe. A line of the tail index (core/global.hpp) read, or a word of it written, counts as one
 * bucket access, as it costs one memory transaction. The CPU backend's bulk victim select counts
 * each bucket its passes read as a probe plus its score line, and each chosen victim's check as
 * a probe. With one thread and batch size 1 the counts are deterministic.
 */
#pragma once

#include <ccht/core/config.hpp>

#include <cstdint>

namespace ccht {

/// Bytes and buckets touched, summed over operations.
struct access_counts {
  std::uint64_t bucket_reads = 0;   ///< buckets whose keys (or scores) were scanned
  std::uint64_t bucket_writes = 0;  ///< buckets whose slots were modified
  std::uint64_t bytes_read = 0;     ///< bytes read, counted in 32-byte sectors
  std::uint64_t bytes_written = 0;  ///< bytes written, counted in 32-byte sectors
  std::uint64_t kicks = 0;          ///< kick-out policies: residents displaced by insert chains
  /// Victims taken from a batch's bulk victim select (table_options::bulk_victim_select)
  /// instead of a search.
  std::uint64_t chosen_victims = 0;

  /// Adds another set of counts.
  CCHT_HOST_DEVICE access_counts& operator+=(access_counts const& o) noexcept {
    bucket_reads += o.bucket_reads;
    bucket_writes += o.bucket_writes;
    bytes_read += o.bytes_read;
    bytes_written += o.bytes_written;
    kicks += o.kicks;
    chosen_victims += o.chosen_victims;
    return *this;
  }
  /// Buckets read or written.
  CCHT_HOST_DEVICE std::uint64_t buckets() const noexcept { return bucket_reads + bucket_writes; }
};

namespace detail {
inline constexpr std::uint32_t sector = 32;

/// Counts a probe (version + keys) of one bucket.
template <int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void count_probe(access_counts* a) noexcept {
  if (a) {
    a->bucket_reads += 1;
    a->bytes_read += sector + (B * 8 + sector - 1) / sector * sector;
  }
}
/// Counts reading a bucket's score line.
template <int B>
CCHT_HOST_DEVICE CCHT_FORCEINLINE void count_scores(access_counts* a) noexcept {
  if (a) { a->bytes_read += (B * 8 + sector - 1) / sector * sector; }
}
/// Counts a read of one value sector.
CCHT_HOST_DEVICE CCHT_FORCEINLINE void count_value_read(access_counts* a) noexcept {
  if (a) { a->bytes_read += sector; }
}
/// Counts a score-only write (a promotion).
CCHT_HOST_DEVICE CCHT_FORCEINLINE void count_promote(access_counts* a) noexcept {
  if (a) { a->bytes_written += sector; }
}
/// Counts a slot write (key, value, score sectors and the version word) in one bucket.
CCHT_HOST_DEVICE CCHT_FORCEINLINE void count_slot_write(access_counts* a) noexcept {
  if (a) {
    a->bucket_writes += 1;
    a->bytes_written += 4 * sector;
  }
}
/// Counts reading one 128-byte line of the tail index (counted as one bucket read).
CCHT_HOST_DEVICE CCHT_FORCEINLINE void count_tail_read(access_counts* a) noexcept {
  if (a) {
    a->bucket_reads += 1;
    a->bytes_read += 4 * sector;
  }
}
/// Counts writing one word of the tail index (counted as one bucket write).
CCHT_HOST_DEVICE CCHT_FORCEINLINE void count_tail_write(access_counts* a) noexcept {
  if (a) {
    a->bucket_writes += 1;
    a->bytes_written += sector;
  }
}
}  // namespace detail

}  // namespace ccht
