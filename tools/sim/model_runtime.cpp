// The function runtime of `ccht weights` and examples/model_cache (model_runtime.hpp).
#include "model_runtime.hpp"

#include <ccht/detail/system.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

namespace ccht::sim {
namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) { return 0; }
  std::sort(v.begin(), v.end());
  std::size_t const n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<std::byte> read_all(std::string const& path) {
  ccht::detail::require_regular_file(path);  // a FIFO would block the open below for ever
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) { throw error(error_code::invalid_argument, path + ": cannot open"); }
  std::vector<std::byte> v(static_cast<std::size_t>(in.tellg()));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size()));
  return v;
}

/// GB/s of a memcpy of @p bytes split over @p threads, into a destination touched beforehand
/// (the median of three).
double memcpy_gbps(std::size_t bytes, int threads) {
  if (bytes == 0) { return 0; }
  std::vector<std::byte> src(bytes, std::byte{1}), dst(bytes, std::byte{0});
  std::vector<double> runs;
  for (int r = 0; r < 3; ++r) {
    auto const t0 = std::chrono::steady_clock::now();
    std::size_t const per = (bytes + threads - 1) / threads;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      std::size_t const from = std::min(bytes, per * t), len = std::min(per, bytes - from);
      pool.emplace_back([&, from, len] { std::memcpy(dst.data() + from, src.data() + from, len); });
    }
    for (auto& th : pool) { th.join(); }
    runs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return static_cast<double>(bytes) / median_of(runs) / 1e9;
}

}  // namespace

void write_synthetic_model(std::string const& path, std::size_t bytes, int tensors,
                           std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::byte>> data;
  std::vector<st_tensor_data> ts;
  int const big = std::max(1, tensors - tensors / 4);  // a quarter are small (biases, norms)
  std::size_t const per = std::max<std::size_t>(64, bytes / static_cast<std::size_t>(big));
  for (int t = 0; t < tensors; ++t) {
    bool const small = t >= big;
    st_dtype const dt = small ? st_dtype::F32 : (t % 5 == 4 ? st_dtype::F16 : (t % 7 == 6 ? st_dtype::I64 : st_dtype::F32));
    std::uint64_t const eb = dtype_bytes(dt);
    std::uint64_t const cols = small ? 256 + rng() % 512 : 1024;
    std::uint64_t const rows = small ? 1 : std::max<std::uint64_t>(1, per / (cols * eb));
    data.emplace_back(rows * cols * eb);
    auto& d = data.back();
    for (std::size_t i = 0; i < d.size(); i += 8) {
      std::uint64_t const x = rng();
      std::memcpy(d.data() + i, &x, std::min<std::size_t>(8, d.size() - i));
    }
    std::string const name = small ? "layers." + std::to_string(t) + ".norm.bias"
                                   : "layers." + std::to_string(t) + ".weight";
    ts.push_back({name, dt, small ? std::vector<std::uint64_t>{cols} : std::vector<std::uint64_t>{rows, cols}, d});
  }
  write_safetensors(path, ts, {{"generator", "ccht model_runtime"}});
}

weights_result run_weights(weights_options const& o) {
  if (o.files.empty()) { throw error(error_code::invalid_argument, "no model files given"); }
  // Each file once: validated, in the OS page cache (cold loads read from memory, as the goal
  // defines them), and kept as the reference for verification.
  std::vector<std::vector<std::byte>> contents;
  std::vector<st_header> headers;
  weights_result r;
  for (auto const& f : o.files) {
    headers.push_back(read_safetensors(f));
    contents.push_back(read_all(f));
    r.model_bytes_max = std::max<std::size_t>(r.model_bytes_max, headers.back().data_bytes);
  }
  weight_cache<cpu_backend> cache(o.budget, o.page_bytes, {.huge = o.huge});
  model_loader<cpu_backend> loader(
      cache, {.layout = o.layout, .io_threads = o.io_threads, .remote = o.remote});

  std::vector<double> weights;
  for (std::size_t i = 0; i < o.files.size(); ++i) { weights.push_back(1.0 / std::pow(double(i + 1), o.zipf)); }
  std::discrete_distribution<std::size_t> pick(weights.begin(), weights.end());
  std::mt19937_64 rng(o.seed);
  std::vector<double> cold, warm;
  auto check = [&](loaded_model<cpu_backend> const& m, std::size_t f) {
    for (auto const& t : headers[f].tensors) {
      model_tensor const* mt = m.find(t.name);
      if (mt == nullptr || mt->bytes != t.bytes() ||
          (t.bytes() != 0 && std::memcmp(mt->data, contents[f].data() + headers[f].data_offset + t.begin, t.bytes()) != 0)) {
        ++r.verify_failures;
      }
    }
  };
  for (std::size_t i = 0; i < o.invocations; ++i) {
    std::size_t const f = pick(rng);
    auto m = loader.load(o.files[f]);
    auto const& rep = m.report();
    ++r.loads;
    if (rep.warm()) {
      ++r.hits;
      warm.push_back(rep.seconds);
      r.warm_seconds += rep.seconds;
    } else {
      ++r.misses;
      cold.push_back(rep.seconds);
      r.cold_seconds += rep.seconds;
      r.bytes_loaded += rep.bytes_read;
      r.remote_loads += rep.bytes_read == 0 ? 1 : 0;
    }
    r.remote_pages += rep.remote_pages;
    r.remote_bytes += rep.remote_bytes;
    r.remote_writes += rep.remote_writes;
    if (o.verify) { check(m, f); }
  }
  r.cold_median = median_of(cold);
  r.warm_median = median_of(warm);
  r.load_gbps = r.cold_seconds > 0 ? static_cast<double>(r.bytes_loaded) / r.cold_seconds / 1e9 : 0;
  r.memcpy_gbps = memcpy_gbps(r.model_bytes_max, std::max(1, o.io_threads));
  if (o.digest) {
    for (std::size_t f = 0; f < o.files.size(); ++f) {
      auto m = loader.load(o.files[f]);
      for (auto const& t : m.tensors()) {
        auto const bytes = std::span<std::byte const>(t.data, t.bytes);
        r.digest.push_back({o.files[f], t.name, to_string(t.dtype), t.shape, t.bytes,
                            t.bytes ? crc32(bytes) : crc32({})});
      }
    }
  }
  r.stats = cache.stats();
  if (o.remote != nullptr) {
    o.remote->flush(std::chrono::seconds(30));
    r.remote = o.remote->stats();
  }
  return r;
}

std::vector<std::string> weights_json_lines(weights_options const& o, weights_result const& r) {
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
  if (o.remote != nullptr) {
    j["remote_loads"] = r.remote_loads;
    j["remote_pages"] = r.remote_pages;
    j["remote_bytes"] = r.remote_bytes;
    j["remote_writes"] = r.remote_writes;
    j["remote_store_hits"] = r.remote.hits;
    j["remote_misses"] = r.remote.misses;
    j["remote_hit_bytes"] = r.remote.hit_bytes;
    j["remote_puts"] = r.remote.puts;
    j["remote_put_bytes"] = r.remote.put_bytes;
    j["remote_errors"] = r.remote.errors;
    j["remote_timeouts"] = r.remote.timeouts;
    j["remote_integrity_failures"] = r.remote.integrity_failures;
    j["remote_dropped"] = r.remote.dropped;
  }
  auto const dump = [](nlohmann::json const& v) {
    return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  std::vector<std::string> lines{dump(j)};
  for (auto const& d : r.digest) {
    lines.push_back(dump({{"file", d.file}, {"name", d.name}, {"dtype", d.dtype},
                          {"shape", d.shape}, {"bytes", d.bytes}, {"crc32", d.crc32}}));
  }
  return lines;
}

std::size_t parse_bytes(std::string const& text, char const* flag) {
  struct unit {
    std::string_view suffix;
    std::size_t mul;
  };
  // Case matters: "m" could be milli, "Mb" megabits; only these spellings are accepted.
  constexpr std::size_t k = 1000;
  static constexpr unit units[] = {
      {"", 1},           {"B", 1},          {"K", k},          {"M", k * k},
      {"G", k * k * k},  {"T", k * k * k * k},                 {"KiB", std::size_t{1} << 10},
      {"MiB", std::size_t{1} << 20},        {"GiB", std::size_t{1} << 30},
      {"TiB", std::size_t{1} << 40}};
  std::size_t v = 0;
  char const* b = text.data();
  char const* e = text.data() + text.size();
  auto const [ptr, ec] = std::from_chars(b, e, v);
  std::string_view const suffix(ptr, static_cast<std::size_t>(e - ptr));
  std::size_t mul = 0;
  for (auto const& u : units) {
    if (suffix == u.suffix) { mul = u.mul; }
  }
  if (ec != std::errc() || ptr == b || mul == 0 || v == 0 || v > SIZE_MAX / mul) {
    throw std::invalid_argument(std::string(flag) + ": expected a positive size such as 268435456, "
                                "256MiB or 2M (suffixes B, K, M, G, T = powers of 1000; KiB, MiB, "
                                "GiB, TiB = powers of 1024), got '" + text + "'");
  }
  return v * mul;
}

}  // namespace ccht::sim
