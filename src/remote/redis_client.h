// RedisClient: runs batches of keyed commands on one Redis node or a Redis Cluster. At
// Connect it asks a seed node for CLUSTER SLOTS: a node without cluster support is used
// alone; a cluster's 16384 hash slots are mapped to their master nodes, each command goes
// to the node owning its key's slot (KeySlot: CRC16 of the key, or of its {hash tag}),
// the commands for one node pipelined together, and MOVED / ASK redirections (resharding,
// failover) are followed (MOVED also updates the map). Connections are made on first use
// and dropped when they fail.
// Not thread-safe: one thread owns it (the remote tier's I/O thread).
#ifndef KVTIER_REMOTE_REDIS_CLIENT_H_
#define KVTIER_REMOTE_REDIS_CLIENT_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "remote/redis_address.h"
#include "remote/redis_connection.h"

namespace kvtier {

inline constexpr int kRedisClusterSlots = 16384;

// The cluster hash slot of a key (Redis Cluster specification: CRC16/XMODEM mod 16384,
// over the first non-empty {...} section when there is one).
int KeySlot(std::string_view key);

class RedisClient {
 public:
  // `seeds` non-empty; `timeout` bounds every connect, read and write.
  RedisClient(std::vector<RedisAddress> seeds, std::chrono::milliseconds timeout);

  // Connects to the first seed that answers and learns whether it is a cluster (and its
  // slot map). Unavailable, naming each seed's failure, when none answers.
  absl::Status Connect();
  bool connected() const { return connected_; }
  bool cluster() const { return cluster_; }
  // Drops every connection; Execute fails until Connect succeeds again.
  void Disconnect();

  // Runs the commands (each keyed by args[1]) and puts command i's reply in (*replies)[i].
  // A Redis error reply is a reply. Unavailable / DeadlineExceeded when a node it needs
  // cannot be reached or does not answer in time (the client is then disconnected).
  // `destination` (index: into `commands`) receives bulk-string replies in place
  // (RedisConnection::Pipeline).
  absl::Status Execute(const std::vector<RedisCommand>& commands, std::vector<RedisReply>* replies,
                       const BulkDestination& destination = nullptr);

 private:
  absl::StatusOr<RedisConnection*> ConnectionTo(const RedisAddress& address);
  // Reads CLUSTER SLOTS from `connection`; false when the node has no cluster support.
  absl::StatusOr<bool> LoadSlotMap(RedisConnection* connection);
  RedisAddress NodeFor(const RedisCommand& command) const;

  const std::vector<RedisAddress> seeds_;
  const std::chrono::milliseconds timeout_;
  bool connected_ = false;
  bool cluster_ = false;
  RedisAddress single_;  // the node, when not a cluster
  std::vector<RedisAddress> nodes_;                 // cluster masters
  std::array<int16_t, kRedisClusterSlots> slot_owner_{};  // index into nodes_
  std::map<std::string, std::unique_ptr<RedisConnection>> connections_;  // by "host:port"
};

}  // namespace kvtier

#endif  // KVTIER_REMOTE_REDIS_CLIENT_H_
