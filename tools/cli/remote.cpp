// --remote of `ccht kv-replay` and `ccht weights`: a ccht::redis_tier where this build has hiredis.
#include "commands.hpp"

#include <ccht/cache/redis_tier.hpp>  // redis_max_ttl; the tier itself only where CCHT_HAVE_REDIS
#include <ccht/error.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace ccht::cli {

std::unique_ptr<remote_store> make_remote(remote_cli_options const& o) {
  if (o.url.empty()) { return nullptr; }
  if (o.write != "back" && o.write != "through") {
    throw std::invalid_argument("--remote-write must be back or through, got '" + o.write + "'");
  }
  if (o.pipeline == 0) { throw std::invalid_argument("--remote-pipeline must be at least 1"); }
  if (o.timeout_ms == 0) { throw std::invalid_argument("--remote-timeout-ms must be at least 1"); }
  if (o.ttl_s > std::uint64_t(redis_max_ttl.count())) {  // Redis would refuse every write
    throw std::invalid_argument("--remote-ttl: expected seconds in [0, " +
                                std::to_string(redis_max_ttl.count()) + "] (0: no expiry), got " +
                                std::to_string(o.ttl_s));
  }
#if CCHT_HAVE_REDIS
  redis_options r;
  r.url = o.url;
  r.prefix = o.prefix;
  r.ttl = std::chrono::seconds(o.ttl_s);
  r.timeout = std::chrono::milliseconds(o.timeout_ms);
  r.pipeline = o.pipeline;
  try {
    return std::make_unique<redis_tier>(r);
  } catch (ccht::error const& e) {  // a malformed URL, a refused password: bad --remote (exit 2)
    throw std::invalid_argument(std::string("--remote: ") + e.what());
  }
#else
  throw std::invalid_argument("--remote: this ccht was built without hiredis (install "
                              "libhiredis-dev and reconfigure with CCHT_WITH_REDIS=AUTO or ON)");
#endif
}

int remote_verdict(remote_store const* remote, std::uint64_t writes) {
  if (remote == nullptr) { return 0; }
  remote_stats const s = remote->stats();
  if (s.errors == 0) { return 0; }
  std::string last;
#if CCHT_HAVE_REDIS
  if (auto const* tier = dynamic_cast<redis_tier const*>(remote)) { last = tier->last_error(); }
#endif
  std::string const why =
      "errors: " + std::to_string(s.errors) + (last.empty() ? "" : "; last: " + last);
  // Never reached (a wrong host or port), or every write refused: the tier asked for did not
  // work, which a run must not report as success. Hits alone prove nothing: a value still in the
  // write-back queue is served from there.
  if (s.connects == 0 || (writes > 0 && s.puts == 0)) {
    std::fprintf(stderr, "ccht: error: remote tier (%s): %s (%s)\n", remote->describe().c_str(),
                 s.connects == 0 ? "no server was ever reached" : "every write failed",
                 why.c_str());
    return 1;
  }
  std::fprintf(stderr, "ccht: warning: remote tier (%s): some remote calls failed (%s)\n",
               remote->describe().c_str(), why.c_str());
  return 0;
}

void add_remote_json(nlohmann::json& j, remote_stats const& s) {
  j["remote_gets"] = s.gets;
  j["remote_store_hits"] = s.hits;
  j["remote_misses"] = s.misses;
  j["remote_hit_bytes"] = s.hit_bytes;
  j["remote_puts"] = s.puts;
  j["remote_put_bytes"] = s.put_bytes;
  j["remote_errors"] = s.errors;
  j["remote_timeouts"] = s.timeouts;
  j["remote_integrity_failures"] = s.integrity_failures;
  j["remote_skipped"] = s.skipped;
  j["remote_dropped"] = s.dropped;
  j["remote_connects"] = s.connects;
  j["remote_round_trips"] = s.round_trips;
  j["remote_seconds"] = s.seconds;
  j["remote_pages_per_s"] = s.seconds > 0 ? double(s.gets + s.puts) / s.seconds : 0.0;
}

}  // namespace ccht::cli
