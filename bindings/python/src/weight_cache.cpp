// ccht.WeightCache, ccht.Model and ccht.ObjectLease: safetensors models and objects exported
// through DLPack without a copy. The pin rule (docs/python.md): a lease or a model keeps its pins
// until it is closed *and* its last view is gone.
#include "common.hpp"
#include "lease.hpp"

#include <ccht/cache/model_loader.hpp>
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

// ---- weight cache -----------------------------------------------------------------------------

/// A loaded model of either backend.
struct model_base {
  virtual ~model_base() = default;
  virtual std::vector<model_tensor> const& tensors() const = 0;
  virtual load_report const& report() const = 0;
  virtual void release() = 0;
};
template <class Backend>
struct typed_model final : model_base {
  loaded_model<Backend> m;
  explicit typed_model(loaded_model<Backend>&& x) : m(std::move(x)) {}
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
struct typed_weight_cache final : weight_cache_base {
  weight_cache<Backend> c;
  model_loader<Backend> per_tensor, packed;
  typed_weight_cache(std::size_t budget, std::size_t page_bytes, weight_cache_options o,
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
    return std::make_unique<typed_model<Backend>>(loader.load(path));
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
      c_ = std::make_shared<typed_weight_cache<cuda_backend>>(budget_bytes, page_bytes, o, io_threads);
      device_id_ = current_device_id(true);
      return;
    }
#endif
    c_ = std::make_shared<typed_weight_cache<cpu_backend>>(budget_bytes, page_bytes, o, io_threads);
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
