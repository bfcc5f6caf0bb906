// Redis Cluster's sharding: the hash slot of a key (cache/redis_tier.hpp) and the slot map a
// CLUSTER SLOTS reply describes (redis_reply.hpp).
#include "redis_reply.hpp"

#include <ccht/cache/redis_tier.hpp>

#include <hiredis/hiredis.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace ccht {

using detail::cluster_slots;

std::uint16_t redis_hash_slot(std::string const& key) noexcept {
  std::string_view k = key;
  if (auto open = k.find('{'); open != std::string_view::npos) {
    auto const close = k.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) { k = k.substr(open + 1, close - open - 1); }
  }
  std::uint16_t crc = 0;  // CRC16-XMODEM, as Redis Cluster's keyHashSlot
  for (unsigned char c : k) {
    crc ^= static_cast<std::uint16_t>(c) << 8;
    for (int i = 0; i < 8; ++i) {
      crc = (crc & 0x8000u) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021u)
                            : static_cast<std::uint16_t>(crc << 1);
    }
  }
  return static_cast<std::uint16_t>(crc & (cluster_slots - 1));
}

namespace detail {

slot_map parse_cluster_slots(redisReply const* r, std::string const& fallback_host) {
  slot_map m;
  m.owner.assign(cluster_slots, 0);
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) { return m; }
  for (std::size_t i = 0; i < r->elements; ++i) {
    redisReply const* e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER ||
        e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2 ||
        e->element[2]->element[1]->type != REDIS_REPLY_INTEGER) {
      continue;
    }
    redisReply const* node = e->element[2];
    long long const port = node->element[1]->integer;
    long long const lo = e->element[0]->integer, hi = e->element[1]->integer;
    if (port < 1 || port > 65535 || lo < 0 || hi < lo) { continue; }
    redis_endpoint ep;
    if (node->element[0]->type == REDIS_REPLY_STRING) {
      ep.host.assign(node->element[0]->str, node->element[0]->len);
    }
    if (ep.host.empty() || ep.host == "?") { ep.host = fallback_host; }
    ep.port = int(port);
    std::size_t idx = m.servers.size();
    for (std::size_t k = 0; k < m.servers.size(); ++k) {
      if (m.servers[k].host == ep.host && m.servers[k].port == ep.port) { idx = k; }
    }
    if (idx == m.servers.size()) { m.servers.push_back(std::move(ep)); }
    for (auto sl = std::size_t(lo); sl <= std::size_t(hi) && sl < cluster_slots; ++sl) {
      m.owner[sl] = std::uint16_t(idx);
    }
  }
  return m;
}

}  // namespace detail
}  // namespace ccht
