/**
 * @file redis_tier.hpp
 * @brief ccht::redis_tier: a ccht::remote_store on Redis (or Valkey) over hiredis, in the
 *        library ccht::remote (built where hiredis is found; link ccht::remote to use it).
 *
 * **Connection** (parse_redis_url):
 *  - `redis://[user[:password]@]host[:port][/db]` one server (port 6379, db 0 by default);
 *  - `unix:///path/to/socket[?db=N]` one server on a Unix socket (user and password may be
 *    given as `unix://user:password@/path`);
 *  - `redis://[user[:password]@]host1:port1,host2:port2,...` several servers: keys are sharded
 *    by Redis hash slot (CRC16 of the stored key mod 16384). When the first reachable server is
 *    a Redis Cluster node, the slot map comes from CLUSTER SLOTS and MOVED replies refresh it;
 *    otherwise the 16384 slots are split into equal ranges over the servers in the order given,
 *    so every client with the same list agrees.
 *  - `rediss://` (TLS) is refused with a clear error: Debian's hiredis 0.14 has no TLS.
 * The password comes from the URL or, when the URL has none, from the environment variable
 * named by redis_options::password_env. It is sent with AUTH and never printed: describe(),
 * errors and logs show the URL with the password as `***`.
 *
 * **Keys and values.** A ccht key k is stored under `prefix + 16 hex digits of k`; the value is a
 * remote_value_header then the payload. `ttl` sets an expiry on every value written.
 *
 * **Time and faults.** Each call has a budget (redis_options::timeout) for the whole batch; when
 * it runs out, or a server fails, the unanswered elements are misses, the connection is dropped
 * and the server is retried after an exponential backoff (backoff_min doubling to backoff_max);
 * while it backs off its keys are not sent (counted in `skipped`). Nothing throws after the
 * constructor, which throws only for a malformed URL, options out of range (a ttl above
 * redis_max_ttl, a timeout of 0) or a refused AUTH / SELECT / PING (a server that is down at start
 * is not an error: it is retried like any other failure).
 *
 * **Hostile servers.** A reply may claim no more than its request can return: an array longer
 * than the keys asked for, a bulk string longer than the largest value asked for, or an
 * unterminated line over 64 KiB is a protocol error (counted in `errors`, the connection dropped)
 * before anything of the claimed size is allocated or waited for; a reply still arriving when the
 * call's budget is spent is a timeout, however slowly its bytes trickle in.
 *
 * **Threads.** Calls from several threads are safe: foreground calls share one set of
 * connections under a mutex; the write-back thread of put_async() has its own.
 *
 * **Write-back queue.** put_async() of a key whose earlier value is still queued (not yet taken
 * by the writer) replaces that value in place: one write of the newest value, at the older
 * value's place in the queue, charged once against redis_options::queue_bytes. So get(),
 * exists() and put() look queued keys up by key (O(batch)), not by scanning the queue.
 */
#pragma once

#include <ccht/cache/remote_store.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ccht {

/// One server of a parsed URL.
struct redis_endpoint {
  std::string host;       ///< host name or address (empty for a Unix socket)
  int port = 6379;        ///< TCP port
  std::string socket;     ///< Unix socket path (empty for TCP)
};

/// A parsed `redis://` or `unix://` URL (see the file comment).
struct redis_url {
  std::vector<redis_endpoint> endpoints;  ///< one or more servers
  std::string user;        ///< ACL user (empty: the default user)
  std::string password;    ///< password (empty: none in the URL)
  int db = 0;              ///< database number (0 with several servers)
};

/**
 * @brief Parses @p url. @throws ccht::error invalid_argument naming what is wrong (the message
 *        never contains the password)
 */
redis_url parse_redis_url(std::string const& url);

/// @p url with any password replaced by `***` (for logs and errors).
std::string redact_redis_url(std::string const& url);

/// Redis Cluster hash slot of @p key (CRC16-XMODEM mod 16384, honouring `{hash tags}`).
std::uint16_t redis_hash_slot(std::string const& key) noexcept;

/// Longest redis_options::ttl: 10^15 s. Redis takes an expiry in milliseconds from now and refuses
/// one past 2^63 - 1 ms since 1970 ("invalid expire time"); 10^15 s is 10^18 ms, well inside.
inline constexpr std::chrono::seconds redis_max_ttl{1'000'000'000'000'000};

/// Options of a redis_tier.
struct redis_options {
  std::string url = "redis://127.0.0.1:6379";  ///< see the file comment
  std::string prefix = "ccht:";                ///< namespace of the stored keys
  std::chrono::seconds ttl{0};  ///< expiry of every value written (0: none; at most redis_max_ttl)
  std::chrono::milliseconds timeout{500};      ///< longest a call may wait on the servers
  std::chrono::milliseconds connect_timeout{200};  ///< longest one connection attempt waits
  std::chrono::milliseconds backoff_min{50};   ///< first wait before a failed server is retried
  std::chrono::milliseconds backoff_max{2000}; ///< longest wait between retries
  std::size_t pipeline = 128;       ///< commands sent before waiting for replies (1: one RTT each)
  std::size_t queue_bytes = std::size_t{64} << 20;  ///< write-back queue bound (payload bytes)
  /// Longest the write-back thread waits for `pipeline` values before it sends fewer (a fuller
  /// batch costs fewer round trips; flush() does not wait for it). 0: send at once.
  std::chrono::milliseconds write_linger{2};
  std::string password_env = "CCHT_REDIS_PASSWORD";  ///< password when the URL has none
};

/// A remote_store on one Redis server or several (see the file comment).
class redis_tier final : public remote_store {
 public:
  /// Connects (lazily retried when a server is down). @throws ccht::error, see the file comment
  explicit redis_tier(redis_options options);
  ~redis_tier() override;
  redis_tier(redis_tier const&) = delete;
  redis_tier& operator=(redis_tier const&) = delete;

  std::size_t get(std::span<key_type const> keys, std::span<std::byte* const> dst,
                  std::span<std::size_t const> sizes, std::span<bool> found) override;
  std::size_t put(std::span<key_type const> keys, std::span<std::byte const* const> src,
                  std::span<std::size_t const> sizes) override;
  std::size_t put_async(std::span<key_type const> keys, std::span<std::byte const* const> src,
                        std::span<std::size_t const> sizes) override;
  std::size_t exists(std::span<key_type const> keys, std::span<bool> found) override;
  bool flush(std::chrono::milliseconds timeout = std::chrono::seconds(10)) override;
  remote_stats stats() const override;
  std::string describe() const override;

  /// The stored key of @p key (prefix + 16 hex digits).
  std::string stored_key(key_type key) const;
  /// Whether the slot map came from a Redis Cluster (CLUSTER SLOTS).
  bool cluster_mode() const;
  /// The last error seen (redacted), empty when none.
  std::string last_error() const;
  /// Options in use.
  redis_options const& options() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace ccht
