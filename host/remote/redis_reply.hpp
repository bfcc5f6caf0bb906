// Internal to ccht::remote (host/remote/) and its fuzz target (fuzz/): how the Redis tier reads
// replies (redis_reply.cpp) and maps a cluster's slots (redis_cluster.cpp). A reply may claim no more than its request can legitimately return (array
// elements, bulk bytes, line bytes): a server that claims more is a protocol error before hiredis
// allocates or waits for what it claims, and the connection is dropped.
#pragma once

#include <ccht/cache/redis_tier.hpp>

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ccht::detail {

/// Hash slots of a Redis Cluster.
inline constexpr std::size_t cluster_slots = 16384;

/// What the replies to one request may claim.
struct reply_bounds {
  std::size_t elements = 0;  ///< most elements of an array (at any depth)
  std::size_t bulk = 0;      ///< most bytes of a bulk string
  std::size_t line = std::size_t{64} << 10;  ///< most bytes of a status, error or number line
};

/// The bounds in force while a reply is read, and the first claim that broke them.
struct reply_check {
  reply_bounds bounds;
  std::string violation;  ///< empty while every claim was within the bounds
};

/// Makes @p reader hold every array and bulk string it builds to @p check (hiredis's own object
/// functions otherwise). @p check must outlive the reads; set it again before each read.
void bound_reader(redisReader* reader, reply_check* check);

/// Checks the item @p reader waits on (the start of its buffer not yet parsed): a bulk length
/// above the bounds, or a line longer than they allow. @return false with check.violation set
bool check_pending(redisReader const& reader, reply_check& check);

/// How read_reply() ended.
enum class read_outcome : std::uint8_t { reply, timeout, protocol, io };

/**
 * @brief One reply from the blocking context @p c, as redisGetReply() (pending output is sent
 *        first) but within @p check's bounds and, between reads, before @p deadline.
 * @return read_outcome::reply with the reply in @p reply; otherwise c->errstr says why
 */
read_outcome read_reply(redisContext* c, reply_check& check,
                        std::chrono::steady_clock::time_point deadline, void** reply);

/// What one GET reply (or one MGET element) holds.
enum class get_reply : std::uint8_t { value, nil, unexpected };

/// Classifies @p r; for a value, @p value is the stored bytes (header and payload).
get_reply classify_get(redisReply const* r, std::string_view& value) noexcept;

/// A Redis Cluster's slot map as CLUSTER SLOTS describes it.
struct slot_map {
  std::vector<redis_endpoint> servers;  ///< the masters named, in first-seen order
  std::vector<std::uint16_t> owner;     ///< per slot, its server's index (16384 slots)
};

/// Parses a CLUSTER SLOTS reply; nodes announced without a host get @p fallback_host. Malformed
/// ranges are skipped. @return servers empty when the reply names none
slot_map parse_cluster_slots(redisReply const* r, std::string const& fallback_host);

}  // namespace ccht::detail
