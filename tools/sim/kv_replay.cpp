// The KV replay engine (kv_replay.hpp): a prefix KV cache over ccht::page_cache or
// ccht::tiered_page_cache on the CPU backend, and the exact pinned LRU it is compared with.
#include "kv_replay.hpp"

#include <ccht/backend.hpp>
#include <ccht/cache/page_cache.hpp>
#include <ccht/cache/page_pool.hpp>
#include <ccht/cache/tiered_page_cache.hpp>
#include <ccht/core/hash.hpp>
#include <ccht/core/policy.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <unordered_set>

namespace ccht::sim {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::uint64_t pattern_seed = 0x6b765f7061676521ull;  // "kv_page!"
constexpr std::uint64_t word_seed = 0x243f6a8885a308d3ull;

/// The request's keys without repeats, first occurrences in order; returns the repeats.
std::size_t dedup(kv_request const& req, std::vector<key_type>& out,
                  std::unordered_set<key_type>& seen) {
  out.clear();
  seen.clear();
  for (std::uint64_t k : req) {
    if (seen.insert(k).second) { out.push_back(k); }
  }
  return req.size() - out.size();
}

/// Adds one failed invariant to @p r, keeping the first message.
void fail(kv_replay_result& r, std::string const& what) {
  if (r.invariant_failures++ == 0) { r.invariant_message = what; }
}

/// Length of the leading run of hits.
std::uint64_t leading_hits(std::vector<bool> const& hit) {
  std::uint64_t n = 0;
  while (n < hit.size() && hit[n]) { ++n; }
  return n;
}

/// Checks the gauges of one page_cache_stats after a request has released everything.
void check_idle(kv_replay_result& r, page_cache_stats const& s, char const* tier,
                std::uint64_t request) {
  if (s.pages_pinned != 0 || s.pages_filling != 0) {
    fail(r, std::string(tier) + " tier: " + std::to_string(s.pages_pinned) + " pinned and " +
                std::to_string(s.pages_filling) + " filling pages left after request " +
                std::to_string(request) + " released its pages");
  }
  if (s.pages_resident + s.pages_free != s.pages || s.pages_resident > s.pages) {
    fail(r, std::string(tier) + " tier: resident " + std::to_string(s.pages_resident) +
                " + free " + std::to_string(s.pages_free) + " != pages " +
                std::to_string(s.pages) + " after request " + std::to_string(request));
  }
}

/// The end-of-replay checks of one tier: the gauges, and index entries == resident pages.
template <class Cache>
void check_final(kv_replay_result& r, Cache const& c, page_cache_stats const& s,
                 char const* tier) {
  check_idle(r, s, tier, r.requests);
  std::size_t const entries = c.index().size();
  if (entries != s.pages_resident) {
    fail(r, std::string(tier) + " tier: the index holds " + std::to_string(entries) +
                " entries but " + std::to_string(s.pages_resident) + " pages are resident");
  }
}

void check_counter(kv_replay_result& r, char const* what, std::uint64_t stats_value,
                   std::uint64_t counted) {
  if (stats_value != counted) {
    fail(r, std::string("stats().") + what + " = " + std::to_string(stats_value) +
                " but the replay counted " + std::to_string(counted));
  }
}

template <class Policy, bool Tiered>
kv_replay_result run_page_cache(std::span<kv_request const> reqs, kv_replay_options const& o) {
  page_cache_options po;
  po.table_ratio = o.table_ratio;
  po.cpu_threads = o.cpu_threads;
  using single_t = page_cache<cpu_backend, Policy>;
  using tiered_t = tiered_page_cache<cpu_backend, Policy>;
  std::unique_ptr<single_t> single;
  std::unique_ptr<tiered_t> tiered;
  if constexpr (Tiered) {
    tiered = std::make_unique<tiered_t>(o.pages * o.page_bytes, o.host_pages * o.page_bytes,
                                        o.page_bytes, po, po);
    if (o.remote != nullptr) {
      tiered->attach_remote(o.remote, o.remote_write_through ? remote_write::through
                                                             : remote_write::back);
    }
  } else {
    single = std::make_unique<single_t>(o.pages * o.page_bytes, o.page_bytes, po);
  }
  auto& upper = [&]() -> single_t& {
    if constexpr (Tiered) { return tiered->upper(); } else { return *single; }
  }();
  std::size_t const pb = o.page_bytes;

  kv_replay_result r;
  std::vector<key_type> keys, fills, pinned, ek;
  std::vector<page_id> pages, ep;
  std::vector<page_status> status;
  std::vector<bool> hit;
  std::unique_ptr<bool[]> from_lower, from_remote;
  std::size_t from_lower_cap = 0;
  std::unordered_set<key_type> seen;
  std::uint64_t counted_lower = 0, counted_remote = 0;

  auto const t0 = clock_type::now();
  for (kv_request const& req : reqs) {
    r.duplicate_refs += dedup(req, keys, seen);
    ++r.requests;
    std::size_t const n = keys.size();
    r.page_refs += n;
    if (n == 0) { continue; }
    pages.assign(n, no_page);
    status.assign(n, page_status::miss);
    if constexpr (Tiered) {
      if (from_lower_cap < n) {
        from_lower.reset(new bool[n]);
        from_remote.reset(new bool[n]);
        from_lower_cap = n;
      }
      tiered->acquire(keys, pages, status, std::span<bool>(from_lower.get(), n),
                      std::span<bool>(from_remote.get(), n));
    } else {
      ek.resize(n);
      ep.resize(n);
      single->acquire(keys, pages, status, ek, ep);
    }
    fills.clear();
    pinned.clear();
    hit.assign(n, false);
    for (std::size_t i = 0; i < n; ++i) {
      switch (status[i]) {
        case page_status::hit:
          ++r.page_hits;
          hit[i] = true;
          if constexpr (Tiered) {
            counted_lower += from_lower[i] ? 1 : 0;
            counted_remote += from_remote[i] ? 1 : 0;
          }
          if (!kv_check_pattern(keys[i], upper.page_data(pages[i]), pb)) { ++r.check_failures; }
          pinned.push_back(keys[i]);
          break;
        case page_status::fill:
          ++r.page_misses;
          kv_fill_pattern(keys[i], upper.page_data(pages[i]), pb);
          fills.push_back(keys[i]);
          pinned.push_back(keys[i]);
          break;
        case page_status::pending: ++r.pending; break;
        case page_status::no_space: ++r.no_space; break;
        default:
          fail(r, std::string("acquire returned '") + to_string(status[i]) + "' for key " +
                      std::to_string(keys[i]) + " of request " + std::to_string(r.requests));
          break;
      }
    }
    r.prefix_hit_pages += leading_hits(hit);
    if constexpr (Tiered) {
      if (!fills.empty()) { tiered->publish(fills); }
      if (!pinned.empty()) { tiered->release(pinned); }
      tier_stats const ts = tiered->stats();
      check_idle(r, ts.upper, "upper", r.requests);
      check_idle(r, ts.lower, "host", r.requests);
    } else {
      if (!fills.empty()) { single->publish(fills); }
      if (!pinned.empty()) { single->release(pinned); }
      check_idle(r, single->stats(), "page cache", r.requests);
    }
  }
  if constexpr (Tiered) {
    if (o.remote != nullptr && !o.remote->flush(std::chrono::seconds(30))) {
      fail(r, "the remote tier's write-back queue did not drain in 30 s");
    }
  }
  r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();

  if constexpr (Tiered) {
    tier_stats const ts = tiered->stats();
    r.remote = o.remote != nullptr;
    r.remote_hits = ts.remote_hits;
    r.remote_lookups = ts.remote_lookups;
    r.remote_writes = ts.remote_writes;
    r.remote_write_drops = ts.remote_write_drops;
    r.remote_counters = ts.remote;
    check_counter(r, "remote_hits", ts.remote_hits, counted_remote);
    r.evictions = ts.upper.evictions;
    r.lower_hits = ts.lower_hits;
    r.spills = ts.spills;
    r.spill_failures = ts.spill_failures;
    r.host_evictions = ts.lower.evictions;
    r.pages_resident = ts.upper.pages_resident;
    check_counter(r, "lower_hits", ts.lower_hits, counted_lower);
    check_counter(r, "upper.hits", ts.upper.hits, r.page_hits - counted_lower - counted_remote);
    check_counter(r, "upper.fills", ts.upper.fills, r.page_misses + counted_lower + counted_remote);
    check_counter(r, "upper.no_space", ts.upper.no_space, r.no_space);
    check_final(r, tiered->upper(), ts.upper, "upper");
    check_final(r, tiered->lower(), ts.lower, "host");
  } else {
    page_cache_stats const s = single->stats();
    r.evictions = s.evictions;
    r.pages_resident = s.pages_resident;
    check_counter(r, "hits", s.hits, r.page_hits);
    check_counter(r, "fills", s.fills, r.page_misses);
    check_counter(r, "no_space", s.no_space, r.no_space);
    check_counter(r, "pending", s.pending, r.pending);
    check_final(r, *single, s, "page cache");
  }
  return r;
}

kv_replay_result run_exact(std::span<kv_request const> reqs, kv_replay_options const& o) {
  exact_pinned_lru upper(o.pages);
  std::optional<exact_pinned_lru> lower;
  if (o.host_pages > 0) { lower.emplace(o.host_pages); }
  kv_replay_result r;
  std::vector<key_type> keys, victims;
  std::vector<std::size_t> fills;
  std::vector<bool> hit;
  std::unordered_set<key_type> seen;
  auto const t0 = clock_type::now();
  for (kv_request const& req : reqs) {
    r.duplicate_refs += dedup(req, keys, seen);
    ++r.requests;
    std::size_t const n = keys.size();
    r.page_refs += n;
    hit.assign(n, false);
    fills.clear();
    victims.clear();
    // 1. the upper tier, in order, pinning what it holds or inserts
    for (std::size_t i = 0; i < n; ++i) {
      bool evicted = false;
      std::uint64_t victim = 0;
      switch (upper.acquire(keys[i], evicted, victim)) {
        case exact_pinned_lru::outcome::hit: hit[i] = true; break;
        case exact_pinned_lru::outcome::miss: fills.push_back(i); break;
        case exact_pinned_lru::outcome::no_space: ++r.no_space; break;
      }
      if (evicted) { victims.push_back(victim); }
    }
    if (lower) {
      // 2. spills: the victims, pinned in the host tier while the batch is spilled
      for (std::uint64_t v : victims) {
        bool evicted = false;
        std::uint64_t victim = 0;
        if (lower->acquire(v, evicted, victim) == exact_pinned_lru::outcome::no_space) {
          ++r.spill_failures;
        } else {
          ++r.spills;
        }
      }
      lower->unpin_all();
      // 3. upper fills the host tier holds are served from it
      std::size_t kept = 0;
      for (std::size_t i : fills) {
        if (lower->touch(keys[i])) {
          hit[i] = true;
          ++r.lower_hits;
        } else {
          fills[kept++] = i;
        }
      }
      fills.resize(kept);
    }
    for (bool h : hit) { r.page_hits += h ? 1 : 0; }
    r.page_misses += fills.size();
    r.prefix_hit_pages += leading_hits(hit);
    upper.unpin_all();
    if (upper.pinned() != 0 || upper.size() > o.pages) {
      fail(r, "exact lru: " + std::to_string(upper.pinned()) + " pinned, " +
                  std::to_string(upper.size()) + " held after request " +
                  std::to_string(r.requests));
    }
  }
  r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  r.evictions = upper.evictions();
  r.pages_resident = upper.size();
  if (lower) { r.host_evictions = lower->evictions(); }
  return r;
}

}  // namespace

std::vector<std::string> const& kv_policies() {
  static std::vector<std::string> const names{"page-cache", "page-cache-coarse", "lru"};
  return names;
}

void validate(kv_replay_options const& o) {
  auto const& known = kv_policies();
  if (std::find(known.begin(), known.end(), o.policy) == known.end()) {
    throw std::invalid_argument("unknown policy '" + o.policy +
                                "' (expected page-cache, page-cache-coarse or lru)");
  }
  if (o.pages == 0) { throw std::invalid_argument("--pages must be at least 1, got 0"); }
  if (o.page_bytes == 0) { throw std::invalid_argument("--page-bytes must be at least 1, got 0"); }
  if (!(o.table_ratio > 0.0 && o.table_ratio <= 1.0)) {
    throw std::invalid_argument("--ratio must be in (0, 1], got " + std::to_string(o.table_ratio));
  }
  if (o.cpu_threads < 0) { throw std::invalid_argument("threads must be 0 or more"); }
  if (o.remote != nullptr && o.policy != "lru" && o.host_pages == 0) {
    throw std::invalid_argument("--remote sits under the host tier: give --tiers host=PAGES too");
  }
  std::size_t const max_pages = page_pool<cpu_backend>::max_pages;
  for (auto [name, n] : {std::pair<char const*, std::size_t>{"--pages", o.pages},
                         std::pair<char const*, std::size_t>{"host pages", o.host_pages}}) {
    if (n > max_pages) {
      throw std::invalid_argument(std::string(name) + " " + std::to_string(n) +
                                  " is more than a page cache addresses (" +
                                  std::to_string(max_pages) + ")");
    }
    if (n != 0 && o.page_bytes > std::size_t(-1) / n) {
      throw std::invalid_argument(std::string(name) + " x --page-bytes overflows");
    }
  }
}

kv_replay_result kv_replay(std::span<kv_request const> requests, kv_replay_options const& o) {
  validate(o);
  if (o.max_requests != 0 && o.max_requests < requests.size()) {
    requests = requests.first(o.max_requests);
  }
  kv_replay_result r;
  bool const tiered = o.host_pages > 0;
  if (o.policy == "lru") {
    r = run_exact(requests, o);
  } else if (o.policy == "page-cache-coarse") {
    r = tiered ? run_page_cache<coarse_lru, true>(requests, o)
               : run_page_cache<coarse_lru, false>(requests, o);
  } else {
    r = tiered ? run_page_cache<double_lru, true>(requests, o)
               : run_page_cache<double_lru, false>(requests, o);
  }
  r.policy = o.policy;
  r.pages = o.pages;
  r.page_bytes = o.page_bytes;
  r.host_pages = o.host_pages;
  return r;
}

void kv_fill_pattern(std::uint64_t key, std::byte* page, std::size_t bytes) noexcept {
  std::uint64_t const base = hash64(key, pattern_seed);
  std::size_t j = 0;
  for (; j + 8 <= bytes; j += 8) {
    std::uint64_t const w = hash64(base + j, word_seed);
    std::memcpy(page + j, &w, 8);
  }
  if (j < bytes) {
    std::uint64_t const w = hash64(base + j, word_seed);
    std::memcpy(page + j, &w, bytes - j);
  }
}

bool kv_check_pattern(std::uint64_t key, std::byte const* page, std::size_t bytes) noexcept {
  std::uint64_t const base = hash64(key, pattern_seed);
  std::size_t j = 0;
  for (; j + 8 <= bytes; j += 8) {
    std::uint64_t const w = hash64(base + j, word_seed);
    if (std::memcmp(page + j, &w, 8) != 0) { return false; }
  }
  if (j < bytes) {
    std::uint64_t const w = hash64(base + j, word_seed);
    if (std::memcmp(page + j, &w, bytes - j) != 0) { return false; }
  }
  return true;
}

std::vector<kv_request> synthetic_kv_trace(std::size_t requests, std::size_t prefixes,
                                           std::uint64_t seed) {
  if (prefixes == 0) { prefixes = 1; }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<std::size_t> shared_len(1, 24), own_len(1, 8);
  std::uint64_t next_own = 0;
  std::vector<kv_request> out(requests);
  for (auto& req : out) {
    double const x = u(rng);
    auto const p = std::min<std::size_t>(prefixes - 1, static_cast<std::size_t>(
                                                           double(prefixes) * x * x * x));
    std::size_t const s = shared_len(rng), m = own_len(rng);
    for (std::size_t j = 0; j < s; ++j) { req.push_back((std::uint64_t{1} << 40) + p * 4096 + j); }
    for (std::size_t j = 0; j < m; ++j) { req.push_back((std::uint64_t{2} << 40) + next_own++); }
  }
  return out;
}

}  // namespace ccht::sim
