// ccht_bench: CPU-backend microbenchmarks of ccht::table next to libcuckoo, the concurrent CPU
// cuckoo map (design notes §5), on the same keys at the same load.
//
// Setup (all fixed-seed, built once per process and shared by the repetitions):
// - kSlots = 2^22 slots (ccht: 2^18 buckets of 16, 96 MiB; libcuckoo: 2^20 buckets of 4), far
//   larger than the 32 MiB L3 of the development machines, so every probe goes to DRAM.
// - Keys come from a 64-bit bijective mixer (splitmix64) of a running index, so they are distinct
//   and well spread; reserved sentinels (ccht::is_reserved_key) are skipped.
// - Lookups run on a table filled to exactly 90% of its slots. ccht evicts instead of kicking out,
//   so the fill inserts fresh keys until the size is exactly 0.9 * slots; the resident keys are
//   then exported, shuffled, and the same keys are inserted into libcuckoo (same keys, same load).
//   "find_all_hits" looks up 2^20 resident keys; "find_half_misses" 2^19 resident keys and 2^19
//   keys never inserted, shuffled together.
// - ccht inserts go into a 100% full table: every fresh key evicts (the cache's steady state).
//   libcuckoo cannot evict (it would grow), so its inserts put 2^18 fresh keys into a table
//   pre-sized by its constructor and pre-filled to 0.9 * slots - 2^18 (load 0.84 -> 0.90), and
//   the keys are erased again outside the timed region.
// - Both run on 2 threads: ccht through table_options::cpu_threads = 2 (batches of 2^20 keys are
//   cut into chunks on OpenMP threads), libcuckoo with 2 std::threads each doing half of a batch.
// - libcuckoo runs with its defaults (4-slot buckets, std::hash, which is the identity on
//   integers; the keys are already mixed). The "libcuckoo_thp" rows give it an allocator that
//   backs its bucket array with transparent huge pages, as ccht's CPU backend does for its own,
//   to show how much of the gap is page size rather than the table.
// Every benchmark reports items_per_second (keys per wall-clock second) and a sanity counter
// (hit_ratio, evict_ratio, load) that must read as expected.
#include <ccht/ccht.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#ifndef CCHT_BENCH_LIBCUCKOO
#define CCHT_BENCH_LIBCUCKOO 0
#endif
#if CCHT_BENCH_LIBCUCKOO
#include <libcuckoo/cuckoohash_map.hh>

#include <sys/mman.h>
#endif

namespace {

using ccht::key_type;
using ccht::value_type;
using ccht_table = ccht::table<ccht::cpu_backend, ccht::lru>;

constexpr std::uint64_t kSeed = 0x00c0ffee5eed2024ull;
constexpr std::size_t kSlots = std::size_t{1} << 22;
constexpr double kLoad = 0.9;
constexpr std::size_t kBatch = std::size_t{1} << 20;           // keys per timed batch
constexpr std::size_t kCuckooInsertBatch = std::size_t{1} << 18;  // libcuckoo insert batch
constexpr int kThreads = 2;

/// splitmix64's finaliser: a bijection of 64-bit words with good avalanche.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The one source of keys in the process: mix64 of a running index, so no key repeats.
class key_stream {
 public:
  key_type next() noexcept {
    while (true) {
      key_type const k = mix64(kSeed ^ index_++);
      if (!ccht::is_reserved_key(k)) { return k; }
    }
  }
  void fill(key_type* out, std::size_t n) noexcept {
    for (std::size_t i = 0; i < n; ++i) { out[i] = next(); }
  }

 private:
  std::uint64_t index_ = 0;
};

key_stream& keys() {
  static key_stream s;
  return s;
}

constexpr value_type value_of(key_type k) noexcept { return k * 3 + 1; }

ccht::table_options ccht_options() {
  ccht::table_options o;
  o.cpu_threads = kThreads;
  return o;
}

std::size_t target_size(std::size_t slots) {
  return static_cast<std::size_t>(kLoad * static_cast<double>(slots));
}

/// Inserts fresh keys until the table holds exactly @p target entries (or is full). Inserting
/// exactly the deficit can never overshoot: a fresh key either takes a free slot or evicts.
void fill_ccht(ccht_table& t, std::size_t target, std::size_t min_batch = 1) {
  std::vector<key_type> k, ek;
  std::vector<value_type> v, ev;
  for (std::size_t size = t.size(); size < target; size = t.size()) {
    std::size_t const n = std::max(target - size, min_batch);
    k.resize(n);
    v.resize(n);
    ek.resize(n);
    ev.resize(n);
    keys().fill(k.data(), n);
    for (std::size_t i = 0; i < n; ++i) { v[i] = value_of(k[i]); }
    t.insert_or_assign(k, v, ek, ev);
  }
}

/// Every key resident in @p t, shuffled with a fixed seed.
std::vector<key_type> resident_keys(ccht_table const& t) {
  std::vector<key_type> k(t.num_slots());
  std::vector<value_type> v(t.num_slots());
  k.resize(t.export_entries(k, v));
  std::shuffle(k.begin(), k.end(), std::mt19937_64(kSeed));
  return k;
}

/// Runs f(begin, end) over [0, n) on kThreads threads (the caller is one of them).
template <class F>
void run_threads(std::size_t n, F const& f) {
  std::vector<std::thread> workers;
  workers.reserve(kThreads - 1);
  for (int t = 1; t < kThreads; ++t) {
    workers.emplace_back([&f, n, t] { f(n * t / kThreads, n * (t + 1) / kThreads); });
  }
  f(0, n / kThreads);
  for (auto& w : workers) { w.join(); }
}

/// The 0.9-load table and the lookup batches, shared by every find benchmark.
struct find_fixture {
  ccht_table table{kSlots, ccht_options()};
  std::vector<key_type> resident;      // every resident key, shuffled
  std::vector<key_type> all_hits;      // kBatch resident keys
  std::vector<key_type> half_misses;   // kBatch/2 resident + kBatch/2 absent, shuffled
  std::vector<value_type> values_out = std::vector<value_type>(kBatch);
  std::unique_ptr<bool[]> found_out = std::make_unique<bool[]>(kBatch);

  find_fixture() {
    fill_ccht(table, target_size(table.num_slots()));
    resident = resident_keys(table);
    if (resident.size() != target_size(table.num_slots())) {
      throw std::runtime_error("ccht fill missed its target size");
    }
    all_hits.assign(resident.begin(), resident.begin() + kBatch);
    // Different resident keys from all_hits (resident holds 3.77M keys), plus fresh ones.
    half_misses.assign(resident.end() - kBatch / 2, resident.end());
    half_misses.resize(kBatch);
    keys().fill(half_misses.data() + kBatch / 2, kBatch - kBatch / 2);
    std::shuffle(half_misses.begin(), half_misses.end(), std::mt19937_64(kSeed + 1));
  }
};

find_fixture& find_state() {
  static find_fixture f;
  return f;
}

/// A full table (every slot used) and scratch batches, shared by the insert and mixed benchmarks.
struct full_fixture {
  ccht_table table{kSlots, ccht_options()};
  std::vector<key_type> batch_keys = std::vector<key_type>(kBatch);
  std::vector<value_type> batch_values = std::vector<value_type>(kBatch);
  std::vector<key_type> evicted_keys = std::vector<key_type>(kBatch);
  std::vector<value_type> evicted_values = std::vector<value_type>(kBatch);
  std::vector<key_type> recent;  // the keys of the last batch inserted: resident, recently used

  full_fixture() {
    fill_ccht(table, table.num_slots(), std::size_t{1} << 18);
    if (table.size() != table.num_slots()) { throw std::runtime_error("ccht table not full"); }
    recent = resident_keys(table);
    recent.resize(kBatch);
  }

  /// Next batch of fresh keys and their values.
  void next_batch(std::size_t n) {
    keys().fill(batch_keys.data(), n);
    for (std::size_t i = 0; i < n; ++i) { batch_values[i] = value_of(batch_keys[i]); }
  }
};

full_fixture& full_state() {
  static full_fixture f;
  return f;
}

void set_rate(benchmark::State& state, std::size_t per_iteration) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(per_iteration));
}

double fraction(std::size_t part, benchmark::State const& state, std::size_t per_iteration) {
  return static_cast<double>(part) /
         (static_cast<double>(state.iterations()) * static_cast<double>(per_iteration));
}

// ---- ccht ----------------------------------------------------------------------------------------

void ccht_find(benchmark::State& state, std::vector<key_type> const& (*batch)(find_fixture&)) {
  auto& f = find_state();
  auto const& k = batch(f);
  std::span<bool> found(f.found_out.get(), kBatch);
  std::size_t hits = 0;
  for (auto _ : state) {
    f.table.find(k, f.values_out, found);
    state.PauseTiming();
    hits += static_cast<std::size_t>(std::count(found.begin(), found.end(), true));
    state.ResumeTiming();
  }
  set_rate(state, kBatch);
  state.counters["hit_ratio"] = fraction(hits, state, kBatch);
}

void BM_ccht_find_all_hits(benchmark::State& state) {
  ccht_find(state, [](find_fixture& f) -> std::vector<key_type> const& { return f.all_hits; });
}

void BM_ccht_find_half_misses(benchmark::State& state) {
  ccht_find(state, [](find_fixture& f) -> std::vector<key_type> const& { return f.half_misses; });
}

void BM_ccht_insert_evict(benchmark::State& state) {
  auto& f = full_state();
  std::size_t evicted = 0;
  for (auto _ : state) {
    state.PauseTiming();
    f.next_batch(kBatch);
    state.ResumeTiming();
    evicted += f.table.insert_or_assign(f.batch_keys, f.batch_values, f.evicted_keys,
                                        f.evicted_values);
  }
  f.recent = f.batch_keys;
  set_rate(state, kBatch);
  state.counters["evict_ratio"] = fraction(evicted, state, kBatch);
}

/// 50/50 batch of finds of recently inserted keys and upserts of fresh keys, one execute() call.
void BM_ccht_mixed_50_50(benchmark::State& state) {
  auto& f = full_state();
  std::vector<ccht::op_code> ops(kBatch);
  std::vector<key_type> k(kBatch), ek(kBatch);
  std::vector<value_type> v(kBatch), out(kBatch), ev(kBatch);
  std::vector<ccht::op_status> status(kBatch);
  std::mt19937_64 rng(kSeed + 2);
  std::size_t hits = 0, finds = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<key_type> inserted;
    inserted.reserve(kBatch);
    for (std::size_t i = 0; i < kBatch; ++i) {
      bool const is_find = (rng() & 1) != 0;
      ops[i] = is_find ? ccht::op_code::find : ccht::op_code::insert_or_assign;
      k[i] = is_find ? f.recent[rng() % f.recent.size()] : keys().next();
      v[i] = value_of(k[i]);
      if (!is_find) { inserted.push_back(k[i]); }
    }
    state.ResumeTiming();
    f.table.execute(ops, k, v, out, status, ek, ev);
    state.PauseTiming();
    for (std::size_t i = 0; i < kBatch; ++i) {
      finds += ops[i] == ccht::op_code::find;
      hits += status[i] == ccht::op_status::hit;
    }
    f.recent.swap(inserted);
    state.ResumeTiming();
  }
  set_rate(state, kBatch);
  state.counters["find_hit_ratio"] = finds ? static_cast<double>(hits) / finds : 0.0;
}

// ---- libcuckoo -----------------------------------------------------------------------------------
#if CCHT_BENCH_LIBCUCKOO

/**
 * std::allocator, except that allocations of 2 MiB or more are 2 MiB-aligned and advised to use
 * transparent huge pages, as ccht's CPU backend does for its bucket array. Only for the
 * "libcuckoo_thp" rows, which show how much of the gap is page size rather than the algorithm.
 */
template <class T>
struct thp_allocator {
  using value_type = T;
  static constexpr std::size_t huge = std::size_t{2} << 20;

  thp_allocator() = default;
  template <class U>
  thp_allocator(thp_allocator<U> const&) noexcept {}

  T* allocate(std::size_t n) {
    std::size_t const bytes = n * sizeof(T);
    if (bytes < huge || alignof(T) > huge) { return std::allocator<T>{}.allocate(n); }
    std::size_t const rounded = (bytes + huge - 1) / huge * huge;
    void* p = std::aligned_alloc(huge, rounded);
    if (p == nullptr) { throw std::bad_alloc(); }
    (void)madvise(p, rounded, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < huge || alignof(T) > huge) {
      std::allocator<T>{}.deallocate(p, n);
    } else {
      std::free(p);
    }
  }
  template <class U>
  bool operator==(thp_allocator<U> const&) const noexcept { return true; }
};

using cuckoo_map = libcuckoo::cuckoohash_map<key_type, value_type>;
using cuckoo_map_thp =
    libcuckoo::cuckoohash_map<key_type, value_type, std::hash<key_type>, std::equal_to<key_type>,
                              thp_allocator<std::pair<key_type const, value_type>>>;

/// A libcuckoo map of kSlots slots that must never grow (growth would throw instead).
template <class Map>
std::unique_ptr<Map> make_cuckoo() {
  auto m = std::make_unique<Map>(kSlots);
  m->maximum_hashpower(m->hashpower());
  return m;
}

template <class Map>
void cuckoo_insert(Map& m, key_type const* k, std::size_t n) {
  run_threads(n, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) { m.insert(k[i], value_of(k[i])); }
  });
}

/// A libcuckoo map holding exactly the keys resident in ccht's 0.9-load table.
template <class Map>
Map& cuckoo_find_map() {
  static std::unique_ptr<Map> m = [] {
    auto map = make_cuckoo<Map>();
    auto const& r = find_state().resident;
    cuckoo_insert(*map, r.data(), r.size());
    if (map->size() != r.size() || map->capacity() != kSlots) {
      throw std::runtime_error("libcuckoo fill failed");
    }
    return map;
  }();
  return *m;
}

template <class Map>
void cuckoo_find(benchmark::State& state, std::vector<key_type> const& k) {
  auto& m = cuckoo_find_map<Map>();
  auto& f = find_state();
  value_type* values = f.values_out.data();
  bool* found = f.found_out.get();
  std::size_t hits = 0;
  for (auto _ : state) {
    run_threads(kBatch, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) { found[i] = m.find(k[i], values[i]); }
    });
    benchmark::ClobberMemory();
    state.PauseTiming();
    hits += static_cast<std::size_t>(std::count(found, found + kBatch, true));
    state.ResumeTiming();
  }
  set_rate(state, kBatch);
  state.counters["hit_ratio"] = fraction(hits, state, kBatch);
  state.counters["load"] = m.load_factor();
}

template <class Map>
void BM_libcuckoo_find_all_hits(benchmark::State& state) {
  cuckoo_find<Map>(state, find_state().all_hits);
}

template <class Map>
void BM_libcuckoo_find_half_misses(benchmark::State& state) {
  cuckoo_find<Map>(state, find_state().half_misses);
}

/// A libcuckoo map filled to 0.9 * kSlots - kCuckooInsertBatch fresh keys; each timed batch of
/// kCuckooInsertBatch fresh keys takes it to exactly 0.9 and is erased again untimed.
template <class Map>
Map& cuckoo_insert_map() {
  static std::unique_ptr<Map> m = [] {
    auto map = make_cuckoo<Map>();
    std::vector<key_type> pre(target_size(kSlots) - kCuckooInsertBatch);
    keys().fill(pre.data(), pre.size());
    cuckoo_insert(*map, pre.data(), pre.size());
    return map;
  }();
  return *m;
}

template <class Map>
void BM_libcuckoo_insert(benchmark::State& state) {
  auto& m = cuckoo_insert_map<Map>();
  std::vector<key_type> k(kCuckooInsertBatch);
  for (auto _ : state) {
    state.PauseTiming();
    keys().fill(k.data(), k.size());
    state.ResumeTiming();
    cuckoo_insert(m, k.data(), k.size());
    state.PauseTiming();
    if (m.size() != target_size(kSlots)) { state.SkipWithError("libcuckoo insert failed"); }
    run_threads(k.size(), [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) { m.erase(k[i]); }
    });
    state.ResumeTiming();
  }
  set_rate(state, kCuckooInsertBatch);
  state.counters["final_load"] = static_cast<double>(target_size(kSlots)) / kSlots;
}

#endif  // CCHT_BENCH_LIBCUCKOO

}  // namespace

// Registration order is run order: the find benchmarks do not change which keys are resident;
// the insert benchmarks run on their own tables.
#define CCHT_BENCH(fn, name) \
  BENCHMARK(fn)->Name(name)->UseRealTime()->Unit(benchmark::kMillisecond)
CCHT_BENCH(BM_ccht_find_all_hits, "find_all_hits/ccht");
#if CCHT_BENCH_LIBCUCKOO
CCHT_BENCH(BM_libcuckoo_find_all_hits<cuckoo_map>, "find_all_hits/libcuckoo");
CCHT_BENCH(BM_libcuckoo_find_all_hits<cuckoo_map_thp>, "find_all_hits/libcuckoo_thp");
#endif
CCHT_BENCH(BM_ccht_find_half_misses, "find_half_misses/ccht");
#if CCHT_BENCH_LIBCUCKOO
CCHT_BENCH(BM_libcuckoo_find_half_misses<cuckoo_map>, "find_half_misses/libcuckoo");
CCHT_BENCH(BM_libcuckoo_find_half_misses<cuckoo_map_thp>, "find_half_misses/libcuckoo_thp");
#endif
CCHT_BENCH(BM_ccht_insert_evict, "insert/ccht_full_table_evicting");
#if CCHT_BENCH_LIBCUCKOO
CCHT_BENCH(BM_libcuckoo_insert<cuckoo_map>, "insert/libcuckoo_to_0.9");
CCHT_BENCH(BM_libcuckoo_insert<cuckoo_map_thp>, "insert/libcuckoo_thp_to_0.9");
#endif
CCHT_BENCH(BM_ccht_mixed_50_50, "mixed_50_50/ccht_full_table");

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) { return 1; }
  benchmark::AddCustomContext("ccht.slots", std::to_string(kSlots));
  benchmark::AddCustomContext("ccht.load_factor", std::to_string(kLoad));
  benchmark::AddCustomContext("ccht.batch", std::to_string(kBatch));
  benchmark::AddCustomContext("threads", std::to_string(kThreads));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
