/**
 * @file replay.hpp
 * @brief Replays a request stream through a named policy and reports hits, misses, evictions
 *        and time: the exact references (lru, fifo, lfu) and the table policies (every policy
 *        of include/ccht/policy_list.hpp, spelt ccht-lru, ccht-double-lru, ..., cht-lru,
 *        cht-random) on either backend.
 */
#pragma once

#include "workloads.hpp"

#include <ccht/core/accounting.hpp>
#include <ccht/table.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ccht::sim {

/// How the table policies are replayed.
struct replay_options {
  std::size_t batch = 1;      ///< requests per table call (1 = exact sequential semantics)
  std::string backend = "cpu";  ///< "cpu" or "cuda"
  /// Capacity over slots for policies with a global capacity layer (ccht-double-lru,
  /// ccht-coarse-lru): slots = capacity / ratio. The plain ccht-* policies have no global layer,
  /// so their slots are the capacity rounded down to whole buckets.
  double slots_ratio = 0.9;
  std::uint32_t global_samples = 0;  ///< buckets ranked per global eviction (0: the default)
  /// Victim search of ccht-double-lru and cht-lru: "two-level", "tail-index" or "sampled"
  /// (ccht::victim_search).
  std::string global_search = "two-level";
  /// With global_search "own-first": table_options::own_first_slack.
  std::uint32_t own_slack = ccht::default_own_first_slack;
  /// table_options::bulk_victim_select (ccht-double-lru: batches that need a victim per bucket
  /// choose them in one pass).
  bool bulk_select = true;
  int cpu_threads = 1;        ///< CPU backend threads per call
  std::uint64_t seed = 0x9e3779b97f4a7c15ull;  ///< table hash seed
};

/// One result row.
struct replay_result {
  std::string trace;          ///< trace file or workload description
  std::string policy;         ///< policy name
  std::size_t capacity = 0;   ///< objects the policy may hold
  std::size_t slots = 0;      ///< table slots (0 for exact policies)
  std::uint64_t requests = 0; ///< queries replayed (GETs)
  std::uint64_t updates = 0;  ///< updates replayed (PUTs)
  std::uint64_t hits = 0;     ///< queries that hit
  std::uint64_t evictions = 0;///< entries evicted
  double seconds = 0;         ///< wall time of the replay
  std::string backend;        ///< "host" for exact policies, else the table's backend
  std::size_t batch = 1;      ///< batch size used
  std::uint64_t inserts = 0;  ///< table upserts issued (misses and updates)
  ccht::access_counts lookup_accesses;  ///< buckets/bytes touched by finds (table policies)
  ccht::access_counts insert_accesses;  ///< buckets/bytes touched by upserts (table policies)
  /// Buckets touched per lookup (0 for exact policies).
  double buckets_per_lookup() const noexcept {
    return requests ? double(lookup_accesses.buckets()) / double(requests) : 0.0;
  }
  /// Buckets touched per upsert.
  double buckets_per_insert() const noexcept {
    return inserts ? double(insert_accesses.buckets()) / double(inserts) : 0.0;
  }
  /// Buckets touched per request (lookups and upserts over queries and updates).
  double buckets_per_op() const noexcept {
    auto const ops = requests + updates;
    return ops ? double(lookup_accesses.buckets() + insert_accesses.buckets()) / double(ops) : 0.0;
  }
  /// Misses (queries that did not hit).
  std::uint64_t misses() const noexcept { return requests - hits; }
  /// Misses over queries (0 when there were none).
  double miss_ratio() const noexcept { return requests ? double(misses()) / double(requests) : 0.0; }
  /// Requests (queries and updates) per second.
  double throughput() const noexcept {
    return seconds > 0 ? double(requests + updates) / seconds : 0.0;
  }
};

/// Policy names replay() accepts, in display order: the exact references lru, fifo and lfu, then
/// every table policy of include/ccht/policy_list.hpp in the tools' spelling (ccht-lru, ...).
std::vector<std::string> const& known_policies();

/// The message replay() and the CLI give for a name not in known_policies(): it lists them.
std::string unknown_policy_message(std::string const& policy);

/// Slots of a table with a global capacity layer: capacity / ratio in whole buckets (at least
/// the capacity and two buckets). Throws std::invalid_argument for a ratio outside (0, 1].
std::size_t table_slots_for_global(std::size_t capacity, double slots_ratio);

/// Slots the table gets for a capacity: rounded down to whole buckets. Throws
/// std::invalid_argument when that is under two buckets.
std::size_t table_slots_for_capacity(std::size_t capacity, double slots_ratio);

/**
 * @brief Replays @p requests through @p policy with room for @p capacity objects.
 *
 * Every query is a GET whose miss inserts the key; every update is an upsert. Table policies run
 * in batches: the batch's queries are looked up, then its misses and updates are upserted. So a
 * key that misses twice in one batch counts two misses (batch 1 is the exact sequential replay;
 * larger batches model a GPU serving a batch at once).
 * Throws std::invalid_argument for an unknown policy, a capacity too small, or a backend that
 * was not built.
 */
replay_result replay(std::span<request const> requests, std::string const& policy,
                     std::size_t capacity, replay_options const& options);

/// Wraps a plain key stream (a trace) as queries.
std::vector<request> as_queries(std::span<std::uint64_t const> keys);

}  // namespace ccht::sim
