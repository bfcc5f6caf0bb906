// Backend-neutral helpers: RAII buffers in backend memory and a table driver that takes and
// returns host containers, so the same test bodies run on cpu_backend and cuda_backend.
#pragma once

#include <ccht/ccht.hpp>

#include "reference_model.hpp"  // ccht_test::key_type and the model types used below

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <string>
#include <vector>

namespace ccht_test {

/// Host array that also works for bool (std::vector<bool> has no data()).
template <class T>
class host_array {
 public:
  host_array() = default;
  explicit host_array(std::size_t n) : p_(new T[n > 0 ? n : 1]()), n_(n) {}
  host_array(std::size_t n, T const& fill) : host_array(n) { std::fill_n(p_.get(), n, fill); }
  host_array(std::initializer_list<T> il) : host_array(il.size()) {
    std::copy(il.begin(), il.end(), p_.get());
  }
  host_array(host_array const& o) : host_array(o.n_) { std::copy_n(o.p_.get(), n_, p_.get()); }
  host_array(host_array&&) noexcept = default;
  host_array& operator=(host_array o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  T* data() { return p_.get(); }
  T const* data() const { return p_.get(); }
  std::size_t size() const { return n_; }
  T& operator[](std::size_t i) { return p_[i]; }
  T const& operator[](std::size_t i) const { return p_[i]; }
  T* begin() { return data(); }
  T* end() { return data() + n_; }
  T const* begin() const { return data(); }
  T const* end() const { return data() + n_; }

 private:
  std::unique_ptr<T[]> p_;
  std::size_t n_ = 0;
};

/// RAII buffer of @p T in @p Backend memory (host for cpu_backend, device for cuda_backend).
template <class Backend, class T>
class buffer {
 public:
  buffer() = default;
  explicit buffer(std::size_t n) : n_(n) {
    if (n > 0) { p_ = static_cast<T*>(Backend::allocate(n * sizeof(T))); }
  }
  buffer(buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  buffer& operator=(buffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  buffer(buffer const&) = delete;
  buffer& operator=(buffer const&) = delete;
  ~buffer() {
    if (p_ != nullptr) { Backend::deallocate(p_); }
  }

  static buffer from_host(T const* src, std::size_t n) {
    buffer b(n);
    b.upload(src, n);
    return b;
  }
  static buffer from_host(std::vector<T> const& v) { return from_host(v.data(), v.size()); }
  static buffer from_host(host_array<T> const& v) { return from_host(v.data(), v.size()); }

  /// Copies @p n host elements into the start of the buffer.
  void upload(T const* src, std::size_t n) {
    if (n > 0) { Backend::copy_from_host(p_, src, n * sizeof(T)); }
  }
  /// Copies the first @p n elements to the host.
  host_array<T> to_host(std::size_t n) const {
    host_array<T> h(n);
    if (n > 0) { Backend::copy_to_host(h.data(), p_, n * sizeof(T)); }
    return h;
  }
  host_array<T> to_host() const { return to_host(n_); }

  T* data() const { return p_; }
  std::size_t size() const { return n_; }
  std::span<T> span(std::size_t n) const { return {p_, n}; }
  std::span<T> span() const { return {p_, n_}; }
  std::span<T const> cspan(std::size_t n) const { return {p_, n}; }
  std::span<T const> cspan() const { return {p_, n_}; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

/// Skips every test of a backend that cannot run here, with a visible message.
template <class Backend>
class backend_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Backend::available()) {
      GTEST_SKIP() << "ccht::" << Backend::name
                   << "_backend is not available on this machine (no usable GPU); skipping";
    }
  }
};

/// Asserts that @p stmt throws ccht::error with code @p expected.
#define EXPECT_CCHT_ERROR(stmt, expected)                                                   \
  do {                                                                                      \
    bool ccht_thrown_ = false;                                                              \
    try {                                                                                   \
      stmt;                                                                                 \
    } catch (ccht::error const& e) {                                                        \
      ccht_thrown_ = true;                                                                  \
      EXPECT_EQ(e.code(), (expected))                                                       \
          << "got " << ccht::to_string(e.code()) << " (" << e.what() << ") from " #stmt;    \
    }                                                                                       \
    EXPECT_TRUE(ccht_thrown_) << #stmt " did not throw " << ccht::to_string(expected);      \
  } while (0)

struct find_result {
  host_array<value_type> values;
  host_array<bool> found;
};
struct upsert_result {
  std::vector<key_type> evicted_keys;  ///< in output order
  std::vector<value_type> evicted_values;
};
struct execute_result {
  host_array<value_type> values;
  host_array<ccht::op_status> status;
  std::vector<key_type> evicted_keys;
  std::vector<value_type> evicted_values;
};

/// Value a find must leave alone on a miss.
inline constexpr value_type untouched = 0xdeadbeefcafef00dull;

/**
 * @brief Owns a table and reusable backend buffers; every call copies host inputs in and results
 *        out. `async` selects the `_async` entry points followed by a synchronize.
 */
template <class Backend, class Policy>
class driver {
 public:
  using table_type = ccht::table<Backend, Policy>;

  explicit driver(std::size_t num_slots, ccht::table_options opt = {}) : t(num_slots, opt) {}

  table_type t;
  bool async = false;

  find_result find(std::vector<key_type> const& keys) {
    std::size_t const n = keys.size();
    reserve(n);
    keys_.upload(keys.data(), n);
    host_array<value_type> fill(n, untouched);
    vout_.upload(fill.data(), n);
    host_array<bool> ftrue(n, true);  // misses must write false
    found_.upload(ftrue.data(), n);
    if (async) {
      t.find_async(keys_.cspan(n), vout_.span(n), found_.span(n));
      Backend::synchronize();
    } else {
      t.find(keys_.cspan(n), vout_.span(n), found_.span(n));
    }
    return {vout_.to_host(n), found_.to_host(n)};
  }

  host_array<bool> contains(std::vector<key_type> const& keys) {
    std::size_t const n = keys.size();
    reserve(n);
    keys_.upload(keys.data(), n);
    host_array<bool> ftrue(n, true);
    found_.upload(ftrue.data(), n);
    if (async) {
      t.contains_async(keys_.cspan(n), found_.span(n));
      Backend::synchronize();
    } else {
      t.contains(keys_.cspan(n), found_.span(n));
    }
    return found_.to_host(n);
  }

  upsert_result insert_or_assign(std::vector<key_type> const& keys,
                                 std::vector<value_type> const& values) {
    std::size_t const n = keys.size();
    reserve(n);
    keys_.upload(keys.data(), n);
    vals_.upload(values.data(), n);
    std::size_t ne = 0;
    if (async) {
      t.insert_or_assign_async(keys_.cspan(n), vals_.cspan(n), ekeys_.span(n), evals_.span(n),
                               count_.data());
      Backend::synchronize();
      ne = count_.to_host(1)[0];
    } else {
      ne = t.insert_or_assign(keys_.cspan(n), vals_.cspan(n), ekeys_.span(n), evals_.span(n));
    }
    EXPECT_LE(ne, n);
    ne = std::min(ne, n);
    auto ek = ekeys_.to_host(ne);
    auto ev = evals_.to_host(ne);
    return {{ek.begin(), ek.end()}, {ev.begin(), ev.end()}};
  }

  std::size_t erase(std::vector<key_type> const& keys) {
    std::size_t const n = keys.size();
    reserve(n);
    keys_.upload(keys.data(), n);
    if (async) {
      t.erase_async(keys_.cspan(n), count_.data());
      Backend::synchronize();
      return count_.to_host(1)[0];
    }
    return t.erase(keys_.cspan(n));
  }

  execute_result execute(std::vector<ccht::op_code> const& ops, std::vector<key_type> const& keys,
                         std::vector<value_type> const& values) {
    std::size_t const n = keys.size();
    reserve(n);
    ops_.upload(ops.data(), n);
    keys_.upload(keys.data(), n);
    vals_.upload(values.data(), n);
    host_array<value_type> fill(n, untouched);
    vout_.upload(fill.data(), n);
    std::size_t ne = 0;
    if (async) {
      t.execute_async(ops_.cspan(n), keys_.cspan(n), vals_.cspan(n), vout_.span(n),
                      status_.span(n), ekeys_.span(n), evals_.span(n), count_.data());
      Backend::synchronize();
      ne = count_.to_host(1)[0];
    } else {
      ne = t.execute(ops_.cspan(n), keys_.cspan(n), vals_.cspan(n), vout_.span(n),
                     status_.span(n), ekeys_.span(n), evals_.span(n));
    }
    EXPECT_LE(ne, n);
    ne = std::min(ne, n);
    auto ek = ekeys_.to_host(ne);
    auto ev = evals_.to_host(ne);
    return {vout_.to_host(n), status_.to_host(n), {ek.begin(), ek.end()}, {ev.begin(), ev.end()}};
  }

  /// Every entry, in export order (duplicates kept so tests can detect them).
  std::vector<std::pair<key_type, value_type>> export_all() {
    std::size_t cap = t.num_slots() + 1;
    buffer<Backend, key_type> k(cap);
    buffer<Backend, value_type> v(cap);
    std::size_t const n = t.export_entries(k.span(), v.span());
    EXPECT_LE(n, t.num_slots());
    std::size_t const m = std::min(n, cap);
    auto hk = k.to_host(m);
    auto hv = v.to_host(m);
    std::vector<std::pair<key_type, value_type>> out(m);
    for (std::size_t i = 0; i < m; ++i) { out[i] = {hk[i], hv[i]}; }
    return out;
  }

  /// Raw bucket bytes (keys, values, scores of every slot), copied to the host.
  host_array<ccht::bucket<table_type::bucket_size>> snapshot() const {
    auto const view = t.ref().view();
    host_array<ccht::bucket<table_type::bucket_size>> h(view.num_buckets);
    Backend::copy_to_host(h.data(), view.buckets, h.size() * sizeof(h[0]));
    return h;
  }

 private:
  void reserve(std::size_t n) {
    if (n <= cap_ && cap_ > 0) { return; }
    cap_ = std::max<std::size_t>(n, 64);
    keys_ = buffer<Backend, key_type>(cap_);
    vals_ = buffer<Backend, value_type>(cap_);
    vout_ = buffer<Backend, value_type>(cap_);
    found_ = buffer<Backend, bool>(cap_);
    ops_ = buffer<Backend, ccht::op_code>(cap_);
    status_ = buffer<Backend, ccht::op_status>(cap_);
    ekeys_ = buffer<Backend, key_type>(cap_);
    evals_ = buffer<Backend, value_type>(cap_);
    if (count_.size() == 0) { count_ = buffer<Backend, std::size_t>(1); }
  }

  std::size_t cap_ = 0;
  buffer<Backend, key_type> keys_;
  buffer<Backend, value_type> vals_;
  buffer<Backend, value_type> vout_;
  buffer<Backend, bool> found_;
  buffer<Backend, ccht::op_code> ops_;
  buffer<Backend, ccht::op_status> status_;
  buffer<Backend, key_type> ekeys_;
  buffer<Backend, value_type> evals_;
  buffer<Backend, std::size_t> count_;
};

/// Entries as a map; records a failure for every duplicate key.
inline std::map<key_type, value_type> to_map_checked(
    std::vector<std::pair<key_type, value_type>> const& entries) {
  std::map<key_type, value_type> m;
  for (auto const& [k, v] : entries) {
    EXPECT_FALSE(ccht::is_reserved_key(k)) << "exported a reserved key";
    bool const fresh = m.emplace(k, v).second;
    EXPECT_TRUE(fresh) << "key " << k << " is in the table twice";
  }
  return m;
}

inline char const* to_string(ccht::op_status s) {
  switch (s) {
    case ccht::op_status::miss: return "miss";
    case ccht::op_status::hit: return "hit";
    case ccht::op_status::assigned: return "assigned";
    case ccht::op_status::inserted: return "inserted";
    case ccht::op_status::inserted_evicted: return "inserted_evicted";
    case ccht::op_status::no_space: return "no_space";
  }
  return "?";
}

/// Scales loop counts down under ThreadSanitizer (about 10x slower) so the suite stays within
/// seconds.
#if defined(__SANITIZE_THREAD__)
inline constexpr int work_scale = 4;
#else
inline constexpr int work_scale = 1;
#endif

/// Names typed tests after the policy. No '-' in them: ctest runs each test through
/// --gtest_filter, where '-' starts the negative patterns, so a hyphenated name would match
/// nothing and pass vacuously.
struct policy_names {
  template <class T>
  static std::string GetName(int) {
    std::string n = T::name;
    for (char& c : n) { c = c == '-' ? '_' : c; }
    return n;
  }
};

/// Stress-test values encode their key (high bits) and a writer's tag (low 24 bits), so a find
/// that returns another key's value or a torn one is caught.
constexpr std::uint64_t encode(std::uint64_t k, std::uint64_t tag) { return (k << 24) | (tag & 0xffffff); }
/// Key encoded in a stress-test value.
constexpr std::uint64_t key_part(std::uint64_t v) { return v >> 24; }

/// What one stress-test thread saw: per-key net inserts (new-key inserts - evictions - erase
/// hits) and value checks; the first violation is kept for the report.
struct thread_log {
  std::unordered_map<std::uint64_t, long> net;
  std::size_t violations = 0, evictions = 0, hits = 0;
  std::string first;

  void fail(std::string const& what) {
    if (violations++ == 0) { first = what; }
  }
  bool failed() const { return violations > 0; }
  /// A find returned @p v for @p k: it must encode k.
  void check_found(std::uint64_t k, std::uint64_t v) {
    if (key_part(v) != k) {
      fail("find(" + std::to_string(k) + ") returned value " + std::to_string(v) +
           " which belongs to key " + std::to_string(key_part(v)));
    }
  }
  /// check_found() and count the hit.
  void found(std::uint64_t k, std::uint64_t v) {
    ++hits;
    check_found(k, v);
  }
  /// An eviction report: its value must encode its key.
  void evicted(std::uint64_t ek, std::uint64_t ev) {
    ++evictions;
    if (key_part(ev) != ek) {
      fail("evicted key " + std::to_string(ek) + " came with value of key " +
           std::to_string(key_part(ev)));
    }
    --net[ek];
  }
  /// An upsert's status: a new key adds one.
  void status(std::uint64_t k, ccht::op_status s) {
    if (s == ccht::op_status::inserted || s == ccht::op_status::inserted_evicted) { ++net[k]; }
  }
};
/// Tag encoded in a stress-test value.
constexpr std::uint64_t tag_part(std::uint64_t v) { return v & 0xffffff; }

}  // namespace ccht_test

namespace ccht {
// Readable gtest output for statuses.
inline void PrintTo(op_status s, std::ostream* os) { *os << ccht_test::to_string(s); }
}  // namespace ccht
