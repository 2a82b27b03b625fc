// RedisConnection: one connection to one Redis node, sending a batch of commands at once
// and reading their replies in order (pipelining: one round trip per batch, not per
// command). hiredis opens the socket (connect timeout, socket timeouts); the commands and
// replies are this class's own RESP2 writer and reader on that socket, so that large
// values are never copied on their way: a command's arguments are written from where
// they are (writev), and a bulk-string reply can be received straight into buffers its
// caller names (BulkDestination) — the remote tier's gets land in their block's bytes.
// A connection that failed (refused, reset, timed out, protocol error) is broken for good:
// the owner drops it and connects again. Not thread-safe: one thread owns it.
#ifndef KVTIER_REMOTE_REDIS_CONNECTION_H_
#define KVTIER_REMOTE_REDIS_CONNECTION_H_

#include <chrono>
#include <cstdint>
#include <functional>
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

// A reply.
struct RedisReply {
  enum class Kind { kString, kStatus, kError, kInteger, kNil, kArray };
  Kind kind = Kind::kNil;
  std::string str;  // kString (unless in_destination), kStatus, kError
  bool in_destination = false;  // kString received into the BulkDestination's buffers
  int64_t integer = 0;
  std::vector<RedisReply> elements;  // kArray
};

// For the bulk-string reply of command `index` of `length` bytes: the buffers to receive it
// into, in order, their sizes adding up to `length`; or none, to have it in the reply's str.
using BulkDestination = std::function<std::vector<std::span<uint8_t>>(size_t index, size_t length)>;

class RedisConnection {
 public:
  // Unavailable naming the node when it cannot be reached within `timeout` (which also
  // bounds every later read and write on the socket).
  static absl::StatusOr<std::unique_ptr<RedisConnection>> Connect(const RedisAddress& address,
                                                                  std::chrono::milliseconds timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends every command, then reads one reply per command into (*replies)[i]; a top-level
  // bulk string goes where `destination` (when set) says. A Redis error reply is a reply
  // (kError), not a failure. Unavailable (DeadlineExceeded for a timeout) when the
  // connection fails; it is broken() from then on.
  absl::Status Pipeline(std::span<const RedisCommand* const> commands, std::vector<RedisReply>* replies,
                        const BulkDestination& destination = nullptr);
  bool broken() const { return broken_; }
  const RedisAddress& address() const { return address_; }

 private:
  RedisConnection(const RedisAddress& address, redisContext* context);
  absl::Status Fail(absl::Status status);
  absl::Status SendAll(std::span<const RedisCommand* const> commands);
  // Receives at least one more byte into the read buffer.
  absl::Status Fill();
  // Copies `n` bytes to `out`: first what the buffer holds, the rest received straight there.
  absl::Status ReadExact(uint8_t* out, size_t n);
  absl::StatusOr<std::string> ReadLine();
  // One reply; `index` >= 0 for a top-level reply (its bulk string may go to destination).
  absl::Status ReadReply(RedisReply* reply, int depth, int64_t index, const BulkDestination& destination);
  absl::Status IoError(const char* what, int error);

  const RedisAddress address_;
  redisContext* context_;
  int fd_;
  bool broken_ = false;
  std::vector<char> buffer_;  // received, not yet parsed: [begin_, end_)
  size_t begin_ = 0, end_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_REMOTE_REDIS_CONNECTION_H_
