// ccht.PageCache and ccht.PageLease: pinned pages exported through DLPack without a copy. The pin
// rule (docs/python.md): a lease keeps its pins until it is closed *and* its last view is gone.
#include "common.hpp"
#include "lease.hpp"

#include <ccht/cache/page_cache.hpp>

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
struct typed_page_cache final : page_cache_base {
  page_cache<Backend> c;
  typed_page_cache(std::size_t pages, std::size_t page_bytes, page_cache_options o)
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
      c_ = std::make_shared<typed_page_cache<cuda_backend>>(num_pages, page_bytes, o);
      device_id_ = current_device_id(true);
      return;
    }
#endif
    c_ = std::make_shared<typed_page_cache<cpu_backend>>(num_pages, page_bytes, o);
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

}  // namespace ccht::py
