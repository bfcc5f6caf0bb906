// Reference model of the exact per-bucket CCHT semantics, written independently of
// ccht::bucket_ops (only ccht::candidates is shared: the hash is the spec).
//
// Semantics (serial execution, unique increasing ticks):
// - insert_or_assign: an existing key (first candidate, then second) gets the new value and a
//   hit score; otherwise the lowest free slot of the first bucket, else of the second; otherwise
//   the min-score slot of each bucket (lowest slot on a tie) and the bucket whose min is strictly
//   smaller loses its victim (the first bucket on a tie).
// - find promotes like a hit; contains does not; erase frees the slot.
// - Pins (pinnable policies): a pinned slot is never a victim and its score does not change on
//   hits or assigns; releasing its last pin applies a hit at the release's tick. An insert whose
//   two buckets are full of pinned slots fails (no_space) and changes nothing.
#pragma once

#include <ccht/core/hash.hpp>
#include <ccht/core/pin.hpp>
#include <ccht/core/policy.hpp>
#include <ccht/core/types.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ccht_test {

using ccht::key_type;
using ccht::tick_type;
using ccht::value_type;

/// A policy's score as (use count, tick of the deciding event); smaller is evicted first.
struct model_score {
  std::uint64_t count = 0;
  std::uint64_t tick = 0;
  friend bool operator<(model_score a, model_score b) {
    return a.count != b.count ? a.count < b.count : a.tick < b.tick;
  }
  friend bool operator==(model_score a, model_score b) = default;
};

/// Independent restatement of each policy (see policy.hpp docs); specialised per policy tag.
template <class Policy>
struct model_policy;

template <>
struct model_policy<ccht::lru> {
  static model_score on_insert(tick_type t) { return {0, t}; }
  static model_score on_hit(model_score s, tick_type t) { return {0, std::max(s.tick, t)}; }
  static std::uint64_t encode(model_score s) { return s.tick; }
};

template <>
struct model_policy<ccht::fifo> {
  static model_score on_insert(tick_type t) { return {0, t}; }
  static model_score on_hit(model_score s, tick_type) { return s; }
  static std::uint64_t encode(model_score s) { return s.tick; }
};

template <>
struct model_policy<ccht::lfu> {
  static constexpr std::uint64_t max_count = 65535;
  static constexpr std::uint64_t tick_mask = (std::uint64_t{1} << 48) - 1;
  static model_score on_insert(tick_type t) { return {1, t & tick_mask}; }
  static model_score on_hit(model_score s, tick_type t) {
    return {std::min(s.count + 1, max_count), t & tick_mask};
  }
  static std::uint64_t encode(model_score s) { return (s.count << 48) | s.tick; }
};

/// Outcome of one modelled upsert.
struct model_upsert {
  ccht::op_status status;
  key_type evicted_key = ccht::empty_key;  ///< set when status == inserted_evicted
  value_type evicted_value = 0;
};

/**
 * @brief Model table: @p num_buckets buckets of @p B slots, policy @p Policy.
 *
 * Ops without an explicit tick use the model's own clock (++clock per find/upsert). Only the
 * order of ticks matters for the outcome, so this matches a table whose clock also advances for
 * other calls.
 */
template <class Policy, int B>
class reference_model {
 public:
  struct slot {
    key_type key = ccht::empty_key;
    value_type value = 0;
    model_score score{};
    std::uint32_t pins = 0;
  };
  using bucket_state = std::array<slot, B>;

  reference_model(std::uint32_t num_buckets, std::uint64_t seed)
      : seed_(seed), buckets_(num_buckets) {}

  std::uint32_t num_buckets() const { return static_cast<std::uint32_t>(buckets_.size()); }
  bucket_state const& bucket(std::uint32_t b) const { return buckets_[b]; }
  tick_type next_tick() { return ++clock; }

  std::optional<value_type> find(key_type key) { return find(key, next_tick()); }
  std::optional<value_type> find(key_type key, tick_type tick) {
    slot* s = locate(key);
    if (s == nullptr) { return std::nullopt; }
    if (s->pins == 0) { s->score = model_policy<Policy>::on_hit(s->score, tick); }
    return s->value;
  }

  bool contains(key_type key) { return locate(key) != nullptr; }

  bool erase(key_type key) {
    slot* s = locate(key);
    if (s == nullptr) { return false; }
    s->key = ccht::empty_key;
    return true;
  }

  model_upsert insert_or_assign(key_type key, value_type value) {
    return insert_or_assign(key, value, next_tick());
  }
  model_upsert insert_or_assign(key_type key, value_type value, tick_type tick) {
    if (slot* s = locate(key)) {
      s->value = value;
      if (s->pins == 0) { s->score = model_policy<Policy>::on_hit(s->score, tick); }
      return {ccht::op_status::assigned};
    }
    auto const cb = ccht::candidates(key, seed_, num_buckets());
    bucket_state& b1 = buckets_[cb.first];
    bucket_state& b2 = buckets_[cb.second];
    for (bucket_state* b : {&b1, &b2}) {
      for (slot& s : *b) {
        if (s.key == ccht::empty_key) {
          s = {key, value, model_policy<Policy>::on_insert(tick)};
          return {ccht::op_status::inserted};
        }
      }
    }
    slot* v1 = min_unpinned(b1);
    slot* v2 = min_unpinned(b2);
    if (v1 == nullptr && v2 == nullptr) { return {ccht::op_status::no_space}; }
    slot& victim = v1 == nullptr ? *v2 : v2 == nullptr ? *v1 : v2->score < v1->score ? *v2 : *v1;
    model_upsert r{ccht::op_status::inserted_evicted, victim.key, victim.value};
    victim = {key, value, model_policy<Policy>::on_insert(tick)};
    return r;
  }

  /// Pins @p key (at most max_pins). Returns the value, or nullopt when absent or saturated.
  ccht::pin_status pin(key_type key, value_type& value) {
    slot* s = locate(key);
    if (s == nullptr) { return ccht::pin_status::absent; }
    value = s->value;
    if (s->pins == ccht::max_pins) { return ccht::pin_status::saturated; }
    ++s->pins;
    return ccht::pin_status::done;
  }
  ccht::pin_status unpin(key_type key, tick_type tick) {
    slot* s = locate(key);
    if (s == nullptr) { return ccht::pin_status::absent; }
    if (s->pins == 0) { return ccht::pin_status::not_pinned; }
    if (--s->pins == 0) { s->score = model_policy<Policy>::on_hit(s->score, tick); }
    return ccht::pin_status::done;
  }
  /// Pins held by @p key (0 when absent).
  std::uint32_t pins(key_type key) {
    slot* s = locate(key);
    return s == nullptr ? 0 : s->pins;
  }

  std::size_t size() const {
    std::size_t n = 0;
    for (auto const& b : buckets_) {
      for (auto const& s : b) { n += s.key != ccht::empty_key; }
    }
    return n;
  }

  std::map<key_type, value_type> entries() const {
    std::map<key_type, value_type> m;
    for (auto const& b : buckets_) {
      for (auto const& s : b) {
        if (s.key != ccht::empty_key) { m.emplace(s.key, s.value); }
      }
    }
    return m;
  }

  void clear() {
    for (auto& b : buckets_) {
      for (auto& s : b) { s.key = ccht::empty_key; }
    }
  }

  tick_type clock = 0;

 private:
  slot* locate(key_type key) {
    auto const cb = ccht::candidates(key, seed_, num_buckets());
    for (std::uint32_t bi : {cb.first, cb.second}) {
      for (slot& s : buckets_[bi]) {
        if (s.key == key) { return &s; }
      }
    }
    return nullptr;
  }
  static slot* min_unpinned(bucket_state& b) {
    slot* m = nullptr;
    for (slot& s : b) {
      if (s.pins == 0 && (m == nullptr || s.score < m->score)) { m = &s; }  // lowest slot wins ties
    }
    return m;
  }

  std::uint64_t seed_;
  std::vector<bucket_state> buckets_;
};

}  // namespace ccht_test
