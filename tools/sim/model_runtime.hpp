// A small function runtime over ccht::weight_cache, shared by `ccht weights` and
// examples/model_cache: invocations of models drawn from a Zipf popularity, each one a
// model_loader::load (cold when it reads the file, warm when everything hits), checked byte for
// byte against the file, and timed; beside a plain memcpy of the same bytes, timed in the same run.
#pragma once

#include <ccht/cache/model_loader.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ccht::sim {

/// Writes a synthetic model of about @p bytes in @p tensors tensors (F32, F16, I64 and a few small
/// biases), bytes from @p seed.
void write_synthetic_model(std::string const& path, std::size_t bytes, int tensors,
                           std::uint64_t seed);

/// Options of a run.
struct weights_options {
  std::vector<std::string> files;               ///< safetensors files (the models)
  std::size_t budget = std::size_t{256} << 20;  ///< the cache's bytes
  std::size_t page_bytes = std::size_t{2} << 20;  ///< bytes per page
  std::size_t invocations = 100;                ///< loads
  double zipf = 1.0;                            ///< popularity exponent: p(i) ~ 1 / (i + 1)^zipf
  std::uint64_t seed = 1;                       ///< popularity draws
  model_layout layout = model_layout::per_tensor;  ///< objects per model
  int io_threads = 2;                           ///< threads of a fill (and of the memcpy)
  huge_pages huge = huge_pages::automatic;      ///< hugetlb pages for the pool
  bool verify = true;                           ///< compare every load with the file
  bool digest = false;                          ///< CRC-32 of every tensor, from the cache's memory
  remote_store* remote = nullptr;               ///< a shared remote tier under the cache (not owned)
};

/// One tensor's digest, read back from the cache.
struct digest_row {
  std::string file, name, dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
};

/// What a run measured.
struct weights_result {
  std::size_t loads = 0;        ///< invocations
  std::size_t hits = 0;         ///< loads that read nothing (warm)
  std::size_t misses = 0;       ///< loads that read from the file (cold, whole or in part)
  std::uint64_t bytes_loaded = 0;  ///< bytes read from files
  std::size_t remote_loads = 0;    ///< cold loads that read nothing from the file (all remote)
  std::uint64_t remote_pages = 0;  ///< pages copied from the remote tier
  std::uint64_t remote_bytes = 0;  ///< their bytes
  std::uint64_t remote_writes = 0; ///< pages queued for the remote tier
  remote_stats remote;             ///< the remote store's counters at the end
  double cold_seconds = 0;      ///< sum over cold loads
  double warm_seconds = 0;      ///< sum over warm loads
  double cold_median = 0, warm_median = 0;  ///< medians (0 when none)
  double load_gbps = 0;         ///< bytes_loaded / cold_seconds, in GB/s
  double memcpy_gbps = 0;       ///< memcpy of the largest model's bytes, same threads, same run
  std::size_t verify_failures = 0;  ///< tensors that differed from the file
  std::size_t model_bytes_max = 0;  ///< largest model's data bytes
  weight_cache_stats stats{};   ///< the cache's counters at the end
  std::vector<digest_row> digest;   ///< with weights_options::digest
};

/// Runs the invocations. @throws ccht::error for a bad file or cache geometry
weights_result run_weights(weights_options const& o);

/// The JSON Lines of `ccht weights --json` (and `python -m ccht weights`): the run's summary
/// object, then one object per digest row. One function, so both print the same lines.
std::vector<std::string> weights_json_lines(weights_options const& o, weights_result const& r);

/// Bytes of a size argument: digits with an optional B, K, M, G, T (powers of 1000) or KiB, MiB,
/// GiB, TiB (powers of 1024) suffix, case as written. Throws std::invalid_argument naming @p flag
/// and the suffixes otherwise.
std::size_t parse_bytes(std::string const& text, char const* flag);

}  // namespace ccht::sim
