// The weight cache on the CUDA backend (cuMemCreate pages, cuMemMap ranges, staged fills): a model
// loaded, its tensors copied back from the device and compared with the file. Skips without a GPU.
// Also makes the CUDA build compile weight_cache<cuda_backend> and model_loader<cuda_backend>.
#include <ccht/cache/model_loader.hpp>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

template class ccht::weight_cache<ccht::cuda_backend>;
template class ccht::model_loader<ccht::cuda_backend>;

namespace {

TEST(WeightCacheCuda, ModelReadBackFromTheDeviceEqualsTheFile) {
  if (!ccht::cuda_backend::available()) { GTEST_SKIP() << "no usable GPU"; }
  auto const dir = std::filesystem::temp_directory_path() / "ccht-weights-cuda";
  std::filesystem::create_directories(dir);
  std::string const path = (dir / "m.safetensors").string();
  std::mt19937_64 rng(3);
  std::vector<std::vector<std::byte>> data;
  std::vector<ccht::st_tensor_data> ts;
  for (int t = 0; t < 6; ++t) {
    std::uint64_t const n = 1000 + rng() % (3u << 20);
    data.emplace_back(n * 4);
    for (auto& b : data.back()) { b = static_cast<std::byte>(rng()); }
    ts.push_back({"t" + std::to_string(t), ccht::st_dtype::F32, {n}, data.back()});
  }
  ccht::write_safetensors(path, ts);
  std::size_t const page = std::size_t{2} << 20;
  ccht::weight_cache<ccht::cuda_backend> cache(32 * page, page);
  ccht::model_loader<ccht::cuda_backend> loader(cache);
  for (int round = 0; round < 2; ++round) {
    auto m = loader.load(path);
    EXPECT_EQ(m.report().warm(), round == 1);
    for (std::size_t t = 0; t < ts.size(); ++t) {
      auto const* mt = m.find(ts[t].name);
      ASSERT_NE(mt, nullptr);
      std::vector<std::byte> back(mt->bytes);
      ASSERT_EQ(cudaMemcpy(back.data(), mt->data, mt->bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(std::memcmp(back.data(), data[t].data(), mt->bytes), 0) << ts[t].name;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
