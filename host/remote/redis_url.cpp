// Redis URLs (cache/redis_tier.hpp): parse_redis_url and redact_redis_url. A URL's password never
// reaches an error message.
#include <ccht/cache/redis_tier.hpp>
#include <ccht/error.hpp>

#include <cctype>
#include <charconv>
#include <string>
#include <string_view>

namespace ccht {
namespace {

[[noreturn]] void bad_url(std::string const& why) {
  throw error(error_code::invalid_argument, "redis URL: " + why);
}

int parse_int(std::string_view s, char const* what, int lo, int hi) {
  int v = 0;
  auto const [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty() || v < lo || v > hi) {
    bad_url(std::string(what) + " '" + std::string(s) + "' is not a number in [" +
            std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int v = 0;
      auto const [p, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
      if (ec == std::errc() && p == s.data() + i + 3) {
        out.push_back(static_cast<char>(v));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

/// Where the userinfo of a URL's part after "://" ends (its '@'), npos when there is none. A '@'
/// inside a user name or password must be written %40: @p strict refuses a second '@' with an
/// error that shows none of them.
std::size_t userinfo_at(std::string_view rest, bool unix_socket, bool strict = true) {
  if (unix_socket) {  // unix://[user:password@]/path: the path may hold '@'
    if (rest.empty() || rest.front() == '/') { return std::string_view::npos; }
    auto const at = rest.find("@/");
    bool const second =
        at != std::string_view::npos && rest.substr(0, at).find('@') != std::string_view::npos;
    if (strict && second) {
      bad_url("'@' appears more than once before the socket path: write a '@' in the user name or "
              "password as %40");
    }
    return at;
  }
  auto const at = rest.find('@');
  if (strict && at != std::string_view::npos && rest.find('@', at + 1) != std::string_view::npos) {
    bad_url("'@' appears more than once: write a '@' in the user name or password as %40");
  }
  return at;
}

/// Refuses a host that no resolver would take (the URL's password never reaches here).
void check_host(std::string const& host) {
  for (char c : host) {
    auto const u = static_cast<unsigned char>(c);
    if (!std::isalnum(u) && c != '-' && c != '.' && c != '_' && c != ':' && c != '%') {
      std::string shown = host.substr(0, 64);
      for (char& x : shown) { x = std::isprint(static_cast<unsigned char>(x)) ? x : '?'; }
      bad_url("host '" + shown + "' holds '" + std::string(1, std::isprint(u) ? c : '?') +
              "': a host is a name, an IPv4 address or an [IPv6] address");
    }
  }
}

}  // namespace

redis_url parse_redis_url(std::string const& url) {
  redis_url u;
  std::string_view s = url;
  std::string_view scheme;
  if (auto p = s.find("://"); p != std::string_view::npos) {
    scheme = s.substr(0, p);
    s.remove_prefix(p + 3);
  } else {
    bad_url("'" + redact_redis_url(url) + "' has no scheme (expected redis://, unix://)");
  }
  if (scheme == "rediss") {
    bad_url("TLS (rediss://) needs hiredis built with SSL support (hiredis >= 1.0 with "
            "hiredis_ssl); this build uses Debian's hiredis 0.14, which has none. Tunnel TLS "
            "outside the process (stunnel, a service mesh) or use a Unix socket");
  }
  if (scheme != "redis" && scheme != "unix") {
    bad_url("unknown scheme '" + std::string(scheme) + "' (expected redis:// or unix://)");
  }
  std::string rest(s);  // "redis://a:1,redis://b:2" lists: one scheme is enough
  for (std::size_t p; (p = rest.find(",redis://")) != std::string::npos;) { rest.erase(p + 1, 8); }
  s = rest;
  // userinfo@ first: a password may hold '?' or '/', and no error below may show any of it.
  if (auto const at = userinfo_at(s, scheme == "unix"); at != std::string_view::npos) {
    std::string_view ui = s.substr(0, at);
    s.remove_prefix(at + 1);
    if (auto c = ui.find(':'); c != std::string_view::npos) {
      u.user = percent_decode(ui.substr(0, c));
      u.password = percent_decode(ui.substr(c + 1));
    } else {
      u.password = percent_decode(ui);  // redis://password@host, as redis-cli reads it
    }
  }
  std::string_view query;
  if (auto q = s.find('?'); q != std::string_view::npos) {
    query = s.substr(q + 1);
    s = s.substr(0, q);
  }
  if (scheme == "unix") {
    if (s.empty() || s.front() != '/') { bad_url("unix:// needs an absolute socket path"); }
    u.endpoints.push_back(redis_endpoint{"", 0, std::string(s)});
  } else {
    std::string_view hosts = s;
    if (auto slash = s.find('/'); slash != std::string_view::npos) {
      hosts = s.substr(0, slash);
      std::string_view const db = s.substr(slash + 1);
      if (!db.empty()) { u.db = parse_int(db, "database", 0, 1 << 20); }
    }
    if (hosts.empty()) { bad_url("no host"); }
    while (!hosts.empty()) {
      auto const comma = hosts.find(',');
      std::string_view hp = hosts.substr(0, comma);
      hosts = comma == std::string_view::npos ? std::string_view{} : hosts.substr(comma + 1);
      if (hp.rfind("redis://", 0) == 0) { hp.remove_prefix(8); }  // "redis://a:1,redis://b:2"
      redis_endpoint e;
      if (!hp.empty() && hp.front() == '[') {  // [IPv6]:port
        auto const close = hp.find(']');
        if (close == std::string_view::npos) { bad_url("unclosed '[' in a host"); }
        e.host = std::string(hp.substr(1, close - 1));
        hp.remove_prefix(close + 1);
        if (!hp.empty()) {
          if (hp.front() != ':') { bad_url("junk after ']' in a host"); }
          e.port = parse_int(hp.substr(1), "port", 1, 65535);
        }
      } else if (auto c = hp.rfind(':'); c != std::string_view::npos) {
        e.host = std::string(hp.substr(0, c));
        e.port = parse_int(hp.substr(c + 1), "port", 1, 65535);
      } else {
        e.host = std::string(hp);
      }
      if (e.host.empty()) { bad_url("empty host in the server list"); }
      check_host(e.host);
      u.endpoints.push_back(std::move(e));
    }
  }
  if (!query.empty()) {
    while (!query.empty()) {
      auto const amp = query.find('&');
      std::string_view kv = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
      if (kv.rfind("db=", 0) == 0) {
        u.db = parse_int(kv.substr(3), "database", 0, 1 << 20);
      } else {
        bad_url("unknown query parameter '" + std::string(kv.substr(0, kv.find('='))) +
                "' (only db=N)");
      }
    }
  }
  if (u.endpoints.size() > 1 && u.db != 0) {
    bad_url("a server list shards by hash slot and uses database 0 only (Redis Cluster has no "
            "SELECT); drop /" + std::to_string(u.db));
  }
  return u;
}

std::string redact_redis_url(std::string const& url) {
  auto const scheme = url.find("://");
  std::size_t const start = scheme == std::string::npos ? 0 : scheme + 3;
  bool const unix_socket = scheme != std::string::npos && url.compare(0, scheme, "unix") == 0;
  std::string_view const rest = std::string_view(url).substr(start);
  // The last '@' (the parser's, where it accepts the URL): a URL it refuses for a second '@' is
  // hidden up to the last one, never less. A unix:// socket path may hold '@'.
  std::size_t at = unix_socket ? userinfo_at(rest, true, false) : rest.rfind('@');
  if (at == std::string_view::npos && unix_socket && !rest.starts_with('/')) {
    at = rest.rfind('@');
  }
  if (at == std::string_view::npos) { return url; }
  at += start;
  auto const colon = url.find(':', start);
  std::string out = url.substr(0, start);
  if (colon != std::string::npos && colon < at) {
    out += url.substr(start, colon - start) + ":***";
  } else {
    out += "***";
  }
  return out + url.substr(at);
}

}  // namespace ccht
