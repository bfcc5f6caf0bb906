// Arguments from Python, checked before anything reaches the cache (issue 31): keys and tokens
// never converted with a loss, sizes, timeouts and paths rejected with an error that names them.
#include "common.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace ccht::py {
namespace {

/// A TypeError "what: expected ..., got ...".
[[noreturn]] void type_error(char const* what, std::string const& expected,
                             std::string const& got) {
  throw nb::type_error((std::string(what) + ": expected " + expected + ", got " + got).c_str());
}

/// NumPy's name of a DLPack dtype ("float64", "bool", ...), for error messages.
std::string dtype_name(nb::dlpack::dtype t) {
  using nb::dlpack::dtype_code;
  switch (static_cast<dtype_code>(t.code)) {
    case dtype_code::Int: return "int" + std::to_string(t.bits);
    case dtype_code::UInt: return "uint" + std::to_string(t.bits);
    case dtype_code::Float: return "float" + std::to_string(t.bits);
    case dtype_code::Bfloat: return "bfloat" + std::to_string(t.bits);
    case dtype_code::Complex: return "complex" + std::to_string(t.bits);
    case dtype_code::Bool: return "bool";
    default: return "DLPack dtype code " + std::to_string(t.code);
  }
}

template <class T>
char const* type_name() {
  return sizeof(T) == 8 ? "uint64" : "uint32";
}

/// "uint64 (or non-negative integers below 2**64)": what an argument of T takes.
template <class T>
std::string expected() {
  return std::string("a 1-D ") + type_name<T>() + " array, or integers in [0, 2**" +
         std::to_string(8 * sizeof(T)) + ")";
}

/// @p v as a host array owned by the result.
template <class T>
in_array<T> owned(std::vector<T>&& v) {
  auto* p = new std::vector<T>(std::move(v));
  nb::capsule owner(p, [](void* q) noexcept { delete static_cast<std::vector<T>*>(q); });
  return in_array<T>(p->data(), {p->size()}, owner, {}, nb::dtype<T>(), nb::device::cpu::value);
}

/// Element @p j of integer array @p a (host), widened: signed values as int64, unsigned as uint64.
struct wide {
  bool negative = false;
  std::uint64_t magnitude = 0;  ///< the value when not negative
  std::int64_t value = 0;       ///< the value when negative
};
wide element(nb::ndarray<nb::ro> const& a, std::size_t j) {
  std::int64_t const stride = a.stride_ptr() != nullptr ? a.stride(0) : 1;
  auto const step = stride * static_cast<std::ptrdiff_t>(a.itemsize());
  auto const* p = static_cast<unsigned char const*>(a.data()) +
                  static_cast<std::ptrdiff_t>(j) * step;
  bool const is_signed = a.dtype().code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int);
  auto read = [&]<class S, class U>(S, U) -> wide {
    if (is_signed) {
      S s;
      std::memcpy(&s, p, sizeof s);
      if (s < 0) { return {true, 0, s}; }
      return {false, static_cast<std::uint64_t>(s), 0};
    }
    U u;
    std::memcpy(&u, p, sizeof u);
    return {false, u, 0};
  };
  switch (a.dtype().bits) {
    case 8: return read(std::int8_t{}, std::uint8_t{});
    case 16: return read(std::int16_t{}, std::uint16_t{});
    case 32: return read(std::int32_t{}, std::uint32_t{});
    default: return read(std::int64_t{}, std::uint64_t{});
  }
}

/// An integer array of another dtype or layout, copied when every element fits T.
template <class T>
in_array<T> from_array(nb::ndarray<nb::ro> const& a, char const* what) {
  if (a.ndim() != 1) { type_error(what, expected<T>(), std::to_string(a.ndim()) + "-D array"); }
  using nb::dlpack::dtype_code;
  auto const code = static_cast<dtype_code>(a.dtype().code);
  bool const integer = (code == dtype_code::Int || code == dtype_code::UInt) &&
                       a.dtype().lanes == 1 &&
                       (a.dtype().bits == 8 || a.dtype().bits == 16 || a.dtype().bits == 32 ||
                        a.dtype().bits == 64);
  if (!integer) { type_error(what, expected<T>(), dtype_name(a.dtype()) + " array"); }
  if (a.device_type() != nb::device::cpu::value) {
    type_error(what, std::string("a C-contiguous ") + type_name<T>() + " array on a device",
               dtype_name(a.dtype()) + " or strided");
  }
  std::vector<T> out(a.shape(0));
  for (std::size_t j = 0; j < out.size(); ++j) {
    wide const w = element(a, j);
    if (w.negative || w.magnitude > std::numeric_limits<T>::max()) {
      std::string const v = w.negative ? std::to_string(w.value) : std::to_string(w.magnitude);
      throw nb::value_error((std::string(what) + ": element " + std::to_string(j) + " (" + v +
                             ") is out of range (" + expected<T>() + ")")
                                .c_str());
    }
    out[j] = static_cast<T>(w.magnitude);
  }
  return owned(std::move(out));
}

/// One Python integer in [0, max], or the error naming @p what and element @p j.
std::uint64_t py_uint(nb::handle item, std::uint64_t max, char const* what, std::string const& elem,
                      std::string const& want) {
  if (PyBool_Check(item.ptr()) || !PyIndex_Check(item.ptr())) {
    type_error(what, want, elem + " of type " + nb::type_name(item.type()).c_str());
  }
  nb::object i = nb::steal(PyNumber_Index(item.ptr()));
  if (!i.is_valid()) { nb::raise_python_error(); }
  unsigned long long const v = PyLong_AsUnsignedLongLong(i.ptr());
  if ((v == static_cast<unsigned long long>(-1) && PyErr_Occurred() != nullptr) || v > max) {
    PyErr_Clear();
    throw nb::value_error((std::string(what) + ": " + elem + " (" + nb::repr(i).c_str() +
                           ") is out of range (" + want + ")")
                              .c_str());
  }
  return v;
}

/// A sequence of Python integers, each in T's range.
template <class T>
in_array<T> from_sequence(nb::handle h, char const* what) {
  nb::sequence s = nb::borrow<nb::sequence>(h);
  std::vector<T> out(nb::len(s));
  for (std::size_t j = 0; j < out.size(); ++j) {
    out[j] = static_cast<T>(py_uint(s[j], std::numeric_limits<T>::max(), what,
                                    "element " + std::to_string(j), expected<T>()));
  }
  return owned(std::move(out));
}

}  // namespace

template <class T>
in_array<T> uint_array(nb::handle h, char const* what) {
  in_array<T> exact;
  if (nb::try_cast(h, exact, false)) { return exact; }  // in place: the fast path
  nb::ndarray<nb::ro> any;
  if (nb::try_cast(h, any, false)) { return from_array<T>(any, what); }
  if (PySequence_Check(h.ptr()) && !PyUnicode_Check(h.ptr())) { return from_sequence<T>(h, what); }
  type_error(what, expected<T>(), nb::type_name(h.type()).c_str());
}

template in_array<std::uint64_t> uint_array<std::uint64_t>(nb::handle, char const*);
template in_array<std::uint32_t> uint_array<std::uint32_t>(nb::handle, char const*);

std::vector<key_type> host_keys(nb::handle h, char const* what) {
  in_array<key_type> a = uint_array<key_type>(h, what);
  if (a.device_type() != nb::device::cpu::value) {
    throw nb::value_error((std::string(what) + ": must be a host (NumPy) array").c_str());
  }
  return {a.data(), a.data() + a.shape(0)};
}

std::uint64_t uint_arg(nb::handle h, char const* what, char const* name) {
  return py_uint(h, std::numeric_limits<std::uint64_t>::max(), what, name,
                 "an integer in [0, 2**64)");
}

std::optional<std::chrono::milliseconds> timeout_arg(double seconds, char const* what) {
  if (std::isnan(seconds) || seconds < 0) {
    throw nb::value_error((std::string(what) + ": timeout must be a number of seconds >= 0 "
                           "(inf: no limit), got " + std::to_string(seconds)).c_str());
  }
  if (seconds >= max_wait_seconds) { return std::nullopt; }
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000)));
}

fs_path path_arg(nb::handle h, char const* what) {
  nb::object p = nb::steal(PyOS_FSPath(h.ptr()));  // str, bytes or os.PathLike
  if (!p.is_valid()) { nb::raise_python_error(); }
  char const* data = nullptr;
  Py_ssize_t size = 0;
  nb::object bytes = p;
  if (PyUnicode_Check(p.ptr())) {
    bytes = nb::steal(PyUnicode_EncodeFSDefault(p.ptr()));
    if (!bytes.is_valid()) { nb::raise_python_error(); }
  }
  if (PyBytes_AsStringAndSize(bytes.ptr(), const_cast<char**>(&data), &size) != 0) {
    nb::raise_python_error();
  }
  std::string out(data, static_cast<std::size_t>(size));
  if (out.find('\0') != std::string::npos) {
    throw nb::value_error((std::string(what) + ": path " + nb::repr(p).c_str() +
                           " contains a NUL character")
                              .c_str());
  }
  return {std::move(out), std::move(p)};
}

}  // namespace ccht::py
