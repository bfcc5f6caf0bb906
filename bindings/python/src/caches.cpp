// ccht.PageCache, ccht.WeightCache and their leases: pinned pages and objects exported through
// DLPack without a copy. The pin rule (docs/python.md): a lease or a model keeps its pins until it
// is closed *and* its last view is gone.
#include "common.hpp"

#include <ccht/cache/model_loader.hpp>
#include <ccht/cache/page_cache.hpp>
#include <ccht/cache/weight_cache.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <optional>
#include <tuple>

namespace ccht::py {
namespace {

using namespace nb::literals;

// ---- page cache -------------------------------------------------------------------------------

/// What an acquire, lookup or match_prefix returned, on the host.
struct page_batch_result {
  std::vector<page_id> pages;
  std::vector<page_status> status;
  std::vector<key_type> evicted_keys;
  std::vector<page_id> evicted_pages;
};

/// A page cache of either backend, with host-side arguments (staged on CUDA).
struct page_cache_base {
  virtual ~page_cache_base() = default;
  virtual page_batch_result acquire(std::vector<key_type> const& keys) = 0;
  virtual page_batch_result lookup(std::vector<key_type> const& keys) = 0;
  virtual page_batch_result match_prefix(std::vector<key_type> const& keys) = 0;
  virtual void publish(std::vector<key_type> const& keys) = 0;
  virtual void abandon(std::vector<key_type> const& keys) = 0;
  virtual void release(std::vector<key_type> const& keys) = 0;
  virtual std::pair<std::size_t, std::vector<page_result>> erase(std::vector<key_type> const& keys) = 0;
  virtual page_cache_stats stats() = 0;
  virtual std::byte* pool_data() const = 0;
  virtual std::size_t num_pages() const = 0;
  virtual std::size_t page_bytes() const = 0;
};

template <class Backend>
struct page_cache_impl final : page_cache_base {
  page_cache<Backend> c;
  page_cache_impl(std::size_t pages, std::size_t page_bytes, page_cache_options o)
      : c(pages * page_bytes, page_bytes, o) {}

  /// @p v in backend memory (the host vector itself on the CPU).
  template <class T>
  static T* staged(arena<Backend>& mem, std::vector<T> const& v) {
    if constexpr (std::is_same_v<Backend, cpu_backend>) {
      return const_cast<T*>(v.data());
    } else {
      T* d = mem.template alloc<T>(v.size());
      Backend::copy_from_host(d, v.data(), v.size() * sizeof(T));
      return d;
    }
  }
  template <class T>
  static void to_host(std::vector<T>& out, T const* d, std::size_t n) {
    out.resize(n);
    Backend::copy_to_host(out.data(), d, n * sizeof(T));
  }
  template <class T>
  static T* out_buffer(arena<Backend>& mem, std::vector<T>& host, std::size_t n) {
    if constexpr (std::is_same_v<Backend, cpu_backend>) {
      host.resize(n);
      return host.data();
    } else {
      return mem.template alloc<T>(n);
    }
  }

  page_batch_result acquire(std::vector<key_type> const& keys) override {
    arena<Backend> mem;
    std::size_t const n = keys.size();
    page_batch_result r;
    auto* k = staged(mem, keys);
    auto* p = out_buffer(mem, r.pages, n);
    auto* s = out_buffer(mem, r.status, n);
    auto* ek = out_buffer(mem, r.evicted_keys, n);
    auto* ep = out_buffer(mem, r.evicted_pages, n);
    std::size_t const m = c.acquire({k, n}, {p, n}, {s, n}, {ek, n}, {ep, n});
    if constexpr (!std::is_same_v<Backend, cpu_backend>) {
      to_host(r.pages, p, n);
      to_host(r.status, s, n);
      to_host(r.evicted_keys, ek, m);
      to_host(r.evicted_pages, ep, m);
    }
    r.evicted_keys.resize(m);
    r.evicted_pages.resize(m);
    return r;
  }
  page_batch_result lookup(std::vector<key_type> const& keys) override {
    arena<Backend> mem;
    std::size_t const n = keys.size();
    page_batch_result r;
    auto* k = staged(mem, keys);
    auto* p = out_buffer(mem, r.pages, n);
    auto* s = out_buffer(mem, r.status, n);
    c.lookup({k, n}, {p, n}, {s, n});
    if constexpr (!std::is_same_v<Backend, cpu_backend>) {
      to_host(r.pages, p, n);
      to_host(r.status, s, n);
    }
    return r;
  }
  page_batch_result match_prefix(std::vector<key_type> const& keys) override {
    arena<Backend> mem;
    std::size_t const n = keys.size();
    page_batch_result r;
    auto* k = staged(mem, keys);
    auto* p = out_buffer(mem, r.pages, n);
    std::size_t const len = c.match_prefix({k, n}, {p, n});
    if constexpr (!std::is_same_v<Backend, cpu_backend>) { to_host(r.pages, p, len); }
    r.pages.resize(len);
    r.status.assign(len, page_status::hit);
    return r;
  }
  void publish(std::vector<key_type> const& keys) override {
    arena<Backend> mem;
    c.publish({staged(mem, keys), keys.size()});
  }
  void abandon(std::vector<key_type> const& keys) override {
    arena<Backend> mem;
    c.abandon({staged(mem, keys), keys.size()});
  }
  void release(std::vector<key_type> const& keys) override {
    arena<Backend> mem;
    c.release({staged(mem, keys), keys.size()});
  }
  std::pair<std::size_t, std::vector<page_result>> erase(std::vector<key_type> const& keys) override {
    arena<Backend> mem;
    std::vector<page_result> res;
    auto* r = out_buffer(mem, res, keys.size());
    std::size_t const n = c.erase({staged(mem, keys), keys.size()}, {r, keys.size()});
    if constexpr (!std::is_same_v<Backend, cpu_backend>) { to_host(res, r, keys.size()); }
    return {n, res};
  }
  page_cache_stats stats() override { return c.stats(); }
  std::byte* pool_data() const override { return c.pool().data(); }
  std::size_t num_pages() const override { return c.num_pages(); }
  std::size_t page_bytes() const override { return c.page_bytes(); }
};

nb::dict to_dict(page_cache_stats const& s) {
  nb::dict d;
  d["hits"] = s.hits;
  d["misses"] = s.misses;
  d["fills"] = s.fills;
  d["pending"] = s.pending;
  d["no_space"] = s.no_space;
  d["evictions"] = s.evictions;
  d["publishes"] = s.publishes;
  d["abandons"] = s.abandons;
  d["releases"] = s.releases;
  d["erases"] = s.erases;
  d["pages"] = s.pages;
  d["page_bytes"] = s.page_bytes;
  d["pages_resident"] = s.pages_resident;
  d["pages_free"] = s.pages_free;
  d["pages_pinned"] = s.pages_pinned;
  d["pages_filling"] = s.pages_filling;
  d["bytes_resident"] = s.bytes_resident;
  return d;
}

/**
 * @brief The pins of one lease, owned by it and shared with its views (through `hold`).
 *
 * Every read and change happens under `mu`, and whoever holds `mu` never waits for the GIL (it
 * is taken without the GIL, or with it only around plain reads), so the two cannot deadlock.
 * publish, view and close serialise on `mu`: once the lease is closed, publish raises and never
 * reaches the cache, so a fill that close abandoned is never published by key over the fill of
 * another caller who acquired the key since.
 */
struct lease_pins {
  std::mutex mu;
  std::vector<key_type> keys;     ///< per element
  std::vector<bool> held;         ///< per element: holds a pin
  std::vector<bool> unpublished;  ///< per element: a fill not published yet
  bool closed = false;            ///< closed: no publish, no new view (views may hold the pins)
};

/// Gives back a lease's pins: fills never published are abandoned, everything else released
/// (both attempted; the first failure is rethrown after).
template <class Cache>
void release_lease(Cache& cache, lease_pins& p) {
  std::lock_guard lock(p.mu);
  p.closed = true;
  std::vector<key_type> to_release, to_abandon;
  for (std::size_t i = 0; i < p.keys.size(); ++i) {
    if (p.held[i]) { (p.unpublished[i] ? to_abandon : to_release).push_back(p.keys[i]); }
  }
  p.held.assign(p.held.size(), false);
  std::exception_ptr first;
  auto attempt = [&](auto&& call) {
    try {
      call();
    } catch (...) {
      if (!first) { first = std::current_exception(); }
    }
  };
  if (!to_abandon.empty()) { attempt([&] { cache.abandon(to_abandon); }); }
  if (!to_release.empty()) { attempt([&] { cache.release(to_release); }); }
  if (first) { std::rethrow_exception(first); }
}

/// Marks the lease closed. Waits, without the GIL, for a publish in progress.
void close_lease(lease_pins& p) {
  if (std::unique_lock lock(p.mu, std::try_to_lock); lock.owns_lock()) {
    p.closed = true;  // uncontended: no need to let go of the GIL
    return;
  }
  gil_released unlocked;
  std::lock_guard lock(p.mu);
  p.closed = true;
}

/// Whether a new view of element @p i may be written (an unpublished fill); nullopt when the
/// lease is closed. Views of published data are read-only: every reader shares those bytes.
std::optional<bool> view_writable(lease_pins& p, std::size_t i) {
  std::lock_guard lock(p.mu);  // held briefly, never across a wait for the GIL
  if (p.closed) { return std::nullopt; }
  return p.unpublished[i];
}

/// The elements @p which names (every unpublished fill when none) into @p idx, or why not:
/// each must be in range, named once, and an unpublished fill.
std::string chosen(lease_pins const& p, std::optional<std::vector<std::int64_t>> const& which,
                   std::vector<std::size_t>& idx) {
  std::size_t const n = p.keys.size();
  if (!which) {
    for (std::size_t i = 0; i < n; ++i) {
      if (p.unpublished[i]) { idx.push_back(i); }
    }
    return {};
  }
  std::vector<bool> seen(n, false);
  for (std::int64_t const w : *which) {
    std::string const e = "element " + std::to_string(w);
    if (w < 0 || static_cast<std::uint64_t>(w) >= n) {
      return e + " is out of range (the lease has " + std::to_string(n) + ")";
    }
    auto const i = static_cast<std::size_t>(w);
    if (seen[i]) { return e + " is given twice"; }
    if (!p.unpublished[i]) { return e + " is not an unpublished fill of this lease"; }
    seen[i] = true;
    idx.push_back(i);
  }
  return {};
}

/// Publishes the elements @p which names, after checking all of them: nothing reaches the cache
/// unless the lease is open and every element is valid. @p what prefixes the ValueError.
template <class Cache>
void publish_lease(Cache& cache, lease_pins& p,
                   std::optional<std::vector<std::int64_t>> const& which, char const* what) {
  std::string bad;
  {
    gil_released unlocked;
    std::lock_guard lock(p.mu);
    std::vector<std::size_t> idx;
    bad = p.closed ? "the lease is closed" : chosen(p, which, idx);
    if (bad.empty() && !idx.empty()) {
      std::vector<key_type> k;
      for (std::size_t i : idx) { k.push_back(p.keys[i]); }
      cache.publish(k);
      for (std::size_t i : idx) { p.unpublished[i] = false; }
    }
  }
  if (!bad.empty()) { throw nb::value_error((std::string(what) + ": " + bad).c_str()); }
}

/// The ValueError of a call on a closed lease.
[[noreturn]] void closed_error(char const* what) {
  throw nb::value_error((std::string(what) + ": the lease is closed").c_str());
}

/// A lease's pins, per element: which hold one (hit or fill) and which are fills.
template <class Cache>
hold_ptr make_hold(std::shared_ptr<Cache> cache, std::shared_ptr<lease_pins> const& pins,
                   std::vector<key_type> keys, std::vector<bool> held,
                   std::vector<bool> fills) {
  pins->keys = std::move(keys);
  pins->held = std::move(held);
  pins->unpublished = std::move(fills);
  return std::make_shared<hold>([cache, pins] { release_lease(*cache, *pins); });
}

class py_page_lease {
 public:
  py_page_lease(std::shared_ptr<page_cache_base> cache, std::vector<key_type> keys,
                page_batch_result r, bool cuda, int device_id)
      : cache_(std::move(cache)), keys_(std::move(keys)), r_(std::move(r)), cuda_(cuda),
        device_id_(device_id), pins_(std::make_shared<lease_pins>()) {
    keys_.resize(r_.pages.size());  // match_prefix: the run only
    std::vector<bool> held(keys_.size()), fills(keys_.size());
    for (std::size_t i = 0; i < keys_.size(); ++i) {
      held[i] = r_.status[i] == page_status::hit || r_.status[i] == page_status::fill;
      fills[i] = r_.status[i] == page_status::fill;
    }
    hold_ = make_hold(cache_, pins_, keys_, std::move(held), std::move(fills));
  }

  std::size_t size() const { return keys_.size(); }
  nb::object keys() const { return numpy_copy(keys_.data(), keys_.size()); }
  nb::object pages() const { return numpy_copy(r_.pages.data(), r_.pages.size()); }
  nb::object status() const {
    return numpy_copy(reinterpret_cast<std::uint8_t const*>(r_.status.data()), r_.status.size());
  }
  nb::object evicted_keys() const {
    return numpy_copy(r_.evicted_keys.data(), r_.evicted_keys.size());
  }
  nb::object evicted_pages() const {
    return numpy_copy(r_.evicted_pages.data(), r_.evicted_pages.size());
  }
  bool closed() const { return hold_ == nullptr; }

  /// Element i's page; writable only while it is an unpublished fill of this lease.
  nb::object view(std::size_t i) const {
    hold_ptr const h = hold_;
    if (!h) { closed_error("PageLease.view"); }
    if (i >= keys_.size()) { throw nb::index_error("PageLease.view: element out of range"); }
    if (r_.status[i] != page_status::hit && r_.status[i] != page_status::fill) {
      throw nb::value_error(("PageLease.view: element " + std::to_string(i) + " holds no page (" +
                             to_string(r_.status[i]) + ")").c_str());
    }
    std::optional<bool> const writable = view_writable(*pins_, i);
    if (!writable) { closed_error("PageLease.view"); }
    std::byte* p = cache_->pool_data() + std::size_t{r_.pages[i]} * cache_->page_bytes();
    return dlpack_view(p, {cache_->page_bytes()}, nb::dtype<std::uint8_t>(),
                       cuda_ ? nb::device::cuda::value : nb::device::cpu::value, device_id_,
                       hold_owner(h), *writable);
  }

  void publish(std::optional<std::vector<std::int64_t>> const& which) {
    publish_lease(*cache_, *pins_, which, "PageLease.publish");
  }

  void close() {
    if (!hold_) { return; }
    close_lease(*pins_);
    hold_.reset();
  }

 private:
  std::shared_ptr<page_cache_base> cache_;
  std::vector<key_type> keys_;
  page_batch_result r_;
  bool cuda_ = false;
  int device_id_ = 0;
  std::shared_ptr<lease_pins> pins_;
  hold_ptr hold_;
};

class py_page_cache {
 public:
  py_page_cache(std::size_t num_pages, std::size_t page_bytes, std::string const& backend,
                double table_ratio, std::uint64_t seed, int cpu_threads)
      : cuda_(parse_backend_is_cuda(backend)) {
    if (num_pages != 0 && page_bytes > SIZE_MAX / num_pages) {
      throw nb::value_error("PageCache: num_pages x page_bytes overflows");
    }
    page_cache_options o;
    o.table_ratio = table_ratio;
    o.seed = seed;
    o.cpu_threads = cpu_threads;
#if CCHT_WITH_CUDA
    if (cuda_) {
      c_ = std::make_shared<page_cache_impl<cuda_backend>>(num_pages, page_bytes, o);
      device_id_ = current_device_id(true);
      return;
    }
#endif
    c_ = std::make_shared<page_cache_impl<cpu_backend>>(num_pages, page_bytes, o);
  }

  py_page_lease acquire(nb::handle keys) {
    return leased(keys, "PageCache.acquire: keys", &page_cache_base::acquire);
  }
  py_page_lease lookup(nb::handle keys) {
    return leased(keys, "PageCache.lookup: keys", &page_cache_base::lookup);
  }
  py_page_lease match_prefix(nb::handle keys) {
    return leased(keys, "PageCache.match_prefix: keys", &page_cache_base::match_prefix);
  }
  std::size_t erase(nb::handle keys) {
    auto k = host_keys(keys, "PageCache.erase: keys");
    gil_released unlocked;
    return c_->erase(k).first;
  }
  nb::dict stats() {
    page_cache_stats s;
    {
      gil_released unlocked;
      s = c_->stats();
    }
    return to_dict(s);
  }
  /// The whole pool as (num_pages, page_bytes) bytes: what a paged-attention kernel indexes with
  /// page ids. It keeps the cache alive, not any pin. Writable: kernels write fills through it.
  nb::object pool(nb::handle self) {
    return dlpack_view(c_->pool_data(), {c_->num_pages(), c_->page_bytes()},
                       nb::dtype<std::uint8_t>(),
                       cuda_ ? nb::device::cuda::value : nb::device::cpu::value, device_id_, self,
                       true);
  }
  std::size_t num_pages() const { return c_->num_pages(); }
  std::size_t page_bytes() const { return c_->page_bytes(); }
  char const* backend() const { return cuda_ ? "cuda" : "cpu"; }

 private:
  /// One pinning batch call (acquire, lookup, match_prefix) without the GIL, as a lease.
  py_page_lease leased(nb::handle keys, char const* what,
                       page_batch_result (page_cache_base::*call)(std::vector<key_type> const&)) {
    auto k = host_keys(keys, what);
    page_batch_result r;
    {
      gil_released unlocked;
      r = ((*c_).*call)(k);
    }
    return py_page_lease(c_, std::move(k), std::move(r), cuda_, device_id_);
  }

  bool cuda_ = false;
  int device_id_ = 0;
  std::shared_ptr<page_cache_base> c_;
};

// ---- weight cache -----------------------------------------------------------------------------

/// A loaded model of either backend.
struct model_base {
  virtual ~model_base() = default;
  virtual std::vector<model_tensor> const& tensors() const = 0;
  virtual load_report const& report() const = 0;
  virtual void release() = 0;
};
template <class Backend>
struct model_impl final : model_base {
  loaded_model<Backend> m;
  explicit model_impl(loaded_model<Backend>&& x) : m(std::move(x)) {}
  std::vector<model_tensor> const& tensors() const override { return m.tensors(); }
  load_report const& report() const override { return m.report(); }
  void release() override { m.release(); }
};

/// A weight cache of either backend, and its loaders (one per layout).
struct weight_cache_base {
  virtual ~weight_cache_base() = default;
  virtual void acquire(std::span<object_request const> r, std::span<object_lease> l) = 0;
  virtual void publish(std::vector<key_type> const& keys) = 0;
  virtual void abandon(std::vector<key_type> const& keys) = 0;
  virtual void release(std::vector<key_type> const& keys) = 0;
  virtual std::size_t erase(std::vector<key_type> const& keys) = 0;
  virtual bool wait_ready(std::vector<key_type> const& keys, std::chrono::milliseconds t) = 0;
  virtual weight_cache_stats stats() const = 0;
  virtual std::unique_ptr<model_base> load(std::string const& path, model_layout layout) = 0;
  virtual std::size_t page_bytes() const = 0;
  virtual std::size_t budget_bytes() const = 0;
  virtual std::size_t num_pages() const = 0;
};

template <class Backend>
struct weight_cache_impl final : weight_cache_base {
  weight_cache<Backend> c;
  model_loader<Backend> per_tensor, packed;
  weight_cache_impl(std::size_t budget, std::size_t page_bytes, weight_cache_options o,
                    int io_threads)
      : c(budget, page_bytes, o),
        per_tensor(c, {.layout = model_layout::per_tensor, .io_threads = io_threads}),
        packed(c, {.layout = model_layout::packed, .io_threads = io_threads}) {}
  void acquire(std::span<object_request const> r, std::span<object_lease> l) override {
    c.acquire(r, l);
  }
  void publish(std::vector<key_type> const& keys) override { c.publish(keys); }
  void abandon(std::vector<key_type> const& keys) override { c.abandon(keys); }
  void release(std::vector<key_type> const& keys) override { c.release(keys); }
  std::size_t erase(std::vector<key_type> const& keys) override { return c.erase(keys); }
  bool wait_ready(std::vector<key_type> const& keys, std::chrono::milliseconds t) override {
    return c.wait_ready(keys, t);
  }
  weight_cache_stats stats() const override { return c.stats(); }
  std::unique_ptr<model_base> load(std::string const& path, model_layout layout) override {
    auto& loader = layout == model_layout::packed ? packed : per_tensor;
    return std::make_unique<model_impl<Backend>>(loader.load(path));
  }
  std::size_t page_bytes() const override { return c.page_bytes(); }
  std::size_t budget_bytes() const override { return c.budget_bytes(); }
  std::size_t num_pages() const override { return c.num_pages(); }
};

nb::dict to_dict(weight_cache_stats const& s) {
  nb::dict d;
  d["hits"] = s.hits;
  d["fills"] = s.fills;
  d["pending"] = s.pending;
  d["no_space"] = s.no_space;
  d["pages_filled"] = s.pages_filled;
  d["pages_kept"] = s.pages_kept;
  d["pages_evicted"] = s.pages_evicted;
  d["publishes"] = s.publishes;
  d["abandons"] = s.abandons;
  d["releases"] = s.releases;
  d["erases"] = s.erases;
  d["objects"] = s.objects;
  d["objects_pinned"] = s.objects_pinned;
  d["objects_filling"] = s.objects_filling;
  d["budget_bytes"] = s.budget_bytes;
  d["page_bytes"] = s.page_bytes;
  d["bytes_resident"] = s.bytes_resident;
  d["pages_pinned"] = s.pages_pinned;
  d["huge_pages"] = s.huge_pages;
  return d;
}

/// DLPack element type of a safetensors dtype (F8 as the float8 codes of DLPack 1.0).
nb::dlpack::dtype dl_dtype(st_dtype t) {
  using nb::dlpack::dtype_code;
  auto const make = [](dtype_code c, int bits) {
    return nb::dlpack::dtype{static_cast<std::uint8_t>(c), static_cast<std::uint8_t>(bits), 1};
  };
  switch (t) {
    case st_dtype::BOOL: return make(dtype_code::Bool, 8);
    case st_dtype::U8: return make(dtype_code::UInt, 8);
    case st_dtype::I8: return make(dtype_code::Int, 8);
    case st_dtype::F8_E5M2: return make(dtype_code::Float8_E5M2, 8);
    case st_dtype::F8_E4M3: return make(dtype_code::Float8_E4M3FN, 8);
    case st_dtype::I16: return make(dtype_code::Int, 16);
    case st_dtype::U16: return make(dtype_code::UInt, 16);
    case st_dtype::F16: return make(dtype_code::Float, 16);
    case st_dtype::BF16: return make(dtype_code::Bfloat, 16);
    case st_dtype::I32: return make(dtype_code::Int, 32);
    case st_dtype::U32: return make(dtype_code::UInt, 32);
    case st_dtype::F32: return make(dtype_code::Float, 32);
    case st_dtype::F64: return make(dtype_code::Float, 64);
    case st_dtype::I64: return make(dtype_code::Int, 64);
    case st_dtype::U64: return make(dtype_code::UInt, 64);
  }
  return make(dtype_code::UInt, 8);
}

class py_model {
 public:
  py_model(std::shared_ptr<weight_cache_base> cache, std::unique_ptr<model_base> m,
           nb::object path, bool cuda, int device_id)
      : cache_(std::move(cache)), path_(std::move(path)), path_repr_(nb::repr(path_).c_str()),
        cuda_(cuda), device_id_(device_id) {
    std::shared_ptr<model_base> shared(std::move(m));
    model_ = shared;
    auto keep_cache = cache_;  // the loaded model refers to the cache
    hold_ = std::make_shared<hold>([shared, keep_cache] { shared->release(); });
  }

  nb::object get(std::string const& name) const { return view_of(name, false); }
  nb::object raw(std::string const& name) const { return view_of(name, true); }
  bool contains(std::string const& name) const { return find(name) != nullptr; }
  std::size_t size() const { return model_->tensors().size(); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto const& t : model_->tensors()) { out.push_back(t.name); }
    return out;
  }
  nb::dict info(std::string const& name) const {
    model_tensor const* t = find(name);
    if (t == nullptr) { throw nb::key_error(name.c_str()); }
    nb::dict d;
    d["name"] = t->name;
    d["dtype"] = to_string(t->dtype);
    d["shape"] = nb::tuple(nb::cast(t->shape));
    d["bytes"] = t->bytes;
    return d;
  }
  nb::dict report() const {
    load_report const& r = model_->report();
    nb::dict d;
    d["objects"] = r.objects;
    d["hits"] = r.hits;
    d["fills"] = r.fills;
    d["waits"] = r.waits;
    d["pages_filled"] = r.pages_filled;
    d["bytes_read"] = r.bytes_read;
    d["seconds"] = r.seconds;
    d["warm"] = r.warm();
    return d;
  }
  nb::object path() const { return path_; }
  bool closed() const { return hold_ == nullptr; }
  void close() { hold_.reset(); }

 private:
  model_tensor const* find(std::string const& name) const {
    for (auto const& t : model_->tensors()) {
      if (t.name == name) { return &t; }
    }
    return nullptr;
  }
  /// A read-only view: a model's tensors are published, shared by every load of the file.
  nb::object view_of(std::string const& name, bool raw) const {
    if (!hold_) {
      throw nb::value_error(("Model " + path_repr_ + ": closed; load it again").c_str());
    }
    model_tensor const* t = find(name);
    if (t == nullptr) { throw nb::key_error(name.c_str()); }
    std::vector<std::size_t> shape;
    if (raw) {
      shape.push_back(t->bytes);
    } else {
      for (auto d : t->shape) { shape.push_back(static_cast<std::size_t>(d)); }
    }
    return dlpack_view(t->data, shape, raw ? nb::dtype<std::uint8_t>() : dl_dtype(t->dtype),
                       cuda_ ? nb::device::cuda::value : nb::device::cpu::value, device_id_,
                       hold_owner(hold_), false);
  }

  std::shared_ptr<weight_cache_base> cache_;
  std::shared_ptr<model_base> model_;
  nb::object path_;        ///< as given (str, bytes or a path object)
  std::string path_repr_;  ///< for messages
  bool cuda_ = false;
  int device_id_ = 0;
  hold_ptr hold_;
};

class py_object_lease {
 public:
  py_object_lease(std::shared_ptr<weight_cache_base> cache, std::vector<object_request> req,
                  std::vector<object_lease> leases, bool cuda, int device_id)
      : cache_(std::move(cache)), req_(std::move(req)), leases_(std::move(leases)), cuda_(cuda),
        device_id_(device_id), pins_(std::make_shared<lease_pins>()) {
    std::vector<bool> held(req_.size()), fills(req_.size());
    for (std::size_t i = 0; i < req_.size(); ++i) {
      keys_.push_back(req_[i].key);
      auto const s = leases_[i].status;
      held[i] = s == object_status::hit || s == object_status::fill;
      fills[i] = s == object_status::fill;
    }
    hold_ = make_hold(cache_, pins_, keys_, std::move(held), std::move(fills));
  }

  std::size_t size() const { return req_.size(); }
  std::vector<key_type> const& keys() const { return keys_; }
  std::vector<object_status> status() const {
    std::vector<object_status> s;
    for (auto const& l : leases_) { s.push_back(l.status); }
    return s;
  }
  std::vector<std::vector<std::uint32_t>> fill_pages() const {
    std::vector<std::vector<std::uint32_t>> out;
    for (auto const& l : leases_) { out.push_back(l.fill_pages); }
    return out;
  }
  bool closed() const { return hold_ == nullptr; }

  /// Object i's bytes; writable only while it is an unpublished fill of this lease.
  nb::object view(std::size_t i) const {
    hold_ptr const h = hold_;
    if (!h) { closed_error("ObjectLease.view"); }
    if (i >= req_.size()) { throw nb::index_error("ObjectLease.view: element out of range"); }
    auto const& l = leases_[i];
    if (l.status != object_status::hit && l.status != object_status::fill) {
      throw nb::value_error(("ObjectLease.view: element " + std::to_string(i) +
                             " holds no object (" + to_string(l.status) + ")").c_str());
    }
    std::optional<bool> const writable = view_writable(*pins_, i);
    if (!writable) { closed_error("ObjectLease.view"); }
    // A writable view also holds fill_views_, so publish() can tell whether one is still alive.
    nb::capsule owner = *writable ? fill_view_owner(h) : hold_owner(h);
    return dlpack_view(l.data, {l.bytes}, nb::dtype<std::uint8_t>(),
                       cuda_ ? nb::device::cuda::value : nb::device::cpu::value, device_id_,
                       owner, *writable);
  }

  /// publish() makes the objects' pages read-only (weight_cache.hpp), so a writable view still
  /// alive would fault on its next write: it is refused until those views are gone.
  void publish() {
    if (long const alive = fill_views_.use_count() - 1; alive > 0) {
      throw nb::value_error(("ObjectLease.publish: " + std::to_string(alive) +
                             " writable view(s) of the fill are still alive; publishing makes "
                             "the pages read-only, so drop them (and arrays made from them) "
                             "first").c_str());
    }
    publish_lease(*cache_, *pins_, std::nullopt, "ObjectLease.publish");
  }

  void close() {
    if (!hold_) { return; }
    close_lease(*pins_);
    hold_.reset();
  }

 private:
  std::shared_ptr<weight_cache_base> cache_;
  std::vector<object_request> req_;
  std::vector<object_lease> leases_;
  std::vector<key_type> keys_;
  bool cuda_ = false;
  int device_id_ = 0;
  std::shared_ptr<lease_pins> pins_;
  hold_ptr hold_;
  std::shared_ptr<int> fill_views_ = std::make_shared<int>(0);  ///< one more owner per writable view

  nb::capsule fill_view_owner(hold_ptr h) const {
    struct owner {
      hold_ptr hold;
      std::shared_ptr<int> fill_view;
    };
    auto* o = new owner{std::move(h), fill_views_};
    return nb::capsule(o, [](void* p) noexcept { delete static_cast<owner*>(p); });
  }
};

class py_weight_cache {
 public:
  /// (key, bytes) pairs, checked: each a pair of integers in [0, 2**64), and no object larger
  /// than the budget (checked here too, so no page count can overflow in the cache).
  std::vector<object_request> requests_arg(nb::handle requests) const {
    char const* what = "WeightCache.acquire: requests";
    if (!PySequence_Check(requests.ptr()) || PyUnicode_Check(requests.ptr())) {
      throw nb::type_error((std::string(what) + ": expected a sequence of (key, bytes) pairs, "
                            "got " + nb::type_name(requests.type()).c_str()).c_str());
    }
    std::vector<object_request> req;
    nb::sequence seq = nb::borrow<nb::sequence>(requests);
    for (std::size_t i = 0, n = nb::len(seq); i < n; ++i) {
      nb::object item = seq[i];
      std::string const at = std::string(what) + "[" + std::to_string(i) + "]";
      if (!PySequence_Check(item.ptr()) || PyUnicode_Check(item.ptr()) || nb::len(item) != 2) {
        throw nb::type_error((at + ": expected a (key, bytes) pair, got " +
                              nb::repr(item).c_str()).c_str());
      }
      object_request const q{uint_arg(item[0], at.c_str(), "key"),
                             uint_arg(item[1], at.c_str(), "bytes")};
      if (q.bytes > c_->budget_bytes()) {
        throw error(error_code::invalid_size,
                    "WeightCache.acquire: object " + std::to_string(q.key) + " of " +
                        std::to_string(q.bytes) + " bytes needs more pages than the budget " +
                        "holds (" + std::to_string(c_->budget_bytes()) + " bytes)");
      }
      req.push_back(q);
    }
    return req;
  }

  py_weight_cache(std::size_t budget_bytes, std::size_t page_bytes, std::string const& backend,
                  std::string const& huge, int io_threads, double table_ratio, int cpu_threads,
                  std::uint64_t seed)
      : cuda_(parse_backend_is_cuda(backend)) {
    weight_cache_options o;
    o.table_ratio = table_ratio;
    o.cpu_threads = cpu_threads;
    o.seed = seed;
    if (huge == "auto") {
      o.huge = huge_pages::automatic;
    } else if (huge == "on") {
      o.huge = huge_pages::on;
    } else if (huge == "off") {
      o.huge = huge_pages::off;
    } else {
      throw nb::value_error(("huge_pages must be 'auto', 'on' or 'off', got '" + huge + "'").c_str());
    }
    if (io_threads < 1 || io_threads > 64) {
      throw nb::value_error("io_threads must be in [1, 64]");
    }
#if CCHT_WITH_CUDA
    if (cuda_) {
      c_ = std::make_shared<weight_cache_impl<cuda_backend>>(budget_bytes, page_bytes, o, io_threads);
      device_id_ = current_device_id(true);
      return;
    }
#endif
    c_ = std::make_shared<weight_cache_impl<cpu_backend>>(budget_bytes, page_bytes, o, io_threads);
  }

  py_model load(nb::handle path_given, std::string const& layout) {
    fs_path path = path_arg(path_given, "WeightCache.load");
    model_layout l = model_layout::per_tensor;
    if (layout == "packed") {
      l = model_layout::packed;
    } else if (layout != "per-tensor") {
      throw nb::value_error(("layout must be 'per-tensor' or 'packed', got '" + layout + "'").c_str());
    }
    std::unique_ptr<model_base> m;
    {
      gil_released unlocked;
      m = c_->load(path.bytes, l);
    }
    return py_model(c_, std::move(m), std::move(path.given), cuda_, device_id_);
  }

  py_object_lease acquire(nb::handle requests) {
    std::vector<object_request> req = requests_arg(requests);
    std::vector<object_lease> leases(req.size());
    {
      gil_released unlocked;
      c_->acquire(req, leases);
    }
    return py_object_lease(c_, std::move(req), std::move(leases), cuda_, device_id_);
  }
  std::size_t erase(nb::handle keys) {
    auto const k = host_keys(keys, "WeightCache.erase: keys");
    gil_released unlocked;
    return c_->erase(k);
  }
  /// Waits in steps of a day at most: a longer std::chrono timeout would overflow the clock.
  bool wait_ready(nb::handle keys, double timeout_s) {
    auto const k = host_keys(keys, "WeightCache.wait_ready: keys");
    std::optional<std::chrono::milliseconds> left =
        timeout_arg(timeout_s, "WeightCache.wait_ready");
    constexpr std::chrono::milliseconds step = std::chrono::hours(24);
    gil_released unlocked;
    while (true) {
      auto const now = left ? std::min(*left, step) : step;
      if (c_->wait_ready(k, now)) { return true; }
      if (left) {
        *left -= now;
        if (left->count() <= 0) { return false; }
      }
    }
  }
  nb::dict stats() const { return to_dict(c_->stats()); }
  std::size_t page_bytes() const { return c_->page_bytes(); }
  std::size_t budget_bytes() const { return c_->budget_bytes(); }
  std::size_t num_pages() const { return c_->num_pages(); }
  char const* backend() const { return cuda_ ? "cuda" : "cpu"; }

 private:
  bool cuda_ = false;
  int device_id_ = 0;
  std::shared_ptr<weight_cache_base> c_;
};

}  // namespace

void bind_page_cache(nb::module_& m) {
  nb::enum_<page_status>(m, "PageStatus", nb::is_arithmetic(),
                         "Outcome of one element of PageCache.acquire / lookup (PageLease.status).")
      .value("hit", page_status::hit, "resident and published: pinned for the lease")
      .value("fill", page_status::fill, "a fresh page, pinned: write it, then publish")
      .value("pending", page_status::pending, "another caller is filling it: nothing held")
      .value("no_space", page_status::no_space, "every candidate page is pinned: nothing held")
      .value("miss", page_status::miss, "lookup: not resident")
      .value("rejected", page_status::rejected, "the batch was rejected (CUDA async)");

  nb::class_<py_page_lease>(
      m, "PageLease",
      "The pages one acquire, lookup or match_prefix pinned. It keeps its pins until it is closed "
      "and its last view is gone; then fills never published are abandoned and the rest released.")
      .def("__len__", &py_page_lease::size)
      .def_prop_ro("keys", &py_page_lease::keys, "The keys, uint64 (the run for match_prefix).")
      .def_prop_ro("pages", &py_page_lease::pages,
                   "Page id per element, uint32 (hit and fill; 0xffffffff otherwise).")
      .def_prop_ro("status", &py_page_lease::status, "PageStatus code per element, uint8.")
      .def_prop_ro("evicted_keys", &py_page_lease::evicted_keys,
                   "acquire: keys evicted to make room (their pages now belong to fills).")
      .def_prop_ro("evicted_pages", &py_page_lease::evicted_pages,
                   "acquire: the evicted keys' pages (the old bytes are still in them).")
      .def_prop_ro("closed", &py_page_lease::closed)
      .def("view", &py_page_lease::view, "i"_a,
           "Element i's page as a DLPack array of page_bytes uint8 (np.from_dlpack / "
           "torch.from_dlpack see the cache's memory). It keeps the lease's pins. Writable only "
           "while the element is an unpublished fill of this lease; a hit's or a published "
           "page's view is read-only (every reader shares it).")
      .def("publish", &py_page_lease::publish, "which"_a = nb::none(),
           nb::sig("def publish(self, which: collections.abc.Sequence[int] | None = None) -> None"),
           "Marks the lease's fills (all, or the element indices given) ready for readers. "
           "ValueError, with nothing published, when the lease is closed or an index is out of "
           "range, repeated, or not an unpublished fill.")
      .def("close", &py_page_lease::close,
           "Lets go of the pins (they are given back once no view is alive).")
      .def("release", &py_page_lease::close, "Same as close().")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](py_page_lease& l, nb::handle, nb::handle, nb::handle) { l.close(); },
           "exc_type"_a.none(), "exc"_a.none(), "tb"_a.none());

  nb::class_<py_page_cache>(
      m, "PageCache",
      "Fixed-size pages in backend memory found by uint64 key through the CCHT index, pinned while "
      "a lease or a view holds them (ccht::page_cache, double LRU).")
      .def(nb::init<std::size_t, std::size_t, std::string const&, double, std::uint64_t, int>(),
           "num_pages"_a, "page_bytes"_a, "backend"_a = "cpu", "table_ratio"_a = 0.9,
           "seed"_a = default_seed, "cpu_threads"_a = 0)
      .def("acquire", &py_page_cache::acquire, "keys"_a,
           nb::sig("def acquire(self, keys: numpy.typing.ArrayLike) -> PageLease"),
           "Per key: hit (pinned), fill (pinned; write it, then lease.publish()), pending or "
           "no_space. Returns a PageLease.")
      .def("lookup", &py_page_cache::lookup, "keys"_a,
           nb::sig("def lookup(self, keys: numpy.typing.ArrayLike) -> PageLease"),
           "Per key: hit (pinned), pending or miss; never inserts. Returns a PageLease.")
      .def("match_prefix", &py_page_cache::match_prefix, "keys"_a,
           nb::sig("def match_prefix(self, keys: numpy.typing.ArrayLike) -> PageLease"),
           "Pins the longest leading run of published keys (see chain_keys). Returns a PageLease "
           "of the run.")
      .def("erase", &py_page_cache::erase, "keys"_a,
           nb::sig("def erase(self, keys: numpy.typing.ArrayLike) -> int"),
           "Erases unpinned keys; pinned ones are refused. Returns how many were erased.")
      .def("stats", &py_page_cache::stats, "Counters and gauges.")
      .def("pool", [](nb::handle self) { return nb::cast<py_page_cache&>(self).pool(self); },
           "The whole pool as a (num_pages, page_bytes) uint8 DLPack array, for kernels that "
           "take page ids. It keeps the cache alive but pins nothing: a page's bytes are stable "
           "only while a lease holds it. Writable (kernels write fills through it).")
      .def_prop_ro("num_pages", &py_page_cache::num_pages)
      .def_prop_ro("page_bytes", &py_page_cache::page_bytes)
      .def_prop_ro("backend", &py_page_cache::backend);
}

void bind_weight_cache(nb::module_& m) {
  nb::enum_<object_status>(m, "ObjectStatus", nb::is_arithmetic(),
                           "Outcome of one object of WeightCache.acquire.")
      .value("hit", object_status::hit, "every page resident: pinned and mapped")
      .value("fill", object_status::fill, "pinned and mapped: write fill_pages, then publish")
      .value("pending", object_status::pending, "another caller fills it: see wait_ready")
      .value("no_space", object_status::no_space, "too few unpinned pages: nothing held");

  nb::class_<py_model>(
      m, "Model",
      "A safetensors model loaded through a WeightCache: every tensor pinned and contiguous. "
      "model[name] is a DLPack array of the tensor in the cache's memory (zero copy). The pins "
      "are kept until the model is closed (the end of its `with` block) and its last view is gone.")
      .def("__getitem__", &py_model::get, "name"_a,
           "The tensor as a read-only DLPack array of its dtype and shape (F8 as DLPack float8; "
           "see raw()). Read-only: every load of the file shares these bytes.")
      .def("raw", &py_model::raw, "name"_a,
           "The tensor's bytes as a read-only 1-D uint8 DLPack array.")
      .def("__contains__", &py_model::contains, "name"_a)
      .def("__len__", &py_model::size)
      .def("names", &py_model::names, "Tensor names in file order.")
      .def("keys", &py_model::names, "Same as names().")
      .def("__iter__", [](py_model const& mo) { return nb::iter(nb::cast(mo.names())); })
      .def("info", &py_model::info, "name"_a,
           "name, dtype (as the file spells it), shape and bytes of a tensor.")
      .def_prop_ro("report", &py_model::report,
                   "What the load did: objects, hits, fills, waits, pages_filled, bytes_read, "
                   "seconds, warm.")
      .def_prop_ro("path", &py_model::path, "The path as given (os.fspath of it).")
      .def_prop_ro("closed", &py_model::closed)
      .def("close", &py_model::close, "Lets go of the pins (given back once no view is alive).")
      .def("release", &py_model::close, "Same as close().")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](py_model& mo, nb::handle, nb::handle, nb::handle) { mo.close(); },
           "exc_type"_a.none(), "exc"_a.none(), "tb"_a.none());

  nb::class_<py_object_lease>(
      m, "ObjectLease",
      "The objects one WeightCache.acquire pinned, each contiguous. Same pin rule as PageLease.")
      .def("__len__", &py_object_lease::size)
      .def_prop_ro("keys", &py_object_lease::keys)
      .def_prop_ro("status", &py_object_lease::status, "ObjectStatus per object.")
      .def_prop_ro("fill_pages", &py_object_lease::fill_pages,
                   "Per object: the page indices to write (fill); page i is bytes "
                   "[i * page_bytes, min((i + 1) * page_bytes, size)).")
      .def_prop_ro("closed", &py_object_lease::closed)
      .def("view", &py_object_lease::view, "i"_a,
           "Object i's bytes as a 1-D uint8 DLPack array (the cache's memory). Writable only while "
           "the object is an unpublished fill of this lease; otherwise read-only.")
      .def("publish", &py_object_lease::publish,
           "Marks every fill of the lease ready (ValueError when the lease is closed).")
      .def("close", &py_object_lease::close,
           "Lets go of the pins; fills not published are abandoned (once no view is alive).")
      .def("release", &py_object_lease::close, "Same as close().")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](py_object_lease& l, nb::handle, nb::handle, nb::handle) { l.close(); },
           "exc_type"_a.none(), "exc"_a.none(), "tb"_a.none());

  nb::class_<py_weight_cache>(
      m, "WeightCache",
      "Objects of any size (tensors, files) over a page pool of exactly budget_bytes, each "
      "contiguous while resident (ccht::weight_cache), and a safetensors loader over it.")
      .def(nb::init<std::size_t, std::size_t, std::string const&, std::string const&, int, double,
                    int, std::uint64_t>(),
           "budget_bytes"_a, "page_bytes"_a = std::size_t{2} << 20, "backend"_a = "cpu",
           "huge_pages"_a = "auto", "io_threads"_a = 2, "table_ratio"_a = 0.5,
           "cpu_threads"_a = 0, "seed"_a = default_seed)
      .def("load", &py_weight_cache::load, "path"_a, "layout"_a = "per-tensor",
           nb::sig("def load(self, path: str | bytes | os.PathLike, layout: str = 'per-tensor') "
                   "-> Model"),
           "Loads a safetensors file: every tensor pinned and contiguous (a Model). Threads "
           "loading the same file at once read it once.")
      .def("acquire", &py_weight_cache::acquire, "requests"_a,
           nb::sig("def acquire(self, requests: collections.abc.Sequence[tuple[int, int]]) "
                   "-> ObjectLease"),
           "Acquires objects given as (key, bytes) pairs; returns an ObjectLease.")
      .def("erase", &py_weight_cache::erase, "keys"_a,
           nb::sig("def erase(self, keys: numpy.typing.ArrayLike) -> int"),
           "Erases unpinned objects; returns how many were erased.")
      .def("wait_ready", &py_weight_cache::wait_ready, "keys"_a, "timeout"_a = 60.0,
           nb::sig("def wait_ready(self, keys: numpy.typing.ArrayLike, timeout: float = 60.0) "
                   "-> bool"),
           "Waits until none of the keys is being filled; False on timeout (seconds; inf or "
           "above 1e9: no limit; negative or NaN: ValueError).")
      .def("stats", &py_weight_cache::stats, "Counters and gauges.")
      .def_prop_ro("page_bytes", &py_weight_cache::page_bytes)
      .def_prop_ro("budget_bytes", &py_weight_cache::budget_bytes)
      .def_prop_ro("num_pages", &py_weight_cache::num_pages)
      .def_prop_ro("backend", &py_weight_cache::backend);
}

}  // namespace ccht::py
