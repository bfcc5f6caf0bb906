// ccht::redis_tier (cache/redis_tier.hpp) over hiredis's blocking API: connections and backoff,
// pipelined batches under one time budget, and the write-back thread. URLs are parsed in
// redis_url.cpp, replies read in redis_reply.cpp, keys sharded in redis_cluster.cpp.
#include "redis_reply.hpp"

#include <ccht/cache/redis_tier.hpp>
#include <ccht/error.hpp>

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <numeric>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace ccht {
namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr std::size_t num_slots = detail::cluster_slots;

timeval to_timeval(milliseconds ms) {
  if (ms.count() < 1) { ms = milliseconds(1); }
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string where(redis_endpoint const& e) {
  return e.socket.empty() ? e.host + ":" + std::to_string(e.port) : "unix:" + e.socket;
}

/// 0, 1, ..., n - 1: the elements of a batch still to be sent.
std::vector<std::size_t> every_index(std::size_t n) {
  std::vector<std::size_t> v(n);
  std::iota(v.begin(), v.end(), std::size_t{0});
  return v;
}

struct reply_ptr {
  redisReply* r = nullptr;
  ~reply_ptr() { if (r != nullptr) { freeReplyObject(r); } }
};

/// One server and its connection.
struct server {
  redis_endpoint ep;
  redisContext* ctx = nullptr;
  clock_type::time_point retry_at{};
  milliseconds backoff{0};
  void drop() {
    if (ctx != nullptr) { redisFree(ctx); }
    ctx = nullptr;
  }
};

/// The connections of one thread role (foreground calls or the writer) and the slot map.
struct conn_set {
  std::vector<server> servers;
  std::vector<std::uint16_t> owner = std::vector<std::uint16_t>(num_slots, 0);
  bool mapped = false;   // owner is final (static split, or a cluster map)
  bool cluster = false;
  ~conn_set() { for (auto& s : servers) { s.drop(); } }
};

/// One queued write-back value: the stored key and header + payload.
struct queued_value {
  std::string key;
  std::string value;
  std::size_t payload = 0;
};

}  // namespace

// ---- the tier -----------------------------------------------------------------------------------

struct redis_tier::impl {
  redis_options opt;
  redis_url url;
  std::string shown;  // redacted URL

  std::mutex fg_mu;
  conn_set fg;

  std::mutex q_mu;
  std::condition_variable q_cv, idle_cv;
  std::deque<queued_value> queue;
  // Each queued key's one entry: put_async() coalesces a key already queued into its entry, so
  // that pending() and supersede() find it in O(1) instead of scanning the queue. The views point
  // into the entries' keys, which a deque keeps in place until they are popped.
  std::unordered_map<std::string_view, queued_value*> queued_at;
  // The writer's batch while busy: only it writes these, under q_mu; others read them under q_mu.
  std::vector<std::string> sending_keys, sending_values;
  std::size_t queue_bytes = 0;
  bool busy = false, stopping = false;
  std::uint64_t batches_taken = 0, batches_done = 0;  // the writer's batches, for supersede()
  int flushing = 0;  // flush() callers waiting: the writer does not linger for them
  conn_set bg;  // the writer thread's only
  std::thread writer;

  mutable std::mutex err_mu;
  std::string last_error;

  std::atomic<std::uint64_t> gets{0}, hits{0}, misses{0}, hit_bytes{0}, puts{0}, put_bytes{0},
      exists_checks{0}, integrity{0}, errors{0}, timeouts{0}, connects{0}, skipped{0}, queued{0},
      dropped{0}, round_trips{0}, nanos{0};

  void note_error(std::string const& what) {
    errors.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(err_mu);
    last_error = what;
  }

  void init_set(conn_set& cs) const {
    cs.servers.clear();
    for (auto const& e : url.endpoints) { cs.servers.push_back(server{e}); }
    std::size_t const n = cs.servers.size();
    for (std::size_t s = 0; s < num_slots; ++s) {
      cs.owner[s] = static_cast<std::uint16_t>(s * n / num_slots);
    }
    cs.mapped = false;  // learn_map: CLUSTER SLOTS, or this static split
    cs.cluster = false;
  }

  void fail(server& s) {
    s.drop();
    s.backoff = s.backoff.count() == 0 ? opt.backoff_min : std::min(opt.backoff_max, s.backoff * 2);
    s.retry_at = clock_type::now() + s.backoff;
  }

  /// One command and its reply within @p bounds (null on an error: s.ctx->errstr says which).
  redisReply* command(server& s, std::vector<std::string> const& args,
                      detail::reply_bounds bounds = {}) {
    std::vector<char const*> argv;
    std::vector<std::size_t> lens;
    for (auto const& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    round_trips.fetch_add(1, std::memory_order_relaxed);
    if (redisAppendCommandArgv(s.ctx, int(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      return nullptr;
    }
    detail::reply_check check{bounds, {}};
    void* r = nullptr;
    detail::read_reply(s.ctx, check, clock_type::now() + opt.timeout, &r);
    return static_cast<redisReply*>(r);
  }

  /// Connects @p s. @p strict: a refused AUTH / SELECT throws (construction) instead of backing off.
  bool connect(server& s, bool strict) {
    if (s.ctx != nullptr) { return true; }
    if (clock_type::now() < s.retry_at) { return false; }
    timeval const tv = to_timeval(opt.connect_timeout);
    redisContext* c = s.ep.socket.empty() ? redisConnectWithTimeout(s.ep.host.c_str(), s.ep.port, tv)
                                          : redisConnectUnixWithTimeout(s.ep.socket.c_str(), tv);
    if (c == nullptr || c->err != 0) {
      note_error("connect to " + where(s.ep) + ": " + (c ? c->errstr : "out of memory"));
      if (c != nullptr) { redisFree(c); }
      fail(s);
      return false;
    }
    redisSetTimeout(c, to_timeval(opt.timeout));
    s.ctx = c;
    auto refuse = [&](std::string const& what, redisReply* r) {
      std::string msg = what + " " + where(s.ep) + " refused";
      if (r != nullptr && r->type == REDIS_REPLY_ERROR) {
        msg += ": " + std::string(r->str, r->len);  // the server's words; they never echo a password
      } else if (r == nullptr) {
        msg += std::string(": ") + c->errstr;
      }
      msg += " (" + shown + ")";
      if (r != nullptr) { freeReplyObject(r); }
      fail(s);
      if (strict) { throw error(error_code::invalid_argument, "redis_tier: " + msg); }
      note_error(msg);
      return false;
    };
    std::string password = url.password;
    if (password.empty() && !opt.password_env.empty()) {
      if (char const* e = std::getenv(opt.password_env.c_str()); e != nullptr) { password = e; }
    }
    if (!password.empty()) {
      std::vector<std::string> args{"AUTH"};
      if (!url.user.empty()) { args.push_back(url.user); }
      args.push_back(password);
      redisReply* r = command(s, args);
      if (r == nullptr || r->type == REDIS_REPLY_ERROR) { return refuse("AUTH to", r); }
      freeReplyObject(r);
    }
    if (url.db != 0) {
      redisReply* r = command(s, {"SELECT", std::to_string(url.db)});
      if (r == nullptr || r->type == REDIS_REPLY_ERROR) { return refuse("SELECT on", r); }
      freeReplyObject(r);
    }
    {  // a server that needs a password we lack says NOAUTH here, clearly, not on every GET
      redisReply* r = command(s, {"PING"});
      if (r == nullptr || r->type == REDIS_REPLY_ERROR) { return refuse("PING to", r); }
      freeReplyObject(r);
    }
    s.backoff = milliseconds(0);
    connects.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  /// Learns the slot map: CLUSTER SLOTS from the first server that answers. @return success
  bool learn_map(conn_set& cs, bool strict) {
    for (auto& s : cs.servers) {
      if (!connect(s, strict)) { continue; }
      // At most one range per slot; host names and node ids are short.
      reply_ptr r{command(s, {"CLUSTER", "SLOTS"}, {num_slots, std::size_t{64} << 10})};
      if (r.r == nullptr) {
        note_error("CLUSTER SLOTS on " + where(s.ep) + ": " + s.ctx->errstr);
        fail(s);
        continue;
      }
      if (r.r->type == REDIS_REPLY_ERROR) {  // not a cluster node: keep the static split
        cs.mapped = true;
        cs.cluster = false;
        return true;
      }
      if (r.r->type != REDIS_REPLY_ARRAY) { continue; }
      auto [endpoints, owner] = detail::parse_cluster_slots(r.r, s.ep.host);
      std::vector<server> next;
      for (auto& ep : endpoints) { next.push_back(server{std::move(ep)}); }
      if (next.empty()) { continue; }
      // Keep open connections to servers that stay.
      for (auto& n : next) {
        for (auto& old : cs.servers) {
          if (old.ctx != nullptr && old.ep.host == n.ep.host && old.ep.port == n.ep.port) {
            n.ctx = std::exchange(old.ctx, nullptr);
          }
        }
      }
      for (auto& old : cs.servers) { old.drop(); }
      cs.servers = std::move(next);
      cs.owner = std::move(owner);
      cs.mapped = true;
      cs.cluster = true;
      return true;
    }
    return false;
  }

  /**
   * Runs the elements of @p todo on the servers owning their keys, pipelined, within @p deadline.
   * A command carries up to @p per_cmd elements (MGET / MSET; 1 on a Redis Cluster, whose
   * multi-key commands must stay in one slot). make(idx, argv, lens) builds the command of the
   * elements idx; on_reply(idx, reply) takes its reply. Elements that got no reply are misses.
   * A reply claiming more than @p bounds is a protocol error: the connection is dropped.
   */
  template <class Make, class OnReply>
  void run(conn_set& cs, std::vector<std::string> const& skeys, std::vector<std::size_t> todo,
           clock_type::time_point deadline, std::size_t per_cmd, detail::reply_bounds bounds,
           Make&& make, OnReply&& on_reply) {
    auto const t0 = clock_type::now();
    std::vector<char const*> argv;
    std::vector<std::size_t> lens;
    for (int attempt = 0; attempt < 2 && !todo.empty(); ++attempt) {
      if (!cs.mapped) { learn_map(cs, false); }
      std::size_t const group = cs.cluster ? 1 : std::max<std::size_t>(1, per_cmd);
      std::vector<std::vector<std::size_t>> by_server(cs.servers.size());
      if (cs.servers.size() == 1 && !cs.cluster) {
        by_server[0] = todo;  // one plain server owns every slot: no need to hash
      } else {
        for (std::size_t i : todo) { by_server[cs.owner[redis_hash_slot(skeys[i])]].push_back(i); }
      }
      std::vector<std::size_t> moved;
      for (std::size_t sv = 0; sv < by_server.size(); ++sv) {
        auto const& items = by_server[sv];
        if (items.empty()) { continue; }
        server& s = cs.servers[sv];
        if (!connect(s, false)) {
          skipped.fetch_add(items.size(), std::memory_order_relaxed);
          continue;
        }
        // Elements sent before waiting: `pipeline` single-key commands, or eight multi-key ones
        // (so a huge batch does not build one huge output buffer).
        std::size_t const depth = group > 1 ? group * 8 : std::max<std::size_t>(1, opt.pipeline);
        for (std::size_t b = 0; b < items.size() && s.ctx != nullptr; b += depth) {
          auto const left = std::chrono::duration_cast<milliseconds>(deadline - clock_type::now());
          if (left.count() <= 0) {
            timeouts.fetch_add(1, std::memory_order_relaxed);
            note_error("time budget of " + std::to_string(opt.timeout.count()) +
                       " ms spent before every key was sent to " + where(s.ep));
            break;
          }
          redisSetTimeout(s.ctx, to_timeval(left));
          std::size_t const e = std::min(items.size(), b + depth);
          for (std::size_t k = b; k < e; k += group) {
            argv.clear();
            lens.clear();
            make(std::span(items).subspan(k, std::min(group, e - k)), argv, lens);
            redisAppendCommandArgv(s.ctx, int(argv.size()), argv.data(), lens.data());
          }
          round_trips.fetch_add(1, std::memory_order_relaxed);
          for (std::size_t k = b; k < e; k += group) {
            auto const idx = std::span(items).subspan(k, std::min(group, e - k));
            void* raw = nullptr;
            detail::reply_check check{bounds, {}};
            auto const got = detail::read_reply(s.ctx, check, deadline, &raw);
            if (got != detail::read_outcome::reply) {
              if (got == detail::read_outcome::timeout) {
                timeouts.fetch_add(1, std::memory_order_relaxed);
              }
              char const* what = got == detail::read_outcome::timeout    ? "timeout"
                                 : got == detail::read_outcome::protocol ? "bad reply"
                                                                         : "connection error";
              note_error(std::string(what) + " on " + where(s.ep) + ": " + s.ctx->errstr);
              fail(s);  // replies may still be in flight: the connection cannot be reused
              break;
            }
            reply_ptr r{static_cast<redisReply*>(raw)};
            if (r.r->type == REDIS_REPLY_ERROR &&
                (std::strncmp(r.r->str, "MOVED", 5) == 0 || std::strncmp(r.r->str, "ASK", 3) == 0)) {
              moved.insert(moved.end(), idx.begin(), idx.end());
              continue;
            }
            on_reply(idx, r.r);
          }
        }
      }
      todo = std::move(moved);
      if (!todo.empty()) { cs.mapped = false; }  // the cluster changed: learn it again, retry once
    }
    nanos.fetch_add(std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      clock_type::now() - t0).count()),
                    std::memory_order_relaxed);
  }

  std::string stored_key(key_type k) const {
    static constexpr char hex[] = "0123456789abcdef";
    std::string s = opt.prefix;
    for (int sh = 60; sh >= 0; sh -= 4) { s.push_back(hex[(k >> sh) & 0xf]); }
    return s;
  }

  std::vector<std::string> stored_keys(std::span<key_type const> keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (key_type k : keys) { out.push_back(stored_key(k)); }
    return out;
  }

  static std::string encode(key_type k, std::byte const* src, std::size_t n) {
    remote_value_header const h = make_remote_header(k, src, n);
    std::string v(sizeof h + n, '\0');
    std::memcpy(v.data(), &h, sizeof h);
    if (n != 0) { std::memcpy(v.data() + sizeof h, src, n); }
    return v;
  }

  /// SET of prepared values on @p cs; @return how many the servers acknowledged.
  std::size_t set_values(conn_set& cs, std::vector<std::string> const& skeys,
                         std::vector<std::string> const& values,
                         std::vector<std::size_t> const& payload) {
    std::vector<std::size_t> todo = every_index(skeys.size());
    std::string const px = std::to_string(opt.ttl.count() * 1000);
    std::size_t stored = 0;
    // Without a TTL, MSET stores up to `pipeline` values per command; SET ... PX is one each.
    bool const multi = opt.ttl.count() == 0 && opt.pipeline > 1;
    auto count = [&](std::size_t i) {
      ++stored;
      puts.fetch_add(1, std::memory_order_relaxed);
      put_bytes.fetch_add(payload[i], std::memory_order_relaxed);
    };
    run(cs, skeys, todo, clock_type::now() + opt.timeout, multi ? opt.pipeline : 1,
        detail::reply_bounds{},  // +OK or an error line
        [&](std::span<std::size_t const> idx, std::vector<char const*>& argv,
            std::vector<std::size_t>& lens) {
          if (idx.size() > 1) {
            argv.push_back("MSET");
            lens.push_back(4);
            for (std::size_t i : idx) {
              argv.push_back(skeys[i].data());
              lens.push_back(skeys[i].size());
              argv.push_back(values[i].data());
              lens.push_back(values[i].size());
            }
            return;
          }
          std::size_t const i = idx[0];
          argv = {"SET", skeys[i].data(), values[i].data()};
          lens = {3, skeys[i].size(), values[i].size()};
          if (opt.ttl.count() > 0) {
            argv.push_back("PX");
            lens.push_back(2);
            argv.push_back(px.data());
            lens.push_back(px.size());
          }
        },
        [&](std::span<std::size_t const> idx, redisReply* r) {
          if (r->type == REDIS_REPLY_STATUS) {
            for (std::size_t i : idx) { count(i); }
          } else {
            note_error(std::string(idx.size() > 1 ? "MSET" : "SET") + " refused: " +
                       std::string(r->type == REDIS_REPLY_ERROR ? r->str : "?"));
          }
        });
    return stored;
  }

  /// Read-your-writes: for each of @p skeys not yet stored by the writer (queued or in its
  /// batch), the newest value written for it, else null. Call with q_mu held.
  std::vector<std::string const*> pending(std::vector<std::string> const& skeys) const {
    std::vector<std::string const*> out(skeys.size(), nullptr);
    if (queue.empty() && sending_keys.empty()) { return out; }
    if (!sending_keys.empty()) {  // at most 4 x pipeline values, older than any queued one
      std::unordered_map<std::string_view, std::string const*> sent;  // the last of a key
      for (std::size_t j = 0; j < sending_keys.size(); ++j) { sent[sending_keys[j]] = &sending_values[j]; }
      for (std::size_t i = 0; i < skeys.size(); ++i) {
        if (auto const it = sent.find(skeys[i]); it != sent.end()) { out[i] = it->second; }
      }
    }
    for (std::size_t i = 0; i < skeys.size(); ++i) {
      if (auto const it = queued_at.find(skeys[i]); it != queued_at.end()) { out[i] = &it->second->value; }
    }
    return out;
  }

  /// Calls @p serve(i, value) for each key of @p skeys with a pending value (under q_mu).
  /// @return the indices of the others, which the servers must answer
  template <class Serve>
  std::vector<std::size_t> serve_pending(std::vector<std::string> const& skeys, Serve&& serve) {
    std::vector<std::size_t> todo;
    std::lock_guard q(q_mu);
    auto const queued = pending(skeys);
    for (std::size_t i = 0; i < skeys.size(); ++i) {
      if (queued[i] == nullptr) {
        todo.push_back(i);
      } else {
        serve(i, *queued[i]);
      }
    }
    return todo;
  }

  /**
   * A synchronous put() overtakes the write-back of the same keys, so that the newest write wins
   * on the server too: queued values of those keys take the new value (their later write stores
   * it again, not an older one), and a batch in flight that holds one of them is waited for, so
   * that its older value reaches the server before the put's.
   */
  void supersede(std::vector<std::string> const& skeys, std::vector<std::string> const& values,
                 std::vector<std::size_t> const& payload) {
    std::unique_lock lock(q_mu);
    if (queue.empty() && sending_keys.empty()) { return; }
    for (std::size_t i = 0; i < skeys.size(); ++i) {  // in order: the last of a key asked twice wins
      auto const it = queued_at.find(skeys[i]);
      if (it == queued_at.end()) { continue; }
      queued_value& q = *it->second;
      queue_bytes = queue_bytes - q.payload + payload[i];
      q.value = values[i];
      q.payload = payload[i];
    }
    if (sending_keys.empty()) { return; }
    std::unordered_set<std::string_view> const asked(skeys.begin(), skeys.end());
    bool const in_flight = std::any_of(sending_keys.begin(), sending_keys.end(), [&](auto const& k) {
      return asked.contains(k);
    });
    if (!in_flight) { return; }
    std::uint64_t const batch = batches_taken;  // the writer's timeouts bound this wait
    idle_cv.wait(lock, [&] { return batches_done >= batch; });
  }

  void writer_loop() {
    std::unique_lock lock(q_mu);
    for (;;) {
      q_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty() && stopping) { return; }
      std::size_t const take = std::max<std::size_t>(1, opt.pipeline) * 4;
      if (opt.write_linger.count() > 0) {  // a fuller batch: fewer round trips per value
        q_cv.wait_for(lock, opt.write_linger, [&] {
          return stopping || flushing > 0 || queue.size() >= std::max<std::size_t>(1, opt.pipeline);
        });
      }
      // The batch stays visible to get() and exists() (pending()) until it is stored.
      std::size_t bytes = 0;
      std::vector<std::size_t> payload;
      while (!queue.empty() && sending_keys.size() < take) {
        auto& q = queue.front();
        queued_at.erase(q.key);  // before its key moves out
        bytes += q.payload;
        sending_keys.push_back(std::move(q.key));
        sending_values.push_back(std::move(q.value));
        payload.push_back(q.payload);
        queue.pop_front();
      }
      busy = true;
      ++batches_taken;
      lock.unlock();
      std::size_t const stored = set_values(bg, sending_keys, sending_values, payload);
      if (stored < sending_keys.size()) {
        dropped.fetch_add(sending_keys.size() - stored, std::memory_order_relaxed);
      }
      lock.lock();
      sending_keys.clear();
      sending_values.clear();
      queue_bytes -= bytes;
      busy = false;
      ++batches_done;
      idle_cv.notify_all();  // flush() and supersede() wait on their own conditions
    }
  }
};

redis_tier::redis_tier(redis_options options) : impl_(std::make_unique<impl>()) {
  impl& m = *impl_;
  m.opt = std::move(options);
  m.url = parse_redis_url(m.opt.url);
  m.shown = redact_redis_url(m.opt.url);
  if (m.opt.timeout.count() <= 0 || m.opt.connect_timeout.count() <= 0) {
    throw error(error_code::invalid_argument, "redis_tier: timeouts must be positive");
  }
  if (m.opt.ttl.count() < 0 || m.opt.ttl > redis_max_ttl) {
    throw error(error_code::invalid_argument,
                "redis_tier: ttl " + std::to_string(m.opt.ttl.count()) + " s is outside [0, " +
                    std::to_string(redis_max_ttl.count()) +
                    "] (Redis keeps expiry times in milliseconds)");
  }
  m.init_set(m.fg);
  m.init_set(m.bg);
  {
    std::lock_guard lock(m.fg_mu);
    // A bad password or database fails here, clearly; a server that is down is retried later.
    for (auto& s : m.fg.servers) { m.connect(s, true); }
    if (!m.fg.mapped) { m.learn_map(m.fg, true); }
  }
  m.writer = std::thread([&m] { m.writer_loop(); });
}

redis_tier::~redis_tier() {
  impl& m = *impl_;
  {
    std::lock_guard lock(m.q_mu);
    m.stopping = true;
  }
  m.q_cv.notify_all();
  if (m.writer.joinable()) { m.writer.join(); }
}

std::size_t redis_tier::get(std::span<key_type const> keys, std::span<std::byte* const> dst,
                            std::span<std::size_t const> sizes, std::span<bool> found) {
  impl& m = *impl_;
  std::size_t const n = keys.size();
  if (dst.size() < n || sizes.size() < n || found.size() < n) {
    throw error(error_code::invalid_argument, "redis_tier::get: dst, sizes and found need " +
                                                  std::to_string(n) + " elements each");
  }
  std::fill(found.begin(), found.begin() + std::ptrdiff_t(n), false);
  if (n == 0) { return 0; }
  m.gets.fetch_add(n, std::memory_order_relaxed);
  auto const skeys = m.stored_keys(keys);
  std::vector<std::size_t> todo;
  std::size_t hit = 0;
  auto accept = [&](std::size_t i, char const* value, std::size_t len) {
    auto const c = check_remote_value(value, len, keys[i], sizes[i]);
    if (c != remote_value_check::ok) {
      m.integrity.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard el(m.err_mu);
      m.last_error = "value of " + skeys[i] + " rejected: " + to_string(c);
      return;
    }
    if (sizes[i] != 0) { std::memcpy(dst[i], value + sizeof(remote_value_header), sizes[i]); }
    found[i] = true;
    ++hit;
    m.hit_bytes.fetch_add(sizes[i], std::memory_order_relaxed);
  };
  // read-your-writes: a value still in the write-back queue is newer than the server's
  todo = m.serve_pending(
      skeys, [&](std::size_t i, std::string const& v) { accept(i, v.data(), v.size()); });
  if (todo.empty()) {
    m.hits.fetch_add(hit, std::memory_order_relaxed);
    m.misses.fetch_add(n - hit, std::memory_order_relaxed);
    return hit;
  }
  std::lock_guard lock(m.fg_mu);
  auto take = [&](std::size_t i, redisReply const* r) {
    std::string_view value;
    switch (detail::classify_get(r, value)) {
      case detail::get_reply::nil: return;
      case detail::get_reply::unexpected:
        m.note_error("GET " + skeys[i] + ": unexpected reply");
        return;
      case detail::get_reply::value: accept(i, value.data(), value.size()); return;
    }
  };
  // An MGET's reply holds one value per key, none larger than the largest size asked for.
  detail::reply_bounds bounds{std::max<std::size_t>(1, m.opt.pipeline), 0};
  for (std::size_t i : todo) { bounds.bulk = std::max(bounds.bulk, sizes[i]); }
  bounds.bulk += sizeof(remote_value_header);
  // pipeline 1 is the one-round-trip-per-key baseline: GET each. Otherwise MGET carries up to
  // `pipeline` keys per command, which costs the server far less than as many GETs.
  m.run(m.fg, skeys, std::move(todo), clock_type::now() + m.opt.timeout, m.opt.pipeline, bounds,
        [&](std::span<std::size_t const> idx, std::vector<char const*>& argv,
            std::vector<std::size_t>& lens) {
          argv.push_back(idx.size() > 1 ? "MGET" : "GET");
          lens.push_back(idx.size() > 1 ? 4 : 3);
          for (std::size_t i : idx) {
            argv.push_back(skeys[i].data());
            lens.push_back(skeys[i].size());
          }
        },
        [&](std::span<std::size_t const> idx, redisReply* r) {
          if (idx.size() == 1) {
            take(idx[0], r);
            return;
          }
          if (r->type != REDIS_REPLY_ARRAY || r->elements != idx.size()) {
            m.note_error("MGET: unexpected reply");
            return;
          }
          for (std::size_t j = 0; j < idx.size(); ++j) { take(idx[j], r->element[j]); }
        });
  m.hits.fetch_add(hit, std::memory_order_relaxed);
  m.misses.fetch_add(n - hit, std::memory_order_relaxed);
  return hit;
}

std::size_t redis_tier::put(std::span<key_type const> keys, std::span<std::byte const* const> src,
                            std::span<std::size_t const> sizes) {
  impl& m = *impl_;
  std::size_t const n = keys.size();
  if (src.size() < n || sizes.size() < n) {
    throw error(error_code::invalid_argument,
                "redis_tier::put: src and sizes need " + std::to_string(n) + " elements each");
  }
  if (n == 0) { return 0; }
  auto const skeys = m.stored_keys(keys);
  std::vector<std::string> values(n);
  std::vector<std::size_t> payload(sizes.begin(), sizes.begin() + std::ptrdiff_t(n));
  for (std::size_t i = 0; i < n; ++i) { values[i] = impl::encode(keys[i], src[i], sizes[i]); }
  m.supersede(skeys, values, payload);
  std::lock_guard lock(m.fg_mu);
  return m.set_values(m.fg, skeys, values, payload);
}

std::size_t redis_tier::put_async(std::span<key_type const> keys,
                                  std::span<std::byte const* const> src,
                                  std::span<std::size_t const> sizes) {
  impl& m = *impl_;
  std::size_t const n = keys.size();
  if (src.size() < n || sizes.size() < n) {
    throw error(error_code::invalid_argument,
                "redis_tier::put_async: src and sizes need " + std::to_string(n) + " elements each");
  }
  std::size_t taken = 0;
  {
    std::lock_guard lock(m.q_mu);
    for (std::size_t i = 0; i < n; ++i) {
      std::string skey = m.stored_key(keys[i]);
      auto const it = m.queued_at.find(skey);
      std::size_t const replaced = it == m.queued_at.end() ? 0 : it->second->payload;
      if (m.queue_bytes - replaced + sizes[i] > m.opt.queue_bytes && !(m.queue.empty() && !m.busy)) {
        break;  // full (an empty queue takes one value of any size)
      }
      if (it != m.queued_at.end()) {  // still queued: the newer value takes its entry and place
        it->second->value = impl::encode(keys[i], src[i], sizes[i]);
        it->second->payload = sizes[i];
      } else {
        m.queue.push_back(queued_value{std::move(skey), impl::encode(keys[i], src[i], sizes[i]),
                                       sizes[i]});
        m.queued_at.emplace(m.queue.back().key, &m.queue.back());
      }
      m.queue_bytes = m.queue_bytes - replaced + sizes[i];
      ++taken;
    }
  }
  if (taken != 0) { m.q_cv.notify_one(); }
  m.queued.fetch_add(taken, std::memory_order_relaxed);
  m.dropped.fetch_add(n - taken, std::memory_order_relaxed);
  return taken;
}

std::size_t redis_tier::exists(std::span<key_type const> keys, std::span<bool> found) {
  impl& m = *impl_;
  std::size_t const n = keys.size();
  if (found.size() < n) {
    throw error(error_code::invalid_argument,
                "redis_tier::exists: found needs " + std::to_string(n) + " elements");
  }
  std::fill(found.begin(), found.begin() + std::ptrdiff_t(n), false);
  if (n == 0) { return 0; }
  m.exists_checks.fetch_add(n, std::memory_order_relaxed);
  auto const skeys = m.stored_keys(keys);
  std::size_t count = 0;
  std::vector<std::size_t> todo = m.serve_pending(skeys, [&](std::size_t i, std::string const&) {  // as in get()
    found[i] = true;
    ++count;
  });
  if (todo.empty()) { return count; }
  std::lock_guard lock(m.fg_mu);
  m.run(m.fg, skeys, std::move(todo), clock_type::now() + m.opt.timeout, 1,
        detail::reply_bounds{},  // an integer
        [&](std::span<std::size_t const> idx, std::vector<char const*>& argv,
            std::vector<std::size_t>& lens) {
          argv = {"EXISTS", skeys[idx[0]].data()};
          lens = {6, skeys[idx[0]].size()};
        },
        [&](std::span<std::size_t const> idx, redisReply* r) {
          std::size_t const i = idx[0];
          if (r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
            found[i] = true;
            ++count;
          }
        });
  return count;
}

bool redis_tier::flush(std::chrono::milliseconds timeout) {
  impl& m = *impl_;
  std::unique_lock lock(m.q_mu);
  ++m.flushing;
  m.q_cv.notify_all();
  bool const done = m.idle_cv.wait_for(lock, timeout, [&] { return m.queue.empty() && !m.busy; });
  --m.flushing;
  return done;
}

remote_stats redis_tier::stats() const {
  impl const& m = *impl_;
  auto ld = [](std::atomic<std::uint64_t> const& a) { return a.load(std::memory_order_relaxed); };
  remote_stats s;
  s.gets = ld(m.gets);
  s.hits = ld(m.hits);
  s.misses = ld(m.misses);
  s.hit_bytes = ld(m.hit_bytes);
  s.puts = ld(m.puts);
  s.put_bytes = ld(m.put_bytes);
  s.exists_checks = ld(m.exists_checks);
  s.integrity_failures = ld(m.integrity);
  s.errors = ld(m.errors);
  s.timeouts = ld(m.timeouts);
  s.connects = ld(m.connects);
  s.skipped = ld(m.skipped);
  s.queued = ld(m.queued);
  s.dropped = ld(m.dropped);
  s.round_trips = ld(m.round_trips);
  s.seconds = double(ld(m.nanos)) * 1e-9;
  return s;
}

std::string redis_tier::describe() const { return "redis " + impl_->shown; }
std::string redis_tier::stored_key(key_type key) const { return impl_->stored_key(key); }
bool redis_tier::cluster_mode() const {
  std::lock_guard lock(impl_->fg_mu);
  return impl_->fg.cluster;
}
std::string redis_tier::last_error() const {
  std::lock_guard lock(impl_->err_mu);
  return impl_->last_error;
}
redis_options const& redis_tier::options() const noexcept { return impl_->opt; }

}  // namespace ccht
