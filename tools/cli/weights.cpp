// `ccht weights`: safetensors models through ccht::weight_cache (sim/model_runtime.hpp).
#include "commands.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace ccht::cli {

int cmd_weights(sim::weights_options o, bool json, remote_cli_options const& remote_opt) {
  std::unique_ptr<remote_store> remote = make_remote(remote_opt);
  o.remote = remote.get();
  sim::weights_result const r = sim::run_weights(o);
  std::vector<std::string> const lines = sim::weights_json_lines(o, r);
  if (json) {
    std::printf("%s\n", lines.front().c_str());
  } else {
    double const hit_ratio = r.loads ? static_cast<double>(r.hits) / static_cast<double>(r.loads) : 0.0;
    double const speedup = r.warm_median > 0 ? r.cold_median / r.warm_median : 0.0;
    double const fraction = r.memcpy_gbps > 0 ? r.load_gbps / r.memcpy_gbps : 0.0;
    std::printf("| loads | hit ratio | cold load (median) | warm load (median) | warm speedup | "
                "load GB/s | memcpy GB/s | fraction |\n|---|---|---|---|---|---|---|---|\n");
    std::printf("| %zu | %.3f | %.3f ms | %.1f us | %.0fx | %.2f | %.2f | %.2f |\n", r.loads,
                hit_ratio, r.cold_median * 1e3, r.warm_median * 1e6, speedup, r.load_gbps,
                r.memcpy_gbps, fraction);
    if (remote) {
      std::printf("\nremote tier (%s): %zu loads served from it, %llu pages in, %llu pages "
                  "written, %llu errors, %llu integrity failures\n",
                  remote->describe().c_str(), r.remote_loads,
                  static_cast<unsigned long long>(r.remote_pages),
                  static_cast<unsigned long long>(r.remote_writes),
                  static_cast<unsigned long long>(r.remote.errors),
                  static_cast<unsigned long long>(r.remote.integrity_failures));
    }
  }
  for (std::size_t i = 1; i < lines.size(); ++i) { std::printf("%s\n", lines[i].c_str()); }
  int const rc = remote_verdict(remote.get(), r.remote_writes);
  if (r.verify_failures != 0) {
    std::fprintf(stderr, "ccht weights: %zu tensors differed from their files\n", r.verify_failures);
    return 1;
  }
  return rc;
}

}  // namespace ccht::cli
