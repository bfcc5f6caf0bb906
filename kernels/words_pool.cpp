// The batch words' memory pool (words_pool.hpp).
#include "words_pool.hpp"

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ccht::detail {

cudaMemPool_t words_pool(int device) {
  struct cached {
    int device;
    cudaMemPool_t pool;
  };
  thread_local std::vector<cached> seen;
  for (cached const& c : seen) {
    if (c.device == device) { return c.pool; }
  }
  static std::mutex mutex;
  static std::unordered_map<int, cudaMemPool_t> pools;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = pools.find(device);
  if (it == pools.end()) {
    cudaMemPool_t pool = nullptr;
    int supported = 0;
    if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) ==
            cudaSuccess &&
        supported != 0) {
      cudaMemPoolProps props{};
      props.allocType = cudaMemAllocationTypePinned;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = device;
      if (cudaMemPoolCreate(&pool, &props) == cudaSuccess) {
        std::uint64_t threshold = UINT64_MAX;
        (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
      } else {
        pool = nullptr;
      }
    }
    (void)cudaGetLastError();  // a refused attribute or pool must not leak into later checks
    it = pools.emplace(device, pool).first;
  }
  seen.push_back({device, it->second});
  return it->second;
}

}  // namespace ccht::detail
