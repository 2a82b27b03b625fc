// RedisConnection: one connection to one Redis node (hiredis, blocking with a socket
// timeout), sending a batch of commands at once and reading their replies in order
// (pipelining: one round trip per batch, not per command). A connection that failed
// (refused, reset, timed out, protocol error) is broken for good: the owner drops it and
// connects again. Not thread-safe: one thread owns it (the remote tier's I/O thread).
#ifndef KVTIER_REMOTE_REDIS_CONNECTION_H_
#define KVTIER_REMOTE_REDIS_CONNECTION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "remote/redis_address.h"

struct redisContext;  // hiredis

namespace kvtier {

// A command's arguments; args[1] is the key for keyed commands (cluster routing).
struct RedisCommand {
  std::vector<std::string> args;
};

// A reply, copied out of hiredis's.
struct RedisReply {
  enum class Kind { kString, kStatus, kError, kInteger, kNil, kArray };
  Kind kind = Kind::kNil;
  std::string str;  // kString, kStatus, kError
  int64_t integer = 0;
  std::vector<RedisReply> elements;  // kArray
};

class RedisConnection {
 public:
  // Unavailable naming the node when it cannot be reached within `timeout` (which also
  // bounds every later read and write on the socket).
  static absl::StatusOr<std::unique_ptr<RedisConnection>> Connect(const RedisAddress& address,
                                                                  std::chrono::milliseconds timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends every command, then reads one reply per command into (*replies)[i]. A Redis
  // error reply is a reply (kError), not a failure. Unavailable (DeadlineExceeded for a
  // timeout) when the connection fails; it is broken() from then on.
  absl::Status Pipeline(std::span<const RedisCommand* const> commands, std::vector<RedisReply>* replies);
  bool broken() const { return broken_; }
  const RedisAddress& address() const { return address_; }

 private:
  RedisConnection(const RedisAddress& address, redisContext* context) : address_(address), context_(context) {}
  absl::Status Fail(const char* what);

  const RedisAddress address_;
  redisContext* context_;
  bool broken_ = false;
};

}  // namespace kvtier

#endif  // KVTIER_REMOTE_REDIS_CONNECTION_H_
