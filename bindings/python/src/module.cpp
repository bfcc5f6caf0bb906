// The extension module ccht._ccht: errors, shared helpers, and the submodules' bind functions.
#include "common.hpp"

#include <ccht/cache/kv_keys.hpp>

#include <sim/model_runtime.hpp>

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cxxabi.h>
#include <unistd.h>

#include <stdexcept>

namespace ccht::py {

void bind_table(nb::module_& m);
void bind_page_cache(nb::module_& m);
void bind_weight_cache(nb::module_& m);

bool parse_backend_is_cuda(std::string const& name) {
  if (name == "cpu") { return false; }
  if (name == "cuda") {
    if (!have_cuda) {
      throw nb::value_error("backend 'cuda': this build of ccht has no CUDA backend (build it with "
                            "CCHT_ENABLE_CUDA=ON; see docs/python.md)");
    }
    return true;
  }
  throw nb::value_error(("backend must be 'cpu' or 'cuda', got '" + name + "'").c_str());
}

int current_device_id(bool cuda) {
#if CCHT_WITH_CUDA
  if (cuda) {
    int d = 0;
    detail::check_cuda(cudaGetDevice(&d), "cudaGetDevice");
    return d;
  }
#endif
  (void)cuda;
  return 0;
}

void restore_thread(PyThreadState* state) noexcept {
  try {
    PyEval_RestoreThread(state);
  } catch (abi::__forced_unwind&) {
    // Never leave this handler: ending it without a rethrow aborts, and a rethrow would reach
    // noexcept frames. The process is exiting; this thread holds no lock (see gil_released).
    for (;;) { pause(); }
  }
}

hold::~hold() {
  if (!release_) { return; }
  std::string failure;
  {
    gil_released unlocked;
    try {
      release_();
    } catch (std::exception const& e) {
      failure = e.what();
    }
  }
  if (!failure.empty()) { warn(("ccht: releasing pins failed: " + failure).c_str()); }
}

nb::capsule hold_owner(hold_ptr h) {
  auto* copy = new hold_ptr(std::move(h));
  return nb::capsule(copy, [](void* p) noexcept { delete static_cast<hold_ptr*>(p); });
}

nb::object dlpack_view(void* data, std::vector<std::size_t> const& shape, nb::dlpack::dtype dtype,
                       int device_type, int device_id, nb::handle owner, bool writable) {
  if (writable) {
    return nb::ndarray<nb::array_api>(data, shape.size(), shape.data(), owner, nullptr, dtype,
                                      device_type, device_id)
        .cast();
  }
  return nb::ndarray<nb::array_api, nb::ro>(data, shape.size(), shape.data(), owner, nullptr,
                                            dtype, device_type, device_id)
      .cast();
}

void warn(char const* what) {
  if (PyErr_WarnEx(PyExc_RuntimeWarning, what, 1) != 0) { PyErr_Clear(); }
}

}  // namespace ccht::py

namespace {

namespace nb = nanobind;
using namespace nb::literals;

nb::object chain_keys_py(nb::handle tokens_arg, std::size_t page_tokens, ccht::key_type parent) {
  // Tokens out of uint32 range are refused, not wrapped: the hash is fixed (vLLM-style keys).
  auto const tokens = ccht::py::uint_array<ccht::token_type>(tokens_arg, "chain_keys: tokens");
  if (tokens.device_type() != nb::device::cpu::value) {
    throw nb::value_error("chain_keys: tokens must be a host array");
  }
  auto const keys = ccht::chain_keys({tokens.data(), tokens.shape(0)}, page_tokens, parent);
  return ccht::py::numpy_copy(keys.data(), keys.size());
}

}  // namespace

NB_MODULE(_ccht, m) {
  m.doc() = "ccht: a GPU-memory cache (bucketized cuckoo hash table with double-LRU replacement), "
            "its page cache and weight cache. See docs/python.md.";

  // ccht::error -> ccht.Error(RuntimeError) with the same message and a `code` attribute.
  static nb::object error_type = nb::steal(PyErr_NewExceptionWithDoc(
      "ccht.Error",
      "Raised for every ccht::error: the message is the C++ one ('ccht: <code>: ...'), and "
      "`code` is its error code ('invalid_size', 'reserved_key', ...).",
      PyExc_RuntimeError, nullptr));
  m.attr("Error") = error_type;
  nb::register_exception_translator([](std::exception_ptr const& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (ccht::error const& e) {
      // Messages quote file and tensor names, which need not be UTF-8: escape those bytes.
      std::string_view const what = e.what();
      nb::object msg = nb::steal(PyUnicode_DecodeUTF8(
          what.data(), static_cast<Py_ssize_t>(what.size()), "backslashreplace"));
      nb::object inst = error_type(msg);
      inst.attr("code") = nb::str(ccht::to_string(e.code()));
      PyErr_SetObject(error_type.ptr(), inst.ptr());
    }
  });

  m.attr("has_cuda") = ccht::py::have_cuda;
  m.attr("chain_root") = ccht::chain_root;
  m.def("cuda_available", [] {
#if CCHT_WITH_CUDA
    return ccht::cuda_backend::available();
#else
    return false;
#endif
  }, "Whether this build has the CUDA backend and a usable GPU is present.");
  m.def("chain_keys", &chain_keys_py, "tokens"_a, "page_tokens"_a, "parent"_a = ccht::chain_root,
        nb::sig("def chain_keys(tokens: numpy.typing.ArrayLike, page_tokens: int, parent: int = chain_root) "
                "-> numpy.typing.NDArray[numpy.uint64]"),
        "The keys of the full pages of a token sequence (uint32 tokens; other integers in uint32 "
        "range are accepted, anything else raises), chained from `parent`: page i's "
        "key depends on every token up to the end of page i (ccht::chain_keys).");
  m.def("parse_bytes", [](std::string const& text, std::string const& flag) {
    return ccht::sim::parse_bytes(text, flag.c_str());
  }, "text"_a, "flag"_a = "size",
        "Bytes of a size such as '256MiB', '2M' or '4096' (as the ccht CLI reads them).");
  m.def("_weights_lines", [](std::vector<std::string> files, std::size_t budget,
                             std::size_t page_bytes, std::size_t invocations, double zipf,
                             std::uint64_t seed, std::string const& layout, int io_threads,
                             std::string const& huge, bool verify, bool digest) {
    ccht::sim::weights_options o;
    o.files = std::move(files);
    o.budget = budget;
    o.page_bytes = page_bytes;
    o.invocations = invocations;
    o.zipf = zipf;
    o.seed = seed;
    o.layout = layout == "packed" ? ccht::model_layout::packed : ccht::model_layout::per_tensor;
    o.io_threads = io_threads;
    o.huge = huge == "on"    ? ccht::huge_pages::on
             : huge == "off" ? ccht::huge_pages::off
                             : ccht::huge_pages::automatic;
    o.verify = verify;
    o.digest = digest;
    ccht::sim::weights_result r;
    {
      ccht::py::gil_released unlocked;
      r = ccht::sim::run_weights(o);
    }
    return std::make_pair(ccht::sim::weights_json_lines(o, r), r.verify_failures);
  }, "files"_a, "budget"_a, "page_bytes"_a, "invocations"_a, "zipf"_a, "seed"_a, "layout"_a,
        "io_threads"_a, "huge"_a, "verify"_a, "digest"_a,
        "The run of `ccht weights` (the same C++ code): its JSON lines and the count of tensors "
        "that differed from their files.");

  ccht::py::bind_table(m);
  ccht::py::bind_page_cache(m);
  ccht::py::bind_weight_cache(m);
}
