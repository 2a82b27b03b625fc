// Where the remote KV tier lives: the `remote_kv_url` option parsed into Redis node
// addresses (one node, or the seed nodes of a Redis Cluster). Pure parsing; thread-safe.
#ifndef KVTIER_REMOTE_REDIS_ADDRESS_H_
#define KVTIER_REMOTE_REDIS_ADDRESS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier {

struct RedisAddress {
  std::string host;
  int port = 6379;

  std::string ToString() const;
  friend bool operator==(const RedisAddress& a, const RedisAddress& b) = default;
};

// "redis://host[:port]" or a seed list "redis://host:port,host:port,..." (the port
// defaults to 6379). Whether the nodes form a cluster is found out when connecting, so one
// seed of a cluster is enough. InvalidArgument naming what is wrong.
absl::StatusOr<std::vector<RedisAddress>> ParseRemoteKvUrl(std::string_view url);

}  // namespace kvtier

#endif  // KVTIER_REMOTE_REDIS_ADDRESS_H_
