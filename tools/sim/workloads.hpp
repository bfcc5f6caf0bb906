/**
 * @file workloads.hpp
 * @brief Seeded synthetic request generators: YCSB-style zipfian, uniform and latest, plus
 *        looping scans and a scan-resistance mix.
 *
 * The same seed and parameters always give the same stream. Keys are scrambled item ranks
 * (a bijective 64-bit mix), so popular keys are spread over the key space, as in YCSB's
 * scrambled zipfian.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ccht::sim {

/// Key distributions.
enum class distribution {
  zipfian,   ///< YCSB zipfian over a fixed key space (theta settable, default 0.99)
  uniform,   ///< every key equally likely
  latest,    ///< YCSB latest: updates insert new keys; queries favour the newest keys (zipfian)
  scan,      ///< a loop over the key space in order: LRU-hostile when the cache is smaller
  scan_mix,  ///< zipfian requests interleaved with one-pass scans of cold keys
};

/// CLI name of a distribution ("zipfian", ..., "scan-mix").
std::string_view to_string(distribution d) noexcept;
/// Parses a CLI name; throws std::invalid_argument for an unknown one.
distribution parse_distribution(std::string_view name);

/// Parameters of a synthetic workload.
struct workload_options {
  distribution dist = distribution::zipfian;  ///< key distribution
  std::uint64_t keys = 100000;                ///< key-space size (initial keys for latest)
  std::uint64_t requests = 1000000;           ///< requests to generate
  double zipf_theta = 0.99;                   ///< skew, in [0, 1)
  double read_ratio = 1.0;                    ///< fraction of requests that are queries
  double scan_fraction = 0.2;                 ///< scan_mix: fraction of requests from scans
  std::uint64_t seed = 1;                     ///< generator seed
};

/// One request: a query (GET; a miss inserts in replay) or an update (PUT: upsert).
struct request {
  std::uint64_t key;  ///< the key
  bool update;        ///< true for an update
};

/// Checks options; throws std::invalid_argument saying which one is out of range.
void validate(workload_options const& o);

/// Generates the whole request stream.
std::vector<request> generate(workload_options const& o);

/// Short description, e.g. "zipfian(theta=0.99) keys=100000 requests=1000000 read=0.95".
std::string describe(workload_options const& o);

/**
 * @brief YCSB zipfian rank generator over [0, n): rank 0 is the most popular.
 *
 * Gray et al.'s method (SIGMOD 1994) as in YCSB; the item count may grow (latest), updating
 * zeta incrementally.
 */
class zipfian_generator {
 public:
  /// Ranks over [0, n) with skew @p theta in [0, 1).
  zipfian_generator(std::uint64_t n, double theta);
  /// Grows the item count to @p n (>= current).
  void grow(std::uint64_t n);
  /// Next rank from a uniform variate @p u in [0, 1).
  std::uint64_t next(double u) const noexcept;
  /// Item count.
  std::uint64_t items() const noexcept { return n_; }
  /// Probability of rank @p r under this distribution (for tests).
  double probability(std::uint64_t r) const noexcept;

 private:
  void recompute() noexcept;
  std::uint64_t n_;
  double theta_, zetan_, zeta2_, alpha_, eta_;
};

/// Maps an item rank to a key: bijective, never a reserved ccht key.
std::uint64_t scramble(std::uint64_t rank, std::uint64_t seed) noexcept;

}  // namespace ccht::sim
