/**
 * @file kv_replay.hpp
 * @brief Replays a prefix-KV-cache trace (Mooncake JSONL: one request a line, each a list of
 *        page keys) through ccht::page_cache (or ccht::tiered_page_cache over a host tier) on the
 *        CPU backend, and through an exact LRU with per-request pins as the reference.
 *
 * One request:
 *  1. its keys, in order, with repeats inside the request removed (the first occurrence is
 *     kept): a request needs each of its pages once. `page_refs` counts the de-duplicated keys;
 *     the repeats are counted apart in `duplicate_refs` and are neither hits nor misses;
 *  2. one acquire of the whole batch: `hit` pages are checked byte for byte against the key's
 *     pattern (kv_fill_pattern; a mismatch counts in `check_failures`), `fill` pages get the
 *     pattern written and are published, `pending` (impossible in a serial replay) and
 *     `no_space` are counted and hold no pin;
 *  3. every pinned page is released.
 * A tiered run (host_pages > 0) serves an upper miss that the host tier holds as a hit
 * (`lower_hits`, included in `page_hits`); the pages the upper tier evicts are spilled to it.
 *
 * The reference, policy `lru`, is an exact LRU of `pages` keys in which a request's keys are
 * pinned until the request ends: a hit moves the key to the front and pins it; a miss inserts it
 * pinned at the front, first evicting the least recently used unpinned key when `pages` keys are
 * held; when every held key is pinned the key gets no_space (nothing changes). With a host tier
 * it mirrors tiered_page_cache: the upper victims of a request are spilled to an exact LRU of
 * `host_pages` keys (pinned while they are spilled), then each upper fill the host tier holds is
 * a lower hit (and a use of the host copy).
 *
 * A remote tier (options.remote, with a host tier) sits under both: host-tier victims are
 * written to it, a fill neither local tier holds is looked up there (`remote_hits`, included in
 * `page_hits`), and the replay waits for its write-back queue at the end. Its pages are checked
 * byte for byte like every hit. The `lru` reference ignores it: compare with an exact LRU of the
 * three tiers' total pages (`pages` = upper + host + the remote's).
 *
 * `prefix_hit_pages` sums, over requests, the length of the leading run of hits in the request's
 * de-duplicated order: the pages whose prefill a prefix cache skips (512 tokens each in the
 * Mooncake traces).
 */
#pragma once

#include <ccht/cache/remote_store.hpp>

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace ccht::sim {

/// One request of a KV trace: its page keys in order.
using kv_request = std::vector<std::uint64_t>;

/// Tokens per KV page in the Mooncake traces (one `hash_ids` entry).
inline constexpr std::size_t mooncake_tokens_per_page = 512;

/// Options of a KV replay.
struct kv_replay_options {
  /// page-cache (ccht::page_cache, double LRU), page-cache-coarse (coarse LRU) or lru (exact).
  std::string policy = "page-cache";
  std::size_t pages = 0;        ///< pages of the (upper) cache, >= 1
  std::size_t page_bytes = 0;   ///< bytes per page, >= 1 (page-cache policies)
  std::size_t host_pages = 0;   ///< pages of the host tier; 0: no tier
  double table_ratio = 0.9;     ///< page-cache: pages over index slots, in (0, 1]
  std::size_t max_requests = 0; ///< replay only the first N requests (0: all)
  int cpu_threads = 1;          ///< page-cache: threads per call (1 keeps the replay exact-ordered)
  remote_store* remote = nullptr;  ///< page-cache with a host tier: a remote tier under it
  bool remote_write_through = false;  ///< also write every published fill to the remote tier
};

/// What a KV replay counted.
struct kv_replay_result {
  std::string policy;             ///< policy name
  std::size_t pages = 0;          ///< pages of the (upper) cache
  std::size_t page_bytes = 0;     ///< bytes per page
  std::size_t host_pages = 0;     ///< host-tier pages (0: none)
  std::uint64_t requests = 0;     ///< requests replayed
  std::uint64_t page_refs = 0;    ///< keys acquired (de-duplicated within each request)
  std::uint64_t duplicate_refs = 0;  ///< repeats of a key within a request (not in page_refs)
  std::uint64_t page_hits = 0;    ///< acquired keys that were resident (lower hits included)
  std::uint64_t page_misses = 0;  ///< acquired keys filled by the caller
  std::uint64_t pending = 0;      ///< acquires that found the key being filled (0 when serial)
  std::uint64_t no_space = 0;     ///< acquires refused: every candidate page was pinned
  std::uint64_t prefix_hit_pages = 0;  ///< sum of each request's leading run of hits
  std::uint64_t evictions = 0;    ///< pages the (upper) cache evicted
  std::uint64_t check_failures = 0;    ///< hit pages whose bytes were not the key's pattern
  std::uint64_t lower_hits = 0;   ///< tiered: upper misses served from the host tier
  std::uint64_t spills = 0;       ///< tiered: upper victims copied to the host tier
  std::uint64_t spill_failures = 0;    ///< tiered: victims the host tier could not take
  std::uint64_t host_evictions = 0;    ///< tiered: keys the host tier evicted
  bool remote = false;            ///< a remote tier was attached
  std::uint64_t remote_hits = 0;  ///< fills served from the remote tier
  std::uint64_t remote_lookups = 0;    ///< fills looked up there
  std::uint64_t remote_writes = 0;     ///< pages queued for it
  std::uint64_t remote_write_drops = 0;  ///< pages its queue refused
  remote_stats remote_counters;   ///< the remote store's own counters after the replay
  std::uint64_t invariant_failures = 0;  ///< failed cache invariants (see invariant_message)
  std::string invariant_message;  ///< the first failed invariant, empty when none
  std::size_t pages_resident = 0; ///< pages held at the end
  double seconds = 0;             ///< wall time of the replay

  /// page_hits / page_refs (0 without refs).
  double hit_ratio() const noexcept {
    return page_refs ? double(page_hits) / double(page_refs) : 0.0;
  }
  /// Prefill tokens a prefix cache skips: prefix_hit_pages x @p tokens_per_page.
  std::uint64_t prefill_tokens_saved(std::size_t tokens_per_page = mooncake_tokens_per_page) const
      noexcept {
    return prefix_hit_pages * tokens_per_page;
  }
};

/// Policy names kv_replay() accepts: page-cache, page-cache-coarse, lru.
std::vector<std::string> const& kv_policies();

/// Throws std::invalid_argument naming the option at fault (unknown policy, 0 pages, 0 page
/// bytes, ratio outside (0, 1], a size the page cache cannot address).
void validate(kv_replay_options const& options);

/// Replays @p requests (see the file comment). Throws std::invalid_argument for bad options.
kv_replay_result kv_replay(std::span<kv_request const> requests, kv_replay_options const& options);

/// Writes the pattern of @p key into @p page (bytes from a hash of the key and the offset).
void kv_fill_pattern(std::uint64_t key, std::byte* page, std::size_t bytes) noexcept;
/// Whether @p page holds @p key's pattern.
bool kv_check_pattern(std::uint64_t key, std::byte const* page, std::size_t bytes) noexcept;

/// A small synthetic prefix-sharing KV trace: @p requests requests over @p prefixes shared
/// prefixes of popularity skewed towards the first, each request a shared prefix of 1-24 pages
/// followed by 1-8 pages of its own. Deterministic for a seed.
std::vector<kv_request> synthetic_kv_trace(std::size_t requests, std::size_t prefixes = 64,
                                           std::uint64_t seed = 7);

/**
 * @brief Exact LRU of `capacity` keys with pins: the reference of kv_replay (see the file
 *        comment). Pinned keys are never evicted; unpin_all() ends a request.
 */
class exact_pinned_lru {
 public:
  /// Outcome of one acquire.
  enum class outcome { hit, miss, no_space };

  /// A cache of @p capacity keys (>= 1).
  explicit exact_pinned_lru(std::size_t capacity) : capacity_(capacity) {
    index_.reserve(capacity * 2);
  }

  /// Hit: moves @p key to the front and pins it. Miss: inserts it pinned at the front, first
  /// evicting the least recently used unpinned key when full (into @p victim, @p evicted set);
  /// no_space when every held key is pinned.
  outcome acquire(std::uint64_t key, bool& evicted, std::uint64_t& victim) {
    evicted = false;
    if (auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      pin(it->second);
      return outcome::hit;
    }
    if (index_.size() >= capacity_) {
      auto v = order_.end();
      for (auto i = order_.end(); i != order_.begin();) {  // from the back, skipping pinned keys
        --i;
        if (!i->pinned) {
          v = i;
          break;
        }
      }
      if (v == order_.end()) { return outcome::no_space; }
      victim = v->key;
      evicted = true;
      index_.erase(v->key);
      order_.erase(v);
      ++evictions_;
    }
    order_.push_front(entry{key, false});
    index_.emplace(key, order_.begin());
    pin(order_.begin());
    return outcome::miss;
  }
  /// Moves @p key to the front if held (a use, no pin). @return whether it was held
  bool touch(std::uint64_t key) {
    auto it = index_.find(key);
    if (it == index_.end()) { return false; }
    order_.splice(order_.begin(), order_, it->second);
    return true;
  }
  /// Unpins every key pinned since the last call.
  void unpin_all() {
    for (auto it : pinned_) { it->pinned = false; }
    pinned_.clear();
  }
  /// Whether @p key is held.
  bool contains(std::uint64_t key) const { return index_.count(key) != 0; }
  /// Keys held.
  std::size_t size() const noexcept { return index_.size(); }
  /// Keys pinned now.
  std::size_t pinned() const noexcept { return pinned_.size(); }
  /// Keys evicted so far.
  std::uint64_t evictions() const noexcept { return evictions_; }

 private:
  struct entry {
    std::uint64_t key;
    bool pinned;
  };
  using iterator = std::list<entry>::iterator;
  void pin(iterator it) {
    if (!it->pinned) {
      it->pinned = true;
      pinned_.push_back(it);
    }
  }

  std::size_t capacity_;
  std::list<entry> order_;  // front = most recently used
  std::unordered_map<std::uint64_t, iterator> index_;
  std::vector<iterator> pinned_;
  std::uint64_t evictions_ = 0;
};

}  // namespace ccht::sim
