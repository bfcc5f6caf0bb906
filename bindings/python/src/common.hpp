// Shared pieces of the Python bindings: backend buffers, NumPy / DLPack outputs, and `hold`, the
// pins that a lease or a model shares with every view exported from it (docs/python.md).
#pragma once

#include <ccht/backend.hpp>
#include <ccht/core/types.hpp>
#include <ccht/error.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ccht::py {

namespace nb = nanobind;

/// 1-D C-contiguous input of any device (checked against the backend by the caller).
template <class T>
using in_array = nb::ndarray<T const, nb::ndim<1>, nb::c_contig>;

/**
 * @brief Unsigned integers (keys, values, tokens) from a Python argument, never converted with a
 *        loss: a 1-D C-contiguous T array (NumPy or any DLPack producer, any device) is used in
 *        place; a host array of another integer dtype or layout, or a sequence of Python ints, is
 *        copied if every element fits T (ValueError naming the first that does not); floats,
 *        bools, other shapes and anything else are a TypeError. @p what names the argument.
 */
template <class T>
in_array<T> uint_array(nb::handle h, char const* what);

/// uint_array<key_type>() copied to the host; ValueError for a device array.
std::vector<key_type> host_keys(nb::handle h, char const* what);

/// One Python int in [0, 2**64): ValueError out of range, TypeError for a non-integer. The
/// errors name it "<what>: <name>".
std::uint64_t uint_arg(nb::handle h, char const* what, char const* name);

/// Timeouts of at least this many seconds (about 32 years) wait without a limit.
inline constexpr double max_wait_seconds = 1e9;

/// A timeout in seconds as milliseconds; nullopt for no limit (inf, or >= max_wait_seconds).
/// ValueError for a negative or NaN timeout.
std::optional<std::chrono::milliseconds> timeout_arg(double seconds, char const* what);

/// A file path argument: its bytes for the file system, and os.fspath() of it.
struct fs_path {
  std::string bytes;  ///< what open() gets
  nb::object given;   ///< str or bytes, as given
};

/// A file path (str, bytes or os.PathLike); ValueError for a path with a NUL character (the C
/// library would stop reading it there and open another file).
fs_path path_arg(nb::handle h, char const* what);

/// PyEval_RestoreThread(), except that a thread CPython ends instead (a daemon thread at
/// interpreter shutdown) sleeps for good rather than unwinding: see gil_released.
void restore_thread(PyThreadState* state) noexcept;

/**
 * @brief Releases the GIL for its lifetime, like nb::gil_scoped_release, but takes it back in a
 *        way that survives interpreter shutdown.
 *
 * CPython (3.8-3.13) ends a daemon thread that asks for the GIL after finalisation began by
 * pthread_exit(), a forced unwind of the C++ stack. Through this destructor (noexcept) that was
 * std::terminate, "terminate called without an active exception"; nanobind's catch (...) could
 * not let it pass either. restore_thread() parks such a thread for good instead (as Python 3.14
 * does itself): the process is exiting. Hold no lock across the end of its scope.
 */
class gil_released {
 public:
  gil_released() noexcept : state_(PyEval_SaveThread()) {}
  gil_released(gil_released const&) = delete;
  gil_released& operator=(gil_released const&) = delete;
  ~gil_released() { restore_thread(state_); }

 private:
  PyThreadState* state_;
};

/// Whether the CUDA backend was compiled into this module.
#if CCHT_WITH_CUDA
inline constexpr bool have_cuda = true;
#else
inline constexpr bool have_cuda = false;
#endif

/// The backend named @p name ("cpu" or "cuda"); ValueError otherwise or when not compiled in.
bool parse_backend_is_cuda(std::string const& name);

/// Backend buffers freed at scope end, unless handed over to an output array.
template <class Backend>
class arena {
 public:
  arena() = default;
  arena(arena const&) = delete;
  arena& operator=(arena const&) = delete;
  ~arena() {
    for (void* p : owned_) { Backend::deallocate(p); }
  }
  /// @p n elements of T in backend memory (at least one element, so pointers are never null).
  template <class T>
  T* alloc(std::size_t n) {
    void* p = Backend::allocate(sizeof(T) * (n == 0 ? 1 : n));
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  /// Stops owning @p p (an output array owns it now).
  void hand_over(void const* p) {
    for (auto& q : owned_) {
      if (q == p) {
        q = owned_.back();
        owned_.pop_back();
        return;
      }
    }
  }

 private:
  std::vector<void*> owned_;
};

/// Where a backend's memory lives, as DLPack device types.
template <class Backend>
constexpr int dl_device_type() {
  return std::is_same_v<Backend, cpu_backend> ? nb::device::cpu::value : nb::device::cuda::value;
}

/// The CUDA device now current (0 on the CPU backend).
int current_device_id(bool cuda);

/// A capsule that frees backend memory @p p with Backend::deallocate.
template <class Backend>
nb::capsule backend_owner(void* p) {
  return nb::capsule(p, [](void* q) noexcept { Backend::deallocate(q); });
}

/// A NumPy array over host memory @p p (n elements), owning it through @p owner.
template <class T>
nb::object numpy_array(T* p, std::size_t n, nb::handle owner) {
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(p, {n}, owner).cast();
}

/// A NumPy copy of @p n host elements.
template <class T>
nb::object numpy_copy(T const* src, std::size_t n) {
  T* p = new T[n == 0 ? 1 : n];
  std::copy(src, src + n, p);
  nb::capsule owner(p, [](void* q) noexcept { delete[] static_cast<T*>(q); });
  return numpy_array(p, n, owner);
}

/**
 * @brief Pins shared by a lease (or a model) and every DLPack view exported from it. The last
 *        owner to let go runs the release: the object's pins are given back only when the lease
 *        is closed *and* no view of it is alive, so no view ever outlives its pin.
 *
 * Always destroyed with the GIL held (a Python object's or capsule's destructor, or close());
 * the release itself runs with the GIL released, and an error it raises becomes a
 * RuntimeWarning (a destructor cannot raise).
 */
class hold {
 public:
  explicit hold(std::function<void()> release) : release_(std::move(release)) {}
  hold(hold const&) = delete;
  hold& operator=(hold const&) = delete;
  ~hold();

 private:
  std::function<void()> release_;
};
using hold_ptr = std::shared_ptr<hold>;

/// A capsule owning a reference to @p h: the owner of a view.
nb::capsule hold_owner(hold_ptr h);

/// A DLPack-exportable array (nanobind's array-API object: __dlpack__, __dlpack_device__) over
/// @p data, kept valid by @p owner. Unless @p writable, it carries DLPack's read-only flag
/// (NumPy makes it a non-writeable array; the buffer protocol refuses writable buffers).
nb::object dlpack_view(void* data, std::vector<std::size_t> const& shape, nb::dlpack::dtype dtype,
                       int device_type, int device_id, nb::handle owner, bool writable);

/// Raises the Python exception for @p e (used inside destructors, as a warning).
void warn(char const* what);

}  // namespace ccht::py
