// `ccht weights`: safetensors models through ccht::weight_cache (sim/model_runtime.hpp).
#include "commands.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>
#include <stdexcept>

namespace ccht::cli {

std::size_t parse_bytes(std::string const& text, char const* flag) {
  std::size_t v = 0;
  char const* b = text.data();
  char const* e = text.data() + text.size();
  auto const [ptr, ec] = std::from_chars(b, e, v);
  std::string const suffix(ptr, e);
  std::size_t mul = 0;
  if (suffix.empty() || suffix == "B") { mul = 1; }
  else if (suffix == "K") { mul = 1000; }
  else if (suffix == "M") { mul = 1000 * 1000; }
  else if (suffix == "G") { mul = 1000 * 1000 * 1000; }
  else if (suffix == "KiB") { mul = std::size_t{1} << 10; }
  else if (suffix == "MiB") { mul = std::size_t{1} << 20; }
  else if (suffix == "GiB") { mul = std::size_t{1} << 30; }
  if (ec != std::errc() || ptr == b || mul == 0 || v == 0 || v > SIZE_MAX / mul) {
    throw std::invalid_argument(std::string(flag) + ": expected a positive size such as 268435456, "
                                "256MiB or 2M, got '" + text + "'");
  }
  return v * mul;
}

int cmd_weights(sim::weights_options const& o, bool json) {
  sim::weights_result const r = sim::run_weights(o);
  double const cold_mean = r.misses ? r.cold_seconds / static_cast<double>(r.misses) : 0;
  double const warm_mean = r.hits ? r.warm_seconds / static_cast<double>(r.hits) : 0;
  nlohmann::json j = {
      {"loads", r.loads},
      {"hits", r.hits},
      {"misses", r.misses},
      {"hit_ratio", r.loads ? static_cast<double>(r.hits) / static_cast<double>(r.loads) : 0.0},
      {"bytes_loaded", r.bytes_loaded},
      {"load_gbps", r.load_gbps},
      {"memcpy_gbps", r.memcpy_gbps},
      {"load_fraction_of_memcpy", r.memcpy_gbps > 0 ? r.load_gbps / r.memcpy_gbps : 0.0},
      {"cold_load_seconds", cold_mean},
      {"warm_load_seconds", warm_mean},
      {"cold_load_seconds_median", r.cold_median},
      {"warm_load_seconds_median", r.warm_median},
      {"warm_speedup_median", r.warm_median > 0 ? r.cold_median / r.warm_median : 0.0},
      {"budget_bytes", r.stats.budget_bytes},
      {"page_bytes", r.stats.page_bytes},
      {"huge_pages", r.stats.huge_pages},
      {"layout", o.layout == model_layout::packed ? "packed" : "per-tensor"},
      {"io_threads", o.io_threads},
      {"bytes_resident", r.stats.bytes_resident},
      {"pages_evicted", r.stats.pages_evicted},
      {"pages_filled", r.stats.pages_filled},
      {"pages_kept", r.stats.pages_kept},
      {"verified", o.verify},
      {"verify_failures", r.verify_failures},
      {"files", o.files},
  };
  if (json) {
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("| loads | hit ratio | cold load (median) | warm load (median) | warm speedup | "
                "load GB/s | memcpy GB/s | fraction |\n|---|---|---|---|---|---|---|---|\n");
    std::printf("| %zu | %.3f | %.3f ms | %.1f us | %.0fx | %.2f | %.2f | %.2f |\n", r.loads,
                j["hit_ratio"].get<double>(), r.cold_median * 1e3, r.warm_median * 1e6,
                j["warm_speedup_median"].get<double>(), r.load_gbps, r.memcpy_gbps,
                j["load_fraction_of_memcpy"].get<double>());
  }
  for (auto const& d : r.digest) {
    nlohmann::json const row = {{"file", d.file}, {"name", d.name}, {"dtype", d.dtype},
                                {"shape", d.shape}, {"bytes", d.bytes}, {"crc32", d.crc32}};
    std::printf("%s\n", row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  if (r.verify_failures != 0) {
    std::fprintf(stderr, "ccht weights: %zu tensors differed from their files\n", r.verify_failures);
    return 1;
  }
  return 0;
}

}  // namespace ccht::cli
