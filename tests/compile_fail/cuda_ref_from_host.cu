// A CUDA table's ref() in nvcc: calling its operations in a kernel compiles; with CCHT_MISUSE
// defined, host code calls one, and the build must fail with the ref's static_assert message
// (tests/compile_fail/CMakeLists.txt). Never run.
#include <ccht/ccht.hpp>

using table_type = ccht::table<ccht::cuda_backend, ccht::lru>;

__global__ void probe(table_type::ref_type ref, bool* out) {
  ccht::value_type v = 0;
  *out = ref.find(ccht::scalar_tile{}, 1, v) || ref.contains(ccht::scalar_tile{}, 2);
}

int main() {
  table_type t(1024);
  bool* out = nullptr;
  probe<<<1, 1>>>(t.ref(), out);
#ifdef CCHT_MISUSE
  return t.ref().contains(ccht::scalar_tile{}, 1) ? 1 : 0;
#else
  return 0;
#endif
}
