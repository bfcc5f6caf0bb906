// libFuzzer target: how the Redis tier reads replies (host/remote/redis_reply.hpp). The bytes go
// to a hiredis reader configured as the tier configures its connections (bound_reader), fed in
// chunks with the tier's check of the item it waits on (check_pending) between them, as
// read_reply() does between socket reads; every reply then goes through the tier's reply
// handling: GET / MGET classification, the value header check, the CLUSTER SLOTS map.
// Input: a 16-byte prefix (bounds, chunk size, expected key and size), then the server's bytes.
#include "redis_reply.hpp"

#include <ccht/cache/remote_store.hpp>

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

using namespace ccht::detail;

constexpr std::size_t prefix = 16;

void require(bool ok) {
  if (!ok) { std::abort(); }
}

/// Every reply handed out must be within the bounds the reader was given.
void check_bounds(redisReply const* r, reply_bounds const& b) {
  if (r->type == REDIS_REPLY_ARRAY) {
    require(r->elements <= b.elements);
    for (std::size_t i = 0; i < r->elements; ++i) { check_bounds(r->element[i], b); }
  } else if (r->type == REDIS_REPLY_STRING) {
    require(r->len <= b.bulk);
  } else if (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR) {
    require(r->len <= b.line);
  }
}

void take_value(redisReply const* r, ccht::key_type key, std::size_t expected) {
  std::string_view value;
  if (classify_get(r, value) != get_reply::value) { return; }
  auto const verdict = ccht::check_remote_value(value.data(), value.size(), key, expected);
  if (verdict == ccht::remote_value_check::ok) {
    require(value.size() == sizeof(ccht::remote_value_header) + expected);
  }
}

void handle(redisReply const* r, reply_bounds const& b, ccht::key_type key, std::size_t expected,
            bool slots) {
  check_bounds(r, b);
  take_value(r, key, expected);  // GET
  if (r->type == REDIS_REPLY_ARRAY) {  // MGET
    for (std::size_t i = 0; i < r->elements; ++i) { take_value(r->element[i], key, expected); }
  }
  if (!slots) { return; }  // each map is 16384 slots: the first few replies only
  slot_map const m = parse_cluster_slots(r, "fallback");
  require(m.owner.size() == 16384);
  for (auto o : m.owner) { require(o < std::max<std::size_t>(1, m.servers.size())); }
  for (auto const& s : m.servers) { require(!s.host.empty() && s.port >= 1 && s.port <= 65535); }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size < prefix) { return 0; }
  reply_check check;
  check.bounds.elements = data[0];
  check.bounds.bulk = std::size_t(data[1]) | std::size_t(data[2]) << 8;
  check.bounds.line = 64 + (std::size_t(data[3]) << 4);  // the tier's 64 KiB, scaled to the input
  std::size_t const chunk = data[4] == 0 ? size : data[4];
  ccht::key_type key = 0;
  std::memcpy(&key, data + 5, sizeof key);
  std::size_t const expected = std::size_t(data[13]) | std::size_t(data[14]) << 8;
  redisReader* reader = redisReaderCreate();
  if (reader == nullptr) { return 0; }
  bound_reader(reader, &check);
  std::size_t replies = 0;
  for (std::size_t at = prefix;;) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader, &reply) != REDIS_OK) { break; }  // a protocol error: dropped
    if (reply != nullptr) {
      handle(static_cast<redisReply const*>(reply), check.bounds, key, expected, ++replies <= 8);
      freeReplyObject(reply);
      continue;
    }
    if (!check_pending(*reader, check) || at >= size) { break; }
    std::size_t const n = std::min(chunk, size - at);
    if (redisReaderFeed(reader, reinterpret_cast<char const*>(data + at), n) != REDIS_OK) { break; }
    at += n;
  }
  redisReaderFree(reader);
  return 0;
}
