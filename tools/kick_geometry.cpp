// Where the paper's memory-access saving comes from: bucket size.
//
// Runs ccht's own core (bucket_ops over a caller-owned bucket array, one thread, batch 1) at
// bucket sizes 2, 4, 8 and 16, on a cache workload (find; a miss inserts). ccht::table always
// uses 16-slot buckets; the smaller sizes exist only here, to show what depends on them:
// 1. Uniform keys, ratios 0.7-0.9: buckets touched and kicks per insert of double LRU and the
//    LRU-CHT kick-out baseline, and the change of double LRU against LRU-CHT (the paper's saving).
// 2. Zipfian keys (theta 0.99), ratio 0.7: hit-ratio loss of double LRU and coarse LRU against
//    LRU-CHT (coarse LRU's bucket recency shelters a hot key's cold bucket-mates).
//
// usage: ccht_kick_geometry [capacity] [requests]
#include <ccht/core/bucket.hpp>
#include <ccht/core/bucket_ops.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/core/tile.hpp>

#include "sim/workloads.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

struct run_result {
  double buckets_per_insert = 0;
  double kicks_per_insert = 0;
  double hit_ratio = 0;
};

/// One replay on a fresh table of @p B-slot buckets holding at most @p capacity entries.
template <class Policy, int B>
run_result replay(std::uint64_t capacity, double ratio, std::uint64_t requests, bool zipf = false) {
  double const want = static_cast<double>(capacity) / ratio / B;  // slots = capacity / ratio
  auto const nb = want < 2.0 ? std::uint32_t{2} : static_cast<std::uint32_t>(want + 0.5);
  std::vector<ccht::bucket<B>> buckets(nb);
  for (auto& b : buckets) {
    for (int s = 0; s < B; ++s) {
      b.keys[s] = ccht::empty_key;
      b.values[s] = 0;
      b.scores[s] = 0;
    }
  }
  std::vector<std::uint32_t> versions(nb, 0);
  std::vector<ccht::score_type> tails(nb, ccht::detail::no_rank);
  std::uint64_t live = 0;
  ccht::bucket_array_view<B> v;
  v.buckets = buckets.data();
  v.versions = versions.data();
  v.num_buckets = nb;
  v.seed = ccht::default_seed;
  v.live = &live;
  v.capacity = capacity < std::uint64_t{nb} * B ? capacity : std::uint64_t{nb} * B;
  v.samples = 64;  // ccht::default_tail_samples: the tail index, four lines
  v.tails = tails.data();

  using ops = ccht::bucket_ops<Policy, B>;
  ccht::scalar_tile const tile{};
  std::mt19937_64 rng(12345);
  std::uint64_t const universe = capacity * (zipf ? 8 : 2);
  ccht::sim::zipfian_generator const z(universe, 0.99);
  std::uniform_real_distribution<double> u(0, 1);
  ccht::access_counts acc;
  std::uint64_t hits = 0, inserts = 0, measured = 0;
  ccht::tick_type tick = 0;
  // The first `requests` fill the cache; the next `requests` are measured.
  for (std::uint64_t r = 0; r < 2 * requests; ++r) {
    bool const warm = r >= requests;
    std::uint64_t const rank = zipf ? z.next(u(rng)) : rng() % universe;
    ccht::key_type const k = rank * 0x9E3779B97F4A7C15ull % (std::uint64_t{1} << 62) + 1;
    ccht::value_type val;
    if (ops::find(tile, v, k, ++tick, val)) {
      hits += warm;
      measured += warm;
      continue;
    }
    measured += warm;
    ccht::key_type ek;
    ccht::value_type ev;
    ops::insert_or_assign(tile, v, k, k, ++tick, ek, ev, warm ? &acc : nullptr);
    inserts += warm;
  }
  run_result out;
  out.buckets_per_insert = double(acc.buckets()) / double(inserts);
  out.kicks_per_insert = double(acc.kicks) / double(inserts);
  out.hit_ratio = double(hits) / double(measured);
  return out;
}

template <int B>
void rows(std::uint64_t capacity, std::uint64_t requests) {
  for (double ratio : {0.7, 0.8, 0.9}) {
    run_result const d = replay<ccht::double_lru, B>(capacity, ratio, requests);
    run_result const c = replay<ccht::lru_cht, B>(capacity, ratio, requests);
    std::printf("| %2d | %.1f | %6.2f | %6.2f | %7.2f | %+8.2f%% | %.4f | %.4f |\n", B, ratio,
                d.buckets_per_insert, c.buckets_per_insert, c.kicks_per_insert,
                100.0 * (d.buckets_per_insert / c.buckets_per_insert - 1.0), d.hit_ratio,
                c.hit_ratio);
    std::fflush(stdout);
  }
}

}  // namespace

template <int B>
void hit_rows(std::uint64_t capacity, std::uint64_t requests) {
  double const ratio = 0.7;
  run_result const c = replay<ccht::lru_cht, B>(capacity, ratio, requests, true);
  run_result const d = replay<ccht::double_lru, B>(capacity, ratio, requests, true);
  run_result const g = replay<ccht::coarse_lru, B>(capacity, ratio, requests, true);
  std::printf("| %2d | %.1f | %.4f | %.4f | %.4f | %+.3f | %+.3f |\n", B, ratio, c.hit_ratio,
              d.hit_ratio, g.hit_ratio, 100.0 * (c.hit_ratio - d.hit_ratio),
              100.0 * (c.hit_ratio - g.hit_ratio));
  std::fflush(stdout);
}

/// Calls f.template operator()<B>() for each bucket size studied.
template <class F>
void for_bucket_sizes(F&& f) {
  f.template operator()<2>();
  f.template operator()<4>();
  f.template operator()<8>();
  f.template operator()<16>();
}

int main(int argc, char** argv) {
  std::uint64_t const capacity = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1u << 16;
  std::uint64_t const requests = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1u << 19;
  if (capacity < 64 || requests == 0) {
    std::fprintf(stderr, "usage: %s [capacity >= 64] [requests > 0]\n", argv[0]);
    return 2;
  }
  std::printf("Uniform keys over 2 x %llu, %llu warm-up then %llu measured requests, batch 1, "
              "tail index (64 ranked buckets) for both.\n\n",
              static_cast<unsigned long long>(capacity), static_cast<unsigned long long>(requests),
              static_cast<unsigned long long>(requests));
  std::printf("| slots per bucket | ratio | double LRU buckets/insert | LRU-CHT buckets/insert | "
              "LRU-CHT kicks/insert | change | double LRU hit ratio | LRU-CHT hit ratio |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for_bucket_sizes([&]<int B>() { rows<B>(capacity, requests); });

  std::printf("\nZipfian keys (theta 0.99) over 8 x %llu, ratio 0.7; loss = LRU-CHT hit ratio minus "
              "the policy's, in points.\n\n",
              static_cast<unsigned long long>(capacity));
  std::printf("| slots per bucket | ratio | LRU-CHT hit ratio | double LRU | coarse LRU | double "
              "LRU loss | coarse LRU loss |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  for_bucket_sizes([&]<int B>() { hit_rows<B>(capacity, requests); });
  return 0;
}
