// How the Redis tier reads replies (redis_reply.hpp): hiredis's reader held to the bounds of the
// request, a time budget between reads, and GET replies classified.
#include "redis_reply.hpp"

#include <ccht/error.hpp>

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>

namespace ccht::detail {
namespace {

/// hiredis's own reply object functions (those of a reader it makes).
redisReplyObjectFunctions const& hiredis_functions() {
  static redisReplyObjectFunctions const fns = [] {
    redisReader* r = redisReaderCreate();
    if (r == nullptr) {
      throw error(error_code::out_of_memory, "redis_tier: no memory for a reader");
    }
    redisReplyObjectFunctions const f = *r->fn;
    redisReaderFree(r);
    return f;
  }();
  return fns;
}

/// Records the first claim out of bounds. Called from hiredis (C): nothing may throw through it.
template <class Describe>
void note_violation(reply_check& check, Describe&& describe) noexcept {
  try {
    if (check.violation.empty()) { check.violation = describe(); }
  } catch (...) {
    check.violation = "?";
  }
}

// hiredis 0.14 counts elements in an int, 1.x in a size_t.
template <class Count>
void* bounded_array(redisReadTask const* task, Count elements) {
  auto* check = static_cast<reply_check*>(task->privdata);
  if (check != nullptr && (elements < 0 || std::size_t(elements) > check->bounds.elements)) {
    note_violation(*check, [&] {
      return "a reply claims an array of " + std::to_string(elements) + " elements, at most " +
             std::to_string(check->bounds.elements) + " expected";
    });
    return nullptr;  // hiredis fails the reader; read_reply() says why
  }
  return hiredis_functions().createArray(task, elements);
}

void* bounded_string(redisReadTask const* task, char* str, std::size_t len) {
  auto* check = static_cast<reply_check*>(task->privdata);
  bool const bulk = task->type == REDIS_REPLY_STRING;
  if (check != nullptr && len > (bulk ? check->bounds.bulk : check->bounds.line)) {
    note_violation(*check, [&] {
      return std::string(bulk ? "a reply holds a bulk string of " : "a reply line has ") +
             std::to_string(len) + " bytes, at most " +
             std::to_string(bulk ? check->bounds.bulk : check->bounds.line) + " expected";
    });
    return nullptr;
  }
  return hiredis_functions().createString(task, str, len);
}

redisReplyObjectFunctions* bounded_functions() {
  static redisReplyObjectFunctions fns = [] {
    redisReplyObjectFunctions f = hiredis_functions();
    f.createArray = bounded_array;
    f.createString = bounded_string;
    return f;
  }();
  return &fns;
}

/// Sets @p c's error (the blocking API's fields) and returns @p o.
read_outcome failed(redisContext* c, read_outcome o, std::string const& why) {
  c->err = o == read_outcome::protocol ? REDIS_ERR_PROTOCOL : REDIS_ERR_IO;
  std::snprintf(c->errstr, sizeof c->errstr, "%s", why.c_str());
  return o;
}

/// The outcome of a failed redisBufferRead / redisBufferWrite (errno is still theirs).
read_outcome io_outcome(redisContext const* c) {
  bool const slow = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
  return slow ? read_outcome::timeout : read_outcome::io;
}

/// The outcome of a failed parse: a claim out of bounds, or hiredis's own protocol error.
read_outcome parse_outcome(redisContext* c, reply_check const& check) {
  if (!check.violation.empty()) {
    return failed(c, read_outcome::protocol, "protocol error: " + check.violation);
  }
  return read_outcome::protocol;
}

}  // namespace

void bound_reader(redisReader* reader, reply_check* check) {
  reader->fn = bounded_functions();
  reader->privdata = check;
}

bool check_pending(redisReader const& reader, reply_check& check) {
  if (reader.buf == nullptr || reader.pos >= reader.len) { return true; }
  std::string_view rest(reader.buf + reader.pos, reader.len - reader.pos);
  // hiredis consumes an item's type byte first and keeps it in the read task: the item waiting
  // is either that task's (its header line at pos) or a new one (its type byte at pos).
#if HIREDIS_MAJOR >= 1
  redisReadTask const* task = reader.ridx >= 0 ? reader.task[reader.ridx] : nullptr;
#else
  redisReadTask const* task = reader.ridx >= 0 ? &reader.rstack[reader.ridx] : nullptr;
#endif
  bool bulk = task != nullptr && task->type == REDIS_REPLY_STRING;
  if (task == nullptr || task->type < 0) {
    bulk = rest.front() == '$';
    rest.remove_prefix(1);
  }
  auto const eol = rest.find("\r\n");
  if (eol == std::string_view::npos) {  // a line still without its end: how long may it grow?
    if (rest.size() > check.bounds.line + 32) {
      note_violation(check, [&] {
        return "a reply line runs past " + std::to_string(check.bounds.line) + " bytes";
      });
      return false;
    }
    return true;
  }
  if (!bulk) { return true; }
  long long len = 0;  // hiredis waits for all of a bulk string: judge its length first
  auto const [p, ec] = std::from_chars(rest.data(), rest.data() + eol, len);
  if (ec == std::errc() && p == rest.data() + eol && len > 0 &&
      static_cast<unsigned long long>(len) > check.bounds.bulk) {
    note_violation(check, [&] {
      return "a reply claims a bulk string of " + std::to_string(len) + " bytes, at most " +
             std::to_string(check.bounds.bulk) + " expected";
    });
    return false;
  }
  return true;
}

read_outcome read_reply(redisContext* c, reply_check& check,
                        std::chrono::steady_clock::time_point deadline, void** reply) {
  *reply = nullptr;
  check.violation.clear();
  bound_reader(c->reader, &check);
  if (redisGetReplyFromReader(c, reply) != REDIS_OK) { return parse_outcome(c, check); }
  if (*reply != nullptr) { return read_outcome::reply; }
  for (int done = 0; done == 0;) {
    if (redisBufferWrite(c, &done) != REDIS_OK) { return io_outcome(c); }
  }
  for (;;) {
    if (!check_pending(*c->reader, check)) {
      return failed(c, read_outcome::protocol, "protocol error: " + check.violation);
    }
    if (std::chrono::steady_clock::now() >= deadline) {  // a server that trickles bytes
      return failed(c, read_outcome::timeout, "the time budget ran out while a reply was read");
    }
    if (redisBufferRead(c) != REDIS_OK) { return io_outcome(c); }
    if (redisGetReplyFromReader(c, reply) != REDIS_OK) { return parse_outcome(c, check); }
    if (*reply != nullptr) { return read_outcome::reply; }
  }
}

get_reply classify_get(redisReply const* r, std::string_view& value) noexcept {
  if (r == nullptr) { return get_reply::unexpected; }
  if (r->type == REDIS_REPLY_NIL) { return get_reply::nil; }
  if (r->type != REDIS_REPLY_STRING) { return get_reply::unexpected; }
  value = std::string_view(r->str, r->len);
  return get_reply::value;
}

}  // namespace ccht::detail
