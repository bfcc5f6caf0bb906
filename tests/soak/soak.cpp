// ccht_soak: the weight cache and the page cache as a long-running function runtime lives them,
// checking that nothing grows without bound (issue 31).
//
//   build/cpu/tests/ccht_soak                 20 s (what CI runs, as the ctest `soak.short`)
//   build/cpu/tests/ccht_soak --seconds 600   the long run (docs/hostile-use.md)
//
// One thread loads safetensors models through ccht::model_loader: a ring of model files, each
// rewritten with a new version (so new keys) every few loads, of 20 to 300 tensors, plus careless
// raw acquires that are abandoned or left unpublished until released. Another thread drives a
// ccht::page_cache with ever new keys: fills published or abandoned, hits checked, everything
// released. Each second it prints a row of what it samples; it fails (exit 1) when
//   - kernel mappings exceed the start's plus the weight cache's objects plus two per page,
//   - weight-cache objects exceed its pages (an idle object without pages must be forgotten),
//   - resident memory after the first quarter grows more than 32 MiB (--rss-slack-mib) past its
//     first-quarter peak,
//   - open file descriptors grow by more than 8,
//   - any byte served differs from what was written, or pins remain at the end.
#include <ccht/cache/model_loader.hpp>
#include <ccht/cache/page_cache.hpp>
#include <ccht/cache/weight_cache.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using ccht::key_type;

constexpr std::size_t page = 4096;

/// @p prefix followed by @p i (appended: GCC 12 warns falsely on "literal" + std::string&&).
std::string numbered(char const* prefix, long long i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}
constexpr std::size_t weight_pages = 4096;  // 16 MiB
constexpr std::size_t kv_pages = 2048;      // 8 MiB
constexpr int model_files = 48;

std::size_t count_lines(char const* path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) { ++n; }
  return n;
}

std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] auto const& e : fs::directory_iterator("/proc/self/fd")) { ++n; }
  return n;
}

std::size_t rss_kib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) { return std::strtoull(line.c_str() + 6, nullptr, 10); }
  }
  return 0;
}

/// Byte @p j of tensor @p t of version @p v of a model.
std::byte model_byte(int t, std::uint64_t v, std::size_t j) {
  return static_cast<std::byte>((t * 31 + v * 7 + j) & 0xff);
}

struct failures {
  std::mutex mu;
  std::vector<std::string> what;
  void add(std::string s) {
    std::lock_guard lock(mu);
    if (what.size() < 20) { what.push_back(std::move(s)); }
  }
  bool any() {
    std::lock_guard lock(mu);
    return !what.empty();
  }
};

/// Writes version @p v of model file @p path (atomically: a new inode each time).
void write_model(std::string const& path, std::uint64_t v, std::mt19937_64& rng) {
  int const tensors = 20 + static_cast<int>(rng() % 281);
  std::vector<std::vector<std::byte>> data(tensors);
  std::vector<ccht::st_tensor_data> ts;
  for (int t = 0; t < tensors; ++t) {
    std::size_t const bytes = 1 + rng() % (3 * page);
    data[t].resize(bytes);
    for (std::size_t j = 0; j < bytes; ++j) { data[t][j] = model_byte(t, v, j); }
    ts.push_back({numbered("blk.", t) + ".w", ccht::st_dtype::U8, {bytes}, data[t]});
  }
  std::string const tmp = path + ".tmp";
  ccht::write_safetensors(tmp, ts, {{"version", std::to_string(v)}});
  fs::rename(tmp, path);
}

void weights_loop(ccht::weight_cache<ccht::cpu_backend>& cache, fs::path const& dir,
                  clock_type::time_point end, failures& fail, std::atomic<std::uint64_t>& loads) {
  std::mt19937_64 rng(1);
  ccht::model_loader<ccht::cpu_backend> loader(cache);
  std::vector<std::uint64_t> version(model_files, 0);
  for (int f = 0; f < model_files; ++f) {
    write_model((dir / numbered("m", f)).string(), 0, rng);
  }
  key_type raw = 1ull << 60;
  while (clock_type::now() < end && !fail.any()) {
    int const f = static_cast<int>(rng() % model_files);
    std::string const path = (dir / numbered("m", f)).string();
    if (rng() % 4 == 0) { write_model(path, ++version[f], rng); }
    try {
      auto m = loader.load(path);
      for (int s = 0; s < 3; ++s) {
        auto const t = rng() % m.tensors().size();
        auto const& mt = m.tensors()[t];
        std::size_t const j = rng() % mt.bytes;
        if (mt.data[j] != model_byte(static_cast<int>(t), version[f], j)) {
          fail.add("model " + path + " tensor " + mt.name + " byte " + std::to_string(j) + " is wrong");
        }
      }
    } catch (ccht::error const& e) {
      if (e.code() != ccht::error_code::out_of_memory) { fail.add(e.what()); }
    }
    // A careless holder: raw objects left unpublished, then abandoned by their release path.
    ccht::object_request const r{++raw, 1 + rng() % (8 * page)};
    ccht::object_lease l;
    cache.acquire({&r, 1}, {&l, 1});
    if (l.status == ccht::object_status::fill) {
      if (rng() % 2 == 0) {
        cache.publish({&r.key, 1});
        cache.release({&r.key, 1});
      } else {
        cache.abandon({&r.key, 1});
      }
    } else if (l.status == ccht::object_status::hit) {
      cache.release({&r.key, 1});
    }
    loads.fetch_add(1, std::memory_order_relaxed);
  }
}

void pages_loop(ccht::page_cache<ccht::cpu_backend>& pc, clock_type::time_point end,
                failures& fail, std::atomic<std::uint64_t>& batches) {
  std::mt19937_64 rng(2);
  constexpr std::size_t batch = 32;
  key_type next = 1;
  std::vector<key_type> keys(batch), ek(batch), pub, ab;
  std::vector<ccht::page_id> pages(batch), ep(batch);
  std::vector<ccht::page_status> status(batch);
  while (clock_type::now() < end && !fail.any()) {
    for (auto& k : keys) {  // half new keys, half from the recent past
      k = rng() % 2 == 0 || next < 1000 ? next++ : next - 1 - rng() % 1000;
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::size_t const n = keys.size();
    pc.acquire({keys.data(), n}, {pages.data(), n}, {status.data(), n}, {ek.data(), n},
               {ep.data(), n});
    pub.clear();
    ab.clear();
    std::vector<key_type> held;
    for (std::size_t i = 0; i < n; ++i) {
      std::byte* p = status[i] == ccht::page_status::hit || status[i] == ccht::page_status::fill
                         ? pc.page_data(pages[i]) : nullptr;
      if (status[i] == ccht::page_status::fill) {
        std::memcpy(p, &keys[i], sizeof(key_type));
        (rng() % 5 == 0 ? ab : pub).push_back(keys[i]);
      } else if (status[i] == ccht::page_status::hit) {
        key_type got;
        std::memcpy(&got, p, sizeof got);
        if (got != keys[i]) { fail.add("page of key " + std::to_string(keys[i]) + " holds another key"); }
        held.push_back(keys[i]);
      }
    }
    if (!pub.empty()) { pc.publish(pub); }
    if (!ab.empty()) { pc.abandon(ab); }
    held.insert(held.end(), pub.begin(), pub.end());
    if (!held.empty()) { pc.release(held); }
    keys.resize(batch);
    batches.fetch_add(1, std::memory_order_relaxed);
  }
}

struct limits {
  std::size_t maps0 = 0, fds0 = 0, rss_warm_kib = 0;
  std::size_t rss_slack_kib = 32 * 1024;  ///< growth allowed past the first quarter's peak
};

bool check_sample(ccht::weight_cache<ccht::cpu_backend> const& wc, limits& lim, double frac,
                  failures& fail, std::uint64_t loads, std::uint64_t batches, double t) {
  auto const s = wc.stats();
  std::size_t const maps = count_lines("/proc/self/maps"), fds = open_fds(), rss = rss_kib();
  std::printf("| %6.1f | %8llu | %8llu | %7zu | %8zu | %6zu | %4zu | %8zu |\n", t,
              static_cast<unsigned long long>(loads), static_cast<unsigned long long>(batches),
              s.objects, maps, s.pages_pinned, fds, rss / 1024);
  std::fflush(stdout);
  if (maps > lim.maps0 + s.objects + 2 * weight_pages + 64) {
    fail.add("kernel mappings " + std::to_string(maps) + " exceed the bound");
  }
  // Objects: an idle one holds at least one resident page, so at most one per resident page,
  // plus the few being acquired.
  if (s.objects > s.bytes_resident / page + 16) {
    fail.add("weight-cache objects " + std::to_string(s.objects) + " for " +
             std::to_string(s.bytes_resident / page) + " resident pages");
  }
  if (fds > lim.fds0 + 8) { fail.add("open descriptors grew to " + std::to_string(fds)); }
  if (frac < 0.25) {
    lim.rss_warm_kib = std::max(lim.rss_warm_kib, rss);
  } else if (rss > lim.rss_warm_kib + lim.rss_slack_kib) {
    fail.add("resident memory grew from " + std::to_string(lim.rss_warm_kib / 1024) + " to " +
             std::to_string(rss / 1024) + " MiB");
  }
  return !fail.any();
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 20, rss_slack_mib = 32;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    if (a == "--seconds" && i + 1 < argc) {
      seconds = std::strtod(argv[++i], nullptr);
    } else if (a == "--rss-slack-mib" && i + 1 < argc) {  // sanitizers' shadow memory grows
      rss_slack_mib = std::strtod(argv[++i], nullptr);
    } else {
      std::fprintf(stderr, "usage: ccht_soak [--seconds N] [--rss-slack-mib M]\n");
      return 2;
    }
  }
  if (!(seconds > 0)) {
    std::fprintf(stderr, "ccht_soak: --seconds must be positive\n");
    return 2;
  }
  char tmpl[] = "/tmp/ccht-soak-XXXXXX";
  fs::path const dir = ::mkdtemp(tmpl);
  failures fail;
  int rc = 0;
  {
    ccht::weight_cache<ccht::cpu_backend> wc(weight_pages * page, page, {.cpu_threads = 1});
    ccht::page_cache<ccht::cpu_backend> pc(kv_pages * page, page, {.cpu_threads = 1});
    limits lim;
    lim.rss_slack_kib = static_cast<std::size_t>(rss_slack_mib * 1024);
    lim.maps0 = count_lines("/proc/self/maps");
    lim.fds0 = open_fds();
    auto const start = clock_type::now();
    auto const end = start + std::chrono::duration_cast<clock_type::duration>(
                                 std::chrono::duration<double>(seconds));
    std::atomic<std::uint64_t> loads{0}, batches{0};
    std::thread w([&] { weights_loop(wc, dir, end, fail, loads); });
    std::thread p([&] { pages_loop(pc, end, fail, batches); });
    std::printf("| second | loads | kv batches | objects | mappings | pinned | fds | RSS MiB |\n"
                "|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    while (clock_type::now() < end) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      double const t = std::chrono::duration<double>(clock_type::now() - start).count();
      if (!check_sample(wc, lim, t / seconds, fail, loads.load(), batches.load(), t)) { break; }
    }
    w.join();
    p.join();
    auto const ws = wc.stats();
    auto const ps = pc.stats();
    if (ws.pages_pinned != 0 || ws.objects_filling != 0) { fail.add("weight-cache pins remain"); }
    if (ps.pages_pinned != 0 || ps.pages_filling != 0) { fail.add("page-cache pins remain"); }
    std::printf("soak: %llu model loads, %llu KV batches, %llu pages evicted from objects\n",
                static_cast<unsigned long long>(loads.load()),
                static_cast<unsigned long long>(batches.load()),
                static_cast<unsigned long long>(ws.pages_evicted));
  }
  fs::remove_all(dir);
  for (auto const& f : fail.what) {
    std::fprintf(stderr, "soak: FAILED: %s\n", f.c_str());
    rc = 1;
  }
  if (rc == 0) { std::printf("soak: bounded (mappings, objects, descriptors, memory) and no pin left\n"); }
  return rc;
}
