// Compile-time contract of ccht::table_ref's memory space (tests/compile_fail/CMakeLists.txt).
// Built as is, it must compile: a host-memory ref works from host code, and a device-memory ref's
// field accessors work anywhere. With CCHT_MISUSE defined, host code calls an operation of a
// device-memory ref (what a CUDA table's ref() returns), and the build must fail with the
// ref's static_assert message.
#include <ccht/table_ref.hpp>

int main() {
  ccht::table_ref<ccht::lru, ccht::default_bucket_size, ccht::device_memory> const device_ref;
  ccht::table_ref<ccht::lru> const host_ref;
  int n = static_cast<int>(device_ref.num_buckets() + device_ref.view().num_buckets);
  if (n > 0) { n += host_ref.contains(ccht::scalar_tile{}, 1) ? 1 : 0; }  // never runs: no storage
#ifdef CCHT_MISUSE
  n += device_ref.contains(ccht::scalar_tile{}, 1) ? 1 : 0;
#endif
  return n;
}
