/**
 * @file kv_keys.hpp
 * @brief ccht::chain_keys: the keys of a token sequence's KV pages, one per full page, each
 *        derived from its parent page's key and its own tokens (the prefix-block rule of vLLM's
 *        automatic prefix caching). Part of the cache layer; needs no backend.
 *
 * Page i's key is a hash of page i-1's key (the @p parent for page 0) and the tokens of page i.
 * So two sequences share page i's key exactly when they share all tokens up to the end of page i
 * (up to 64-bit hash collisions), and a prefix cache looks a request's pages up in order and
 * stops at the first miss. A trailing partial page has no key: its KV is not final until the
 * page fills. Keys are never ccht's reserved values (ccht::is_reserved_key), so they can be
 * used as table keys directly.
 */
#pragma once

#include <ccht/core/hash.hpp>
#include <ccht/core/types.hpp>
#include <ccht/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ccht {

/// Token id of a KV sequence.
using token_type = std::uint32_t;

/// Parent key of a sequence's first page (a sequence that continues no other).
inline constexpr key_type chain_root = 0x6b765f726f6f7421ull;  // "kv_root!"

/**
 * @brief Key of one page: the hash of @p parent and the page's @p tokens.
 *
 * Each token is folded in with its position, so pages that hold the same tokens in another order
 * get different keys. The result is mapped below ccht::claimed_key.
 */
inline key_type chain_key(key_type parent, std::span<token_type const> tokens) noexcept {
  std::uint64_t h = hash64(parent ^ (std::uint64_t{tokens.size()} << 32), 0x243f6a8885a308d3ull);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    h = hash64(h ^ (std::uint64_t{tokens[i]} | (std::uint64_t{i} << 32)), 0x13198a2e03707344ull);
  }
  return is_reserved_key(h) ? h - 2 : h;  // the two largest values are reserved
}

/**
 * @brief The keys of @p tokens' full pages of @p page_tokens tokens each, in order, chained from
 *        @p parent (ccht::chain_root for a fresh sequence; the last key of the sequence it
 *        continues otherwise).
 *
 * chain_keys(a ++ b) == chain_keys(a) ++ chain_keys(b, page_tokens, chain_keys(a).back()) when
 * a's length is a multiple of @p page_tokens.
 * @throws ccht::error invalid_size when @p page_tokens is 0
 */
inline std::vector<key_type> chain_keys(std::span<token_type const> tokens,
                                        std::size_t page_tokens, key_type parent = chain_root) {
  if (page_tokens == 0) {
    throw error(error_code::invalid_size, "chain_keys: page_tokens is 0 (tokens per page)");
  }
  std::vector<key_type> keys(tokens.size() / page_tokens);
  for (std::size_t p = 0; p < keys.size(); ++p) {
    parent = chain_key(parent, tokens.subspan(p * page_tokens, page_tokens));
    keys[p] = parent;
  }
  return keys;
}

}  // namespace ccht
