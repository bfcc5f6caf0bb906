// ccht::chain_keys (cache/kv_keys.hpp): the prefix-block rule, checked by its properties on
// random token sequences.
#include <ccht/cache/kv_keys.hpp>

#include <gtest/gtest.h>

#include <random>
#include <unordered_set>
#include <vector>

namespace {

using ccht::chain_keys;
using ccht::key_type;
using ccht::token_type;

std::vector<token_type> random_tokens(std::size_t n, std::mt19937_64& rng) {
  std::vector<token_type> t(n);
  for (auto& x : t) { x = static_cast<token_type>(rng() % 50000); }
  return t;
}

TEST(ChainKeys, OneKeyPerFullPageAndPartialPagesHaveNone) {
  std::mt19937_64 rng(1);
  auto const t = random_tokens(100, rng);
  EXPECT_EQ(chain_keys(t, 16).size(), 6u);
  EXPECT_EQ(chain_keys(t, 100).size(), 1u);
  EXPECT_EQ(chain_keys(t, 101).size(), 0u);
  EXPECT_TRUE(chain_keys({}, 16).empty());
  // The partial tail does not change the full pages' keys.
  EXPECT_EQ(chain_keys(std::span(t).first(96), 16), chain_keys(t, 16));
}

TEST(ChainKeys, SharedPrefixSharesKeysUpToTheFirstDifferingPage) {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 200; ++trial) {
    std::size_t const page = 1 + rng() % 32;
    auto a = random_tokens(page * (1 + rng() % 12), rng);
    auto b = a;
    std::size_t const at = rng() % a.size();
    b[at] ^= 1 + static_cast<token_type>(rng() % 1000);  // one token differs
    auto const ka = chain_keys(a, page), kb = chain_keys(b, page);
    ASSERT_EQ(ka.size(), kb.size());
    for (std::size_t p = 0; p < ka.size(); ++p) {
      if (p < at / page) {
        EXPECT_EQ(ka[p], kb[p]) << "page " << p << " precedes the difference";
      } else {
        EXPECT_NE(ka[p], kb[p]) << "page " << p << " is at or after the difference at " << at;
      }
    }
  }
}

TEST(ChainKeys, ContinuingFromTheLastKeyEqualsOneLongSequence) {
  std::mt19937_64 rng(3);
  auto const a = random_tokens(64, rng), b = random_tokens(40, rng);
  std::vector<token_type> ab(a);
  ab.insert(ab.end(), b.begin(), b.end());
  auto const ka = chain_keys(a, 8);
  auto joined = ka;
  auto const kb = chain_keys(b, 8, ka.back());
  joined.insert(joined.end(), kb.begin(), kb.end());
  EXPECT_EQ(chain_keys(ab, 8), joined);
  // Another parent gives other keys for the same tokens.
  EXPECT_NE(chain_keys(b, 8), kb);
}

TEST(ChainKeys, OrderMattersAndKeysAreDistinctAndNeverReserved) {
  std::vector<token_type> const x{1, 2, 3, 4}, y{2, 1, 3, 4};
  EXPECT_NE(chain_keys(x, 4), chain_keys(y, 4));
  std::mt19937_64 rng(4);
  std::unordered_set<key_type> seen;
  std::size_t pages = 0;
  for (int s = 0; s < 2000; ++s) {
    auto const t = random_tokens(16 * 64, rng);
    for (key_type k : chain_keys(t, 16)) {
      ASSERT_FALSE(ccht::is_reserved_key(k));
      EXPECT_TRUE(seen.insert(k).second) << "two different prefixes share key " << k;
      ++pages;
    }
  }
  EXPECT_EQ(pages, 2000u * 64u);
}

TEST(ChainKeys, ZeroTokensPerPageIsAnError) {
  std::vector<token_type> const t{1, 2, 3};
  try {
    chain_keys(t, 0);
    ADD_FAILURE() << "no error";
  } catch (ccht::error const& e) {
    EXPECT_EQ(e.code(), ccht::error_code::invalid_size);
  }
}

}  // namespace
