// libFuzzer target: the command line's size and URL parsers: sim::parse_bytes (--budget,
// --page-bytes) and, where hiredis is built, parse_redis_url / redact_redis_url (--remote).
// Input: byte 0 picks the parser (even: size, odd: URL), the rest is the argument. A URL's
// password must never show in an error or in its redacted form.
#include <sim/model_runtime.hpp>

#if CCHT_FUZZ_REDIS
#include <ccht/cache/redis_tier.hpp>
#include <ccht/error.hpp>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace {

void require(bool ok) {
  if (!ok) { std::abort(); }
}

void size_arg(std::string const& text) {
  try {
    require(ccht::sim::parse_bytes(text, "--budget") > 0);
  } catch (std::invalid_argument const& e) {
    require(std::string(e.what()).starts_with("--budget: "));
  }
}

#if CCHT_FUZZ_REDIS
/// The error parse_redis_url() gives for @p url ("" when it parses).
std::string url_error(std::string const& url) {
  try {
    auto const u = ccht::parse_redis_url(url);
    require(!u.endpoints.empty() && u.db >= 0);
    for (auto const& e : u.endpoints) {
      require(e.socket.empty() ? !e.host.empty() && e.port >= 1 && e.port <= 65535
                               : e.socket.front() == '/');
    }
  } catch (ccht::error const& e) {
    require(e.code() == ccht::error_code::invalid_argument);
    return e.what();
  }
  return {};
}

/// Where the userinfo of @p url ends (its '@'), npos when there is none: the last '@' (for
/// unix://, the one before the socket path's '/'; a path that starts at once has none).
std::size_t userinfo_end(std::string const& url, std::size_t start) {
  std::size_t at = std::string::npos;
  if (url.starts_with("unix://")) {
    if (url.compare(start, 1, "/") == 0) { return std::string::npos; }
    at = url.find("@/", start);
  }
  if (at == std::string::npos) { at = url.rfind('@'); }
  return at != std::string::npos && at >= start ? at : std::string::npos;
}

void url_arg(std::string const& url) {
  auto const scheme = url.find("://");
  std::size_t const start = scheme == std::string::npos ? 0 : scheme + 3;
  std::size_t const at = userinfo_end(url, start);
  std::string secret;  // the password as written
  std::string masked = url;
  if (at != std::string::npos) {
    auto const colon = url.find(':', start);
    bool const user = colon < at;
    secret = user ? url.substr(colon + 1, at - colon - 1) : url.substr(start, at - start);
    masked = (user ? url.substr(0, colon + 1) : url.substr(0, start)) + "***" + url.substr(at);
  }
  require(ccht::redact_redis_url(url) == masked);
  std::string const error = url_error(url);
  if (secret.size() < 6 || secret.find("***") != std::string::npos ||
      url.find('Q') != std::string::npos || error.find(secret) == std::string::npos) {
    return;
  }
  // The error shows text equal to the password. A leak, or a coincidence of the message's words
  // and the URL's other parts? The same URL with the password's letters changed tells: a leak
  // shows the changed letters where the coincidence still shows the old text.
  std::string other = url;
  std::string const mark(secret.size(), 'Q');
  other.replace(at - secret.size(), secret.size(), mark);
  std::string const error2 = url_error(other);
  require(error2.find(secret) != std::string::npos || error2.find(mark) == std::string::npos);
}
#endif

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size < 1) { return 0; }
  std::string const text(reinterpret_cast<char const*>(data + 1), size - 1);
  if (data[0] % 2 == 0) {
    size_arg(text);
  } else {
#if CCHT_FUZZ_REDIS
    url_arg(text);
#endif
  }
  return 0;
}
