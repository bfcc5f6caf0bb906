// examples/model_cache: a serverless function runtime that loads its models' weights through
// ccht::weight_cache. It writes a few small safetensors models (more than the budget holds),
// serves invocations drawn from a skewed popularity, checks every loaded tensor byte for byte
// against its file, and reports cold and warm load times and the hit ratio.
//
//   ccht_model_cache [--models N] [--model-mib M] [--budget-mib B] [--page-kib P]
//                    [--invocations I] [--zipf S] [--dir D]
#include "sim/model_runtime.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

int main(int argc, char** argv) {
  std::size_t models = 5, model_mib = 4, budget_mib = 10, page_kib = 256, invocations = 80;
  double zipf = 1.0;
  std::string dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string const a = argv[i];
    char const* v = argv[i + 1];
    if (a == "--models") { models = std::strtoull(v, nullptr, 10); }
    else if (a == "--model-mib") { model_mib = std::strtoull(v, nullptr, 10); }
    else if (a == "--budget-mib") { budget_mib = std::strtoull(v, nullptr, 10); }
    else if (a == "--page-kib") { page_kib = std::strtoull(v, nullptr, 10); }
    else if (a == "--invocations") { invocations = std::strtoull(v, nullptr, 10); }
    else if (a == "--zipf") { zipf = std::strtod(v, nullptr); }
    else if (a == "--dir") { dir = v; }
    else {
      std::fprintf(stderr, "model_cache: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  bool const own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/ccht-model-cache-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) { std::perror("mkdtemp"); return 1; }
    dir = tmpl;
  }
  try {
    ccht::sim::weights_options o;
    for (std::size_t m = 0; m < models; ++m) {
      std::string const path = dir + "/model" + std::to_string(m) + ".safetensors";
      ccht::sim::write_synthetic_model(path, model_mib << 20, 12, 1000 + m);
      o.files.push_back(path);
    }
    o.budget = budget_mib << 20;
    o.page_bytes = page_kib << 10;
    o.invocations = invocations;
    o.zipf = zipf;
    auto const r = ccht::sim::run_weights(o);
    std::printf("model cache: %zu models of %zu MiB, budget %zu MiB in %zu KiB pages%s\n", models,
                model_mib, budget_mib, page_kib, r.stats.huge_pages ? " (huge pages)" : "");
    std::printf("  %zu invocations: %zu warm (all hits), %zu cold; hit ratio %.3f\n", r.loads, r.hits,
                r.misses, r.loads ? double(r.hits) / double(r.loads) : 0.0);
    std::printf("  cold load median %.3f ms, warm load median %.1f us (%.0fx faster)\n",
                r.cold_median * 1e3, r.warm_median * 1e6,
                r.warm_median > 0 ? r.cold_median / r.warm_median : 0.0);
    std::printf("  read %.1f MiB at %.2f GB/s (memcpy of the same bytes: %.2f GB/s); "
                "%llu pages evicted, %llu kept on refill\n",
                double(r.bytes_loaded) / (1 << 20), r.load_gbps, r.memcpy_gbps,
                static_cast<unsigned long long>(r.stats.pages_evicted),
                static_cast<unsigned long long>(r.stats.pages_kept));
    std::printf("  every tensor checked against its file: %s\n",
                r.verify_failures == 0 ? "all equal" : "MISMATCH");
    if (own_dir) { std::filesystem::remove_all(dir); }
    return r.verify_failures == 0 && r.hits > 0 && r.misses > 0 ? 0 : 1;
  } catch (std::exception const& e) {
    std::fprintf(stderr, "model_cache: %s\n", e.what());
    if (own_dir) { std::filesystem::remove_all(dir); }
    return 1;
  }
}
