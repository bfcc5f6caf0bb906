// ccht quickstart: build a small table, fill it past its capacity, run one mixed batch of
// lookups, upserts and erases, and print what happened. The README's first command runs this.
#include <ccht/ccht.hpp>

#include <cstdio>
#include <random>
#include <vector>

namespace {

template <class Backend>
int run() {
  using table_t = ccht::table<Backend, ccht::lru>;
  constexpr std::size_t slots = 1 << 16;
  table_t table(slots);
  std::printf("ccht %s: table on the %s backend, %zu slots in %zu buckets of %d, in-bucket %s\n",
              CCHT_VERSION, Backend::name, table.num_slots(), table.num_buckets(),
              table_t::bucket_size, ccht::lru::name);

  // 1. Insert 1.25x as many keys as there are slots: the overflow evicts, never kicks out.
  std::size_t const n = slots + slots / 4;
  std::vector<ccht::key_type> keys(n);
  std::vector<ccht::value_type> values(n);
  for (std::size_t i = 0; i < n; ++i) {
    keys[i] = i * 0x9E3779B97F4A7C15ull % 1000000007ull;
    values[i] = keys[i] * 10;
  }
  std::vector<ccht::key_type> ek(n);
  std::vector<ccht::value_type> ev(n);
  std::size_t const evicted = table.insert_or_assign(keys, values, ek, ev);
  std::printf("insert_or_assign: %zu keys -> size %zu, %zu evicted (every one reported)\n", n,
              table.size(), evicted);

  // 2. One mixed batch: finds of recent and evicted keys, upserts of new keys, erases.
  std::mt19937_64 rng(42);
  std::size_t const m = 100000;
  std::vector<ccht::op_code> ops(m);
  std::vector<ccht::key_type> mk(m);
  std::vector<ccht::value_type> mv(m), out(m);
  std::vector<ccht::op_status> status(m);
  for (std::size_t i = 0; i < m; ++i) {
    auto const r = rng() % 100;
    ops[i] = r < 70 ? ccht::op_code::find
             : r < 95 ? ccht::op_code::insert_or_assign
                      : ccht::op_code::erase;
    mk[i] = ops[i] == ccht::op_code::insert_or_assign ? 2000000000ull + rng() % 50000
                                                     : keys[rng() % n];
    mv[i] = mk[i] * 10;
  }
  std::vector<ccht::key_type> mek(m);
  std::vector<ccht::value_type> mev(m);
  std::size_t const mixed_evicted = table.execute(ops, mk, mv, out, status, mek, mev);
  std::size_t find_hits = 0, find_misses = 0, erased = 0, erase_absent = 0, wrong = 0;
  std::size_t upsert[5] = {};
  for (std::size_t i = 0; i < m; ++i) {
    bool const hit = status[i] == ccht::op_status::hit;
    switch (ops[i]) {
      case ccht::op_code::find:
        (hit ? find_hits : find_misses) += 1;
        wrong += hit && out[i] != mk[i] * 10;  // every value written was key * 10
        break;
      case ccht::op_code::insert_or_assign: ++upsert[static_cast<int>(status[i])]; break;
      case ccht::op_code::erase: (hit ? erased : erase_absent) += 1; break;
    }
  }
  auto const as = [](ccht::op_status s) { return static_cast<int>(s); };
  std::printf("mixed batch of %zu elements (70%% find, 25%% upsert, 5%% erase) in one call:\n", m);
  std::printf("  find:   %zu hits (values checked: %zu wrong), %zu misses (keys evicted earlier)\n",
              find_hits, wrong, find_misses);
  std::printf("  upsert: %zu updated in place, %zu into a free slot, %zu after evicting a bucket "
              "tail (%zu evicted pairs reported)\n",
              upsert[as(ccht::op_status::assigned)], upsert[as(ccht::op_status::inserted)],
              upsert[as(ccht::op_status::inserted_evicted)], mixed_evicted);
  std::printf("  erase:  %zu removed, %zu were not present\n", erased, erase_absent);
  std::printf("size now %zu of %zu slots\n", table.size(), table.num_slots());
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main() {
  try {
    int rc = run<ccht::cpu_backend>();
#if CCHT_WITH_CUDA
    if (ccht::cuda_backend::available()) {
      std::printf("\n(the CUDA backend is built and a GPU is present; the CPU run above uses the "
                  "same core)\n");
    }
#endif
    return rc;
  } catch (ccht::error const& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
