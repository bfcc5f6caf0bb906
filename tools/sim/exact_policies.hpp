/**
 * @file exact_policies.hpp
 * @brief Exact reference caches (LRU, FIFO, LFU), O(1) per request.
 *
 * The rules are libCacheSim's, as the golden counts in shared/traces/README.md define them:
 * every request is a GET; a miss inserts the key, evicting first when the cache holds `capacity`
 * objects. LFU evicts the least frequently used key, ties to the least recently used one, and
 * forgets a key's count when it is evicted. Used by the tests as oracles and by the CLI as
 * baselines.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ccht::sim {

/// Counters every reference cache keeps.
struct cache_stats {
  std::uint64_t requests = 0;   ///< queries seen (GETs; updates are counted apart)
  std::uint64_t updates = 0;    ///< updates seen (PUTs: promote or insert, never a hit or miss)
  std::uint64_t hits = 0;       ///< accesses that found their key
  std::uint64_t evictions = 0;  ///< keys evicted to make room
  /// Misses (requests - hits).
  std::uint64_t misses() const noexcept { return requests - hits; }
};

namespace detail {
/// Doubly linked lists threaded through a node pool (index 0 is unused as "null").
class node_lists {
 public:
  struct node {
    std::uint64_t key = 0;
    std::uint64_t freq = 0;
    std::uint32_t prev = 0, next = 0;
  };
  struct list {
    std::uint32_t head = 0, tail = 0;  // head = most recent
    bool empty() const noexcept { return head == 0; }
  };

  std::uint32_t alloc(std::uint64_t key) {
    std::uint32_t i;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else {
      i = static_cast<std::uint32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    nodes_[i] = node{key, 1, 0, 0};
    return i;
  }
  void release(std::uint32_t i) { free_.push_back(i); }
  node& operator[](std::uint32_t i) noexcept { return nodes_[i]; }

  void push_front(list& l, std::uint32_t i) noexcept {
    nodes_[i].prev = 0;
    nodes_[i].next = l.head;
    if (l.head) { nodes_[l.head].prev = i; } else { l.tail = i; }
    l.head = i;
  }
  void unlink(list& l, std::uint32_t i) noexcept {
    node& n = nodes_[i];
    if (n.prev) { nodes_[n.prev].next = n.next; } else { l.head = n.next; }
    if (n.next) { nodes_[n.next].prev = n.prev; } else { l.tail = n.prev; }
  }

 private:
  std::vector<node> nodes_{node{}};
  std::vector<std::uint32_t> free_;
};
}  // namespace detail

/**
 * @brief Exact list-ordered cache: LRU when @p PromoteOnHit (a hit moves the key to the front),
 *        FIFO otherwise (hits change nothing). A miss evicts the back when full.
 */
template <bool PromoteOnHit>
class exact_list_cache {
 public:
  /// Name used by tools ("lru" or "fifo").
  static constexpr std::string_view name = PromoteOnHit ? "lru" : "fifo";
  /// A cache of @p capacity objects (capacity >= 1).
  explicit exact_list_cache(std::size_t capacity) : capacity_(capacity) {
    index_.reserve(capacity * 2);
  }
  /// One GET of @p key; a miss inserts it. @return true on a hit
  bool access(std::uint64_t key) {
    ++stats_.requests;
    bool const hit = touch(key);
    stats_.hits += hit;
    return hit;
  }
  /// One PUT of @p key: the same state change as a GET, counted as an update.
  void put(std::uint64_t key) {
    ++stats_.updates;
    touch(key);
  }
  /// Whether @p key is cached (no state change).
  bool contains(std::uint64_t key) const { return index_.count(key) != 0; }
  /// Objects cached.
  std::size_t size() const noexcept { return index_.size(); }
  /// Counters.
  cache_stats const& stats() const noexcept { return stats_; }

 private:
  bool touch(std::uint64_t key) {
    if (auto it = index_.find(key); it != index_.end()) {
      if constexpr (PromoteOnHit) {
        nodes_.unlink(list_, it->second);
        nodes_.push_front(list_, it->second);
      }
      return true;
    }
    if (index_.size() >= capacity_) {
      std::uint32_t const victim = list_.tail;
      nodes_.unlink(list_, victim);
      index_.erase(nodes_[victim].key);
      nodes_.release(victim);
      ++stats_.evictions;
    }
    std::uint32_t const i = nodes_.alloc(key);
    nodes_.push_front(list_, i);
    index_.emplace(key, i);
    return false;
  }

  std::size_t capacity_;
  std::unordered_map<std::uint64_t, std::uint32_t> index_;
  detail::node_lists nodes_;
  detail::node_lists::list list_;
  cache_stats stats_;
};

/// Exact LRU.
using exact_lru = exact_list_cache<true>;
/// Exact FIFO.
using exact_fifo = exact_list_cache<false>;

/// Exact LFU, ties to the least recently used; counts are forgotten on eviction. O(1) with one
/// recency list per frequency.
class exact_lfu {
 public:
  /// Name used by tools ("lfu").
  static constexpr std::string_view name = "lfu";
  /// A cache of @p capacity objects (capacity >= 1).
  explicit exact_lfu(std::size_t capacity) : capacity_(capacity) { index_.reserve(capacity * 2); }
  /// One GET of @p key; a miss inserts it. @return true on a hit
  bool access(std::uint64_t key) {
    ++stats_.requests;
    bool const hit = touch(key);
    stats_.hits += hit;
    return hit;
  }
  /// One PUT of @p key: the same state change as a GET, counted as an update.
  void put(std::uint64_t key) {
    ++stats_.updates;
    touch(key);
  }

 private:
  bool touch(std::uint64_t key) {
    if (auto it = index_.find(key); it != index_.end()) {
      std::uint32_t const i = it->second;
      std::uint64_t const f = nodes_[i].freq;
      auto& from = lists_[f];
      nodes_.unlink(from, i);
      if (from.empty()) {
        lists_.erase(f);
        if (min_freq_ == f) { min_freq_ = f + 1; }
      }
      nodes_[i].freq = f + 1;
      nodes_.push_front(lists_[f + 1], i);
      return true;
    }
    if (index_.size() >= capacity_) {
      auto& victims = lists_[min_freq_];
      std::uint32_t const victim = victims.tail;
      nodes_.unlink(victims, victim);
      if (victims.empty()) { lists_.erase(min_freq_); }
      index_.erase(nodes_[victim].key);
      nodes_.release(victim);
      ++stats_.evictions;
    }
    std::uint32_t const i = nodes_.alloc(key);
    nodes_.push_front(lists_[1], i);
    index_.emplace(key, i);
    min_freq_ = 1;
    return false;
  }

 public:
  /// Whether @p key is cached.
  bool contains(std::uint64_t key) const { return index_.count(key) != 0; }
  /// Objects cached.
  std::size_t size() const noexcept { return index_.size(); }
  /// Counters.
  cache_stats const& stats() const noexcept { return stats_; }

 private:
  std::size_t capacity_;
  std::unordered_map<std::uint64_t, std::uint32_t> index_;
  std::unordered_map<std::uint64_t, detail::node_lists::list> lists_;
  detail::node_lists nodes_;
  std::uint64_t min_freq_ = 1;
  cache_stats stats_;
};

}  // namespace ccht::sim
