// Minimal consumer of the installed ccht package: cache a few "model weight" block ids, look
// them up, and show that overflow evicts (and reports) instead of failing.
#include <ccht/ccht.hpp>

#include <cstdio>
#include <memory>
#include <vector>

int main() {
  ccht::table<ccht::cpu_backend> cache(64);  // 4 buckets of 16 slots
  std::vector<ccht::key_type> keys;
  std::vector<ccht::value_type> blocks;
  for (ccht::key_type k = 1; k <= 100; ++k) {
    keys.push_back(k);
    blocks.push_back(1000 + k);  // the block id holding key k's data
  }
  std::vector<ccht::key_type> evicted_keys(keys.size());
  std::vector<ccht::value_type> evicted_blocks(keys.size());
  std::size_t const evicted = cache.insert_or_assign(keys, blocks, evicted_keys, evicted_blocks);

  std::vector<ccht::value_type> found_blocks(keys.size());
  std::unique_ptr<bool[]> found(new bool[keys.size()]);
  cache.find(keys, found_blocks, {found.get(), keys.size()});
  std::size_t hits = 0, wrong = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (found[i]) {
      ++hits;
      wrong += found_blocks[i] != blocks[i];
    }
  }
  std::printf("inserted %zu, evicted %zu, resident %zu, hits %zu, wrong %zu\n", keys.size(),
              evicted, cache.size(), hits, wrong);
  return (wrong == 0 && hits == cache.size() && hits + evicted == keys.size()) ? 0 : 1;
}
