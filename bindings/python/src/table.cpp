// ccht.Table: ccht::table over NumPy arrays and DLPack producers, for every policy and backend.
#include "common.hpp"

#include <ccht/core/policy.hpp>
#include <ccht/policy_list.hpp>
#include <ccht/table.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <optional>
#include <tuple>
#include <vector>

namespace ccht::py {
namespace {

using namespace nb::literals;

/// A 1-D host array written in place: its dtype and layout must be exactly these (noconvert).
template <class T>
using out_array = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

/// The operations of a table of any policy, on backend pointers (sizes checked by ccht::table).
struct table_base {
  virtual ~table_base() = default;
  virtual std::size_t insert(key_type const* k, std::size_t nk, value_type const* v, std::size_t nv,
                             key_type* ek, value_type* ev) = 0;
  virtual void find(key_type const* k, std::size_t nk, value_type* v, std::size_t nv, bool* f,
                    std::size_t nf) = 0;
  virtual void contains(key_type const* k, std::size_t n, bool* f) = 0;
  virtual std::size_t erase(key_type const* k, std::size_t n) = 0;
  virtual std::size_t size() = 0;
  virtual void clear() = 0;
  virtual std::size_t export_entries(key_type* k, value_type* v, std::size_t cap) = 0;
  virtual std::size_t capacity() const = 0;
  virtual std::size_t num_slots() const = 0;
  virtual access_counts access_stats() const = 0;
  virtual void reset_access_stats() = 0;
};

template <class Backend, class Policy>
struct table_impl final : table_base {
  table<Backend, Policy> t;
  table_impl(std::size_t slots, table_options o) : t(slots, o) {}
  std::size_t insert(key_type const* k, std::size_t nk, value_type const* v, std::size_t nv,
                     key_type* ek, value_type* ev) override {
    return t.insert_or_assign({k, nk}, {v, nv}, {ek, nk}, {ev, nk});
  }
  void find(key_type const* k, std::size_t nk, value_type* v, std::size_t nv, bool* f,
            std::size_t nf) override {
    t.find({k, nk}, {v, nv}, {f, nf});
  }
  void contains(key_type const* k, std::size_t n, bool* f) override { t.contains({k, n}, {f, n}); }
  std::size_t erase(key_type const* k, std::size_t n) override { return t.erase({k, n}); }
  std::size_t size() override { return t.size(); }
  void clear() override { t.clear(); }
  std::size_t export_entries(key_type* k, value_type* v, std::size_t cap) override {
    return t.export_entries({k, cap}, {v, cap});
  }
  std::size_t capacity() const override { return t.capacity(); }
  std::size_t num_slots() const override { return t.num_slots(); }
  access_counts access_stats() const override { return t.access_stats(); }
  void reset_access_stats() override { t.reset_access_stats(); }
};

/// A table of the policy named @p policy (its library name); a ValueError listing the policies
/// for any other name.
template <class Backend>
std::unique_ptr<table_base> make_table(std::string const& policy, std::size_t slots,
                                       table_options o) {
  if (!is_policy_name(policy)) { throw nb::value_error(unknown_policy_message(policy).c_str()); }
  return with_policy(policy, [&]<class P>(std::type_identity<P>) -> std::unique_ptr<table_base> {
    return std::make_unique<table_impl<Backend, P>>(slots, o);
  });
}

/// Inputs staged into backend memory where they are not there already, and outputs placed where
/// the caller's arrays live: host inputs give NumPy outputs; CUDA inputs (CUDA backend) give
/// DLPack arrays in device memory.
template <class Backend>
struct io {
  arena<Backend> mem;
  bool device_io = false;  ///< the inputs were device arrays (CUDA backend only)
  int device_id = 0;

  template <class T>
  T const* input(in_array<T> const& a, char const* what, bool first) {
    bool const on_device = a.device_type() == nb::device::cuda::value;
    if (!on_device && a.device_type() != nb::device::cpu::value) {
      throw nb::value_error((std::string(what) + ": arrays must be host (NumPy) or CUDA arrays")
                                .c_str());
    }
    if constexpr (std::is_same_v<Backend, cpu_backend>) {
      if (on_device) {
        throw nb::value_error((std::string(what) + ": a cpu table takes host arrays, got a CUDA "
                               "array").c_str());
      }
      return a.data();
    } else {
      if (first) {
        device_io = on_device;
        device_id = on_device ? a.device_id() : current_device_id(true);
      } else if (on_device != device_io) {
        throw nb::value_error((std::string(what) + ": mix of host and CUDA arrays").c_str());
      }
      if (on_device) { return a.data(); }
      std::size_t const n = a.shape(0);
      T* d = mem.template alloc<T>(n);
      Backend::copy_from_host(d, a.data(), n * sizeof(T));
      return d;
    }
  }

  /// An output of @p n elements, of which the first @p keep are returned.
  template <class T>
  nb::object output(T* d, std::size_t keep) {
    if constexpr (std::is_same_v<Backend, cpu_backend>) {
      mem.hand_over(d);
      return numpy_array(d, keep, backend_owner<Backend>(d));
    } else {
      if (device_io) {
        mem.hand_over(d);
        return dlpack_view(d, {keep}, nb::dtype<T>(), nb::device::cuda::value, device_id,
                           backend_owner<Backend>(d), /*writable=*/true);  // the caller's own
      }
      T* h = new T[keep == 0 ? 1 : keep];
      Backend::copy_to_host(h, d, keep * sizeof(T));
      nb::capsule owner(h, [](void* q) noexcept { delete[] static_cast<T*>(q); });
      return numpy_array(h, keep, owner);
    }
  }
};

/// The Python class: a table of the policy and backend chosen at construction.
class py_table {
 public:
  py_table(std::size_t slots, std::string const& policy, std::size_t capacity,
           std::string const& backend, std::uint64_t seed, std::uint32_t global_samples,
           std::string const& global_search, int cpu_threads, bool count_accesses,
           std::uint32_t own_first_slack, bool bulk_victim_select)
      : cuda_(parse_backend_is_cuda(backend)), policy_(policy) {
    table_options o;
    o.own_first_slack = own_first_slack;  // checked (0-255) by the table
    o.bulk_victim_select = bulk_victim_select;
    o.seed = seed;
    o.capacity = capacity;
    o.global_samples = global_samples;
    o.cpu_threads = cpu_threads;
    o.count_accesses = count_accesses;
    if (global_search != "tail-index" && global_search != "two-level" &&
        global_search != "own-first" && global_search != "sampled") {
      throw nb::value_error(("global_search must be 'tail-index', 'two-level', 'own-first' or "
                             "'sampled', got '" + global_search + "'").c_str());
    }
    o.global_search = parse_victim_search(global_search);
#if CCHT_WITH_CUDA
    if (cuda_) {
      t_ = make_table<cuda_backend>(policy, slots, o);
      return;
    }
#endif
    t_ = make_table<cpu_backend>(policy, slots, o);
  }

  std::tuple<nb::object, nb::object> insert(nb::handle keys_arg, nb::handle values_arg) {
    auto const keys = uint_array<key_type>(keys_arg, "Table.insert: keys");
    auto const values = uint_array<value_type>(values_arg, "Table.insert: values");
#if CCHT_WITH_CUDA
    if (cuda_) { return insert_on<cuda_backend>(keys, values); }
#endif
    return insert_on<cpu_backend>(keys, values);
  }

  std::tuple<nb::object, nb::object> find(nb::handle keys_arg) {
    auto const keys = uint_array<key_type>(keys_arg, "Table.find: keys");
#if CCHT_WITH_CUDA
    if (cuda_) { return find_on<cuda_backend>(keys); }
#endif
    return find_on<cpu_backend>(keys);
  }

  /// find() into the caller's host arrays (no allocation): the fast path of a serving loop. The
  /// outputs are bound with noconvert(): a converted output would be a temporary, and the
  /// caller's array would silently stay as it was.
  void find_into(nb::handle keys_arg, out_array<value_type> values, out_array<bool> found) {
    auto const keys = uint_array<key_type>(keys_arg, "Table.find_into: keys");
    if (cuda_) { throw nb::value_error("find_into: host arrays with a cpu table only"); }
    if (keys.device_type() != nb::device::cpu::value) {
      throw nb::value_error("find_into: keys must be a host array");
    }
    gil_released unlocked;
    t_->find(keys.data(), keys.shape(0), values.data(), values.shape(0), found.data(),
             found.shape(0));
  }

  nb::object contains(nb::handle keys_arg) {
    auto const keys = uint_array<key_type>(keys_arg, "Table.contains: keys");
#if CCHT_WITH_CUDA
    if (cuda_) { return contains_on<cuda_backend>(keys); }
#endif
    return contains_on<cpu_backend>(keys);
  }

  std::size_t erase(nb::handle keys_arg) {
    auto const keys = uint_array<key_type>(keys_arg, "Table.erase: keys");
#if CCHT_WITH_CUDA
    if (cuda_) { return erase_on<cuda_backend>(keys); }
#endif
    return erase_on<cpu_backend>(keys);
  }

  std::tuple<nb::object, nb::object> items() {
#if CCHT_WITH_CUDA
    if (cuda_) { return items_on<cuda_backend>(); }
#endif
    return items_on<cpu_backend>();
  }

  std::size_t size() {
    gil_released unlocked;
    return t_->size();
  }
  void clear() {
    gil_released unlocked;
    t_->clear();
  }
  std::size_t capacity() const { return t_->capacity(); }
  std::size_t num_slots() const { return t_->num_slots(); }
  std::string const& policy() const { return policy_; }
  char const* backend() const { return cuda_ ? "cuda" : "cpu"; }
  nb::dict access_stats() const {
    access_counts const c = t_->access_stats();
    nb::dict d;
    d["bucket_reads"] = c.bucket_reads;
    d["bucket_writes"] = c.bucket_writes;
    d["bytes_read"] = c.bytes_read;
    d["bytes_written"] = c.bytes_written;
    d["kicks"] = c.kicks;
    d["chosen_victims"] = c.chosen_victims;
    return d;
  }
  void reset_access_stats() { t_->reset_access_stats(); }

  /// Seconds of each of @p reps C++ find() calls on @p keys into buffers allocated once: the
  /// reference the Python call is measured against (bench/python/bench_find.py).
  std::vector<double> time_find(nb::handle keys_arg, int reps) {
    auto const keys = uint_array<key_type>(keys_arg, "Table._time_find: keys");
    if (cuda_ || keys.device_type() != nb::device::cpu::value) {
      throw nb::value_error("_time_find: cpu tables and host keys only");
    }
    std::size_t const n = keys.shape(0);
    std::vector<value_type> v(n);
    std::unique_ptr<bool[]> f(new bool[n]);
    std::vector<double> out;
    gil_released unlocked;
    for (int r = 0; r < reps; ++r) {
      auto const t0 = std::chrono::steady_clock::now();
      t_->find(keys.data(), n, v.data(), n, f.get(), n);
      out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return out;
  }

 private:
  template <class B>
  std::tuple<nb::object, nb::object> insert_on(in_array<key_type> const& keys,
                                               in_array<value_type> const& values) {
    io<B> x;
    key_type const* k = x.input(keys, "insert", true);
    value_type const* v = x.input(values, "insert", false);
    std::size_t const n = keys.shape(0);
    auto* ek = x.mem.template alloc<key_type>(n);
    auto* ev = x.mem.template alloc<value_type>(n);
    std::size_t m = 0;
    {
      gil_released unlocked;
      m = t_->insert(k, n, v, values.shape(0), ek, ev);
    }
    return {x.output(ek, m), x.output(ev, m)};
  }

  template <class B>
  std::tuple<nb::object, nb::object> find_on(in_array<key_type> const& keys) {
    io<B> x;
    key_type const* k = x.input(keys, "find", true);
    std::size_t const n = keys.shape(0);
    auto* v = x.mem.template alloc<value_type>(n);
    auto* f = x.mem.template alloc<bool>(n);
    {
      gil_released unlocked;
      t_->find(k, n, v, n, f, n);
    }
    return {x.output(v, n), x.output(f, n)};
  }

  template <class B>
  nb::object contains_on(in_array<key_type> const& keys) {
    io<B> x;
    key_type const* k = x.input(keys, "contains", true);
    std::size_t const n = keys.shape(0);
    auto* f = x.mem.template alloc<bool>(n);
    {
      gil_released unlocked;
      t_->contains(k, n, f);
    }
    return x.output(f, n);
  }

  template <class B>
  std::size_t erase_on(in_array<key_type> const& keys) {
    io<B> x;
    key_type const* k = x.input(keys, "erase", true);
    gil_released unlocked;
    return t_->erase(k, keys.shape(0));
  }

  template <class B>
  std::tuple<nb::object, nb::object> items_on() {
    io<B> x;
    std::size_t n = 0;
    key_type* k = nullptr;
    value_type* v = nullptr;
    {
      gil_released unlocked;
      std::size_t cap = t_->size() + 1024;
      while (true) {  // concurrent writers may grow it between the size and the copy
        k = x.mem.template alloc<key_type>(cap);
        v = x.mem.template alloc<value_type>(cap);
        n = t_->export_entries(k, v, cap);
        if (n <= cap) { break; }
        cap = n + n / 4;
      }
    }
    return {x.output(k, n), x.output(v, n)};
  }

  bool cuda_ = false;
  std::string policy_;
  std::unique_ptr<table_base> t_;
};

}  // namespace

void bind_table(nb::module_& m) {
  nb::class_<py_table>(m, "Table",
                       "The CCHT index: a bucketized cuckoo hash table of uint64 keys and values "
                       "whose per-bucket policy replaces kick-out (ccht::table). Bulk calls take "
                       "1-D uint64 arrays (NumPy or any DLPack producer; CUDA arrays for a cuda "
                       "table) and release the GIL. Keys and values are never converted with "
                       "a loss: other integer arrays and lists of ints are taken when every "
                       "element is in [0, 2**64), floats are a TypeError.")
      .def(nb::init<std::size_t, std::string const&, std::size_t, std::string const&,
                    std::uint64_t, std::uint32_t, std::string const&, int, bool, std::uint32_t,
                    bool>(),
           "slots"_a, "policy"_a = "lru", "capacity"_a = 0, "backend"_a = "cpu",
           "seed"_a = default_seed, "global_samples"_a = 0, "global_search"_a = "two-level",
           "cpu_threads"_a = 0, "count_accesses"_a = false,
           "own_first_slack"_a = default_own_first_slack, "bulk_victim_select"_a = true,
           "A table of at least `slots` slots. `policy`: lru, fifo, lfu, double-lru, coarse-lru, "
           "cht-lru or cht-random. `capacity` (double-lru, coarse-lru): most entries held, below "
           "the slots (0: the slots). `global_search`: two-level, tail-index, own-first or "
           "sampled; `own_first_slack` (own-first, 0-255): how much younger than the last global "
           "victim, in 256ths of its age, an own bucket's oldest entry may be and still be "
           "evicted in place. `bulk_victim_select` (double-lru, cpu): an insert of a batch "
           "needing a victim per bucket or more chooses them all in one pass.")
      .def("insert", &py_table::insert, "keys"_a, "values"_a,
           nb::sig("def insert(self, keys: numpy.typing.ArrayLike, values: numpy.typing.ArrayLike) -> "
                   "tuple[numpy.typing.NDArray[numpy.uint64], numpy.typing.NDArray[numpy.uint64]]"),
           "Upserts every pair; returns the evicted (keys, values).")
      .def("find", &py_table::find, "keys"_a,
           nb::sig("def find(self, keys: numpy.typing.ArrayLike) -> "
                   "tuple[numpy.typing.NDArray[numpy.uint64], numpy.typing.NDArray[numpy.bool_]]"),
           "Looks every key up (a hit promotes it); returns (values, found). values[i] is "
           "meaningful where found[i].")
      .def("find_into", &py_table::find_into, "keys"_a, "values"_a.noconvert(),
           "found"_a.noconvert(),
           nb::sig("def find_into(self, keys: numpy.typing.ArrayLike, "
                   "values: numpy.typing.NDArray[numpy.uint64], "
                   "found: numpy.typing.NDArray[numpy.bool_]) -> None"),
           "find() into preallocated host arrays (cpu tables): no allocation per call. `values` "
           "must be a writable C-contiguous uint64 array and `found` a bool one, each as long as "
           "`keys` (anything else is a TypeError: an output is never converted).")
      .def("contains", &py_table::contains, "keys"_a,
           nb::sig("def contains(self, keys: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.bool_]"),
           "Whether each key is present, without promoting it.")
      .def("erase", &py_table::erase, "keys"_a,
           nb::sig("def erase(self, keys: numpy.typing.ArrayLike) -> int"), "Erases every key; returns how many were present.")
      .def("items", &py_table::items,
           nb::sig("def items(self) -> tuple[numpy.typing.NDArray[numpy.uint64], numpy.typing.NDArray[numpy.uint64]]"),
           "Every entry as (keys, values).")
      .def("clear", &py_table::clear, "Removes every entry (not reported as evicted).")
      .def("__len__", &py_table::size, "Number of entries (a snapshot under concurrency).")
      .def_prop_ro("capacity", &py_table::capacity, "Most entries held.")
      .def_prop_ro("num_slots", &py_table::num_slots, "Slots (buckets x 16).")
      .def_prop_ro("policy", &py_table::policy, "The policy's name.")
      .def_prop_ro("backend", &py_table::backend, "'cpu' or 'cuda'.")
      .def("access_stats", &py_table::access_stats,
           "Buckets and bytes touched by bulk calls (count_accesses=True).")
      .def("reset_access_stats", &py_table::reset_access_stats, "Zeroes the access counters.")
      .def("_time_find", &py_table::time_find, "keys"_a, "reps"_a,
           nb::sig("def _time_find(self, keys: numpy.typing.ArrayLike, reps: int) -> list[float]"),
           "Benchmark helper: seconds of each C++ find() of `keys` (outputs allocated once).");
}

}  // namespace ccht::py
