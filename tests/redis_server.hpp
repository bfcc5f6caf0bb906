// A real redis-server for the remote-tier tests: started on a free loopback port with a temporary
// directory and no persistence, stopped (and its directory removed) at the end. Tests that need
// it skip, saying why, when the binary is missing or does not start.
#pragma once

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#ifndef CCHT_REDIS_SERVER
#define CCHT_REDIS_SERVER "redis-server"
#endif

namespace ccht::test {

/// A loopback TCP port nothing listens on now (the kernel's pick), at most 55535 so that a
/// cluster node's bus port (port + 10000) is valid too.
inline int free_loopback_port() {
  std::vector<int> held;  // kept open while picking, so each bind gets another port
  int port = -1;
  for (int tries = 0; tries < 64 && port < 0; ++tries) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) { break; }
    held.push_back(fd);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 && ntohs(a.sin_port) <= 55535) {
      port = ntohs(a.sin_port);
    }
  }
  for (int fd : held) { ::close(fd); }
  return port;
}

/// One redis-server process.
class redis_server {
 public:
  /// @p extra: more command-line options (e.g. {"--requirepass", "pw"}).
  explicit redis_server(std::vector<std::string> extra = {}, int port = 0) : extra_(std::move(extra)) {
    char tmpl[] = "/tmp/ccht-redis-XXXXXX";
    if (char* d = ::mkdtemp(tmpl); d != nullptr) { dir_ = d; }
    port_ = port != 0 ? port : free_loopback_port();
  }
  ~redis_server() {
    stop();
    std::error_code ec;
    if (!dir_.empty()) { std::filesystem::remove_all(dir_, ec); }
  }
  redis_server(redis_server const&) = delete;
  redis_server& operator=(redis_server const&) = delete;

  /// Starts the server and waits until it answers PING. @return an empty string, or why not
  std::string start() {
    if (pid_ > 0) { return {}; }
    if (dir_.empty() || port_ <= 0) { return "no temporary directory or free port"; }
    std::vector<std::string> args{CCHT_REDIS_SERVER, "--port", std::to_string(port_), "--bind",
                                  "127.0.0.1", "--dir", dir_, "--save", "", "--appendonly", "no",
                                  "--unixsocket", socket_path(), "--unixsocketperm", "700",
                                  "--logfile", dir_ + "/redis.log", "--daemonize", "no"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) { argv.push_back(a.data()); }
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    if (pid_ < 0) { return "fork failed"; }
    for (int i = 0; i < 200; ++i) {  // up to 10 s
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return std::string(CCHT_REDIS_SERVER) + " exited at start (status " + std::to_string(st) +
               "; is it installed? tools/dev.sh setup installs it)";
      }
      if (ping()) { return {}; }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    stop();
    return std::string(CCHT_REDIS_SERVER) + " did not answer on port " + std::to_string(port_);
  }
  /// SIGKILL (a crash) or SIGTERM, and waits for the process.
  void stop(bool kill = false) {
    if (pid_ <= 0) { return; }
    ::kill(pid_, SIGCONT);
    ::kill(pid_, kill ? SIGKILL : SIGTERM);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }
  /// Freezes (SIGSTOP) or thaws (SIGCONT) the server: a server that is slow to answer.
  void pause(bool on) {
    if (pid_ > 0) { ::kill(pid_, on ? SIGSTOP : SIGCONT); }
  }

  int port() const noexcept { return port_; }
  std::string const& dir() const noexcept { return dir_; }
  std::string socket_path() const { return dir_ + "/redis.sock"; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  bool running() const noexcept { return pid_ > 0; }

  /// A raw connection for the test's own commands (AUTH with @p password when given).
  redisContext* connect(std::string const& password = {}) const {
    timeval tv{1, 0};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
    if (c != nullptr && c->err == 0 && !password.empty()) {
      freeReplyObject(redisCommand(c, "AUTH %s", password.c_str()));
    }
    return c;
  }

 private:
  bool ping() const {
    redisContext* c = connect();
    bool ok = false;
    if (c != nullptr && c->err == 0) {
      auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
      // NOAUTH also means it is up.
      ok = r != nullptr && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR);
      if (r != nullptr) { freeReplyObject(r); }
    }
    if (c != nullptr) { redisFree(c); }
    return ok;
  }

  std::vector<std::string> extra_;
  std::string dir_;
  int port_ = -1;
  pid_t pid_ = -1;
};

/// Frees a hiredis reply at scope end.
struct reply_guard {
  redisReply* r;
  explicit reply_guard(void* p) : r(static_cast<redisReply*>(p)) {}
  ~reply_guard() { if (r != nullptr) { freeReplyObject(r); } }
  redisReply* operator->() const { return r; }
};

}  // namespace ccht::test

/// Starts @p server, or skips the current test saying why it could not.
#define START_OR_SKIP(server)                                      \
  do {                                                             \
    if (auto const why = (server).start(); !why.empty()) {         \
      GTEST_SKIP() << "no redis-server for this test: " << why;    \
    }                                                              \
  } while (0)

