// Options of the remote KV tier (a Redis node or cluster shared by every process of a
// service; remote/remote_block_store.h). Plain value type.
#ifndef KVTIER_KV_REMOTE_TIER_OPTIONS_H_
#define KVTIER_KV_REMOTE_TIER_OPTIONS_H_

#include <cstdint>
#include <string>

namespace kvtier {

struct RemoteTierOptions {
  std::string url;                          // remote_kv_url; "" = no remote tier
  int64_t ttl_seconds = 0;                  // per stored block; 0 = Redis's maxmemory policy decides
  int64_t max_bytes_in_flight = 64ll << 20; // queued puts + gets not yet used
  int64_t timeout_ms = 100;                 // connect, every read/write, and a step's wait for a lookup
  int64_t retry_ms = 5000;                  // off this long after a failure, then tried again
  int64_t connections = 4;                  // lookups in parallel, each lane its own connection
};

}  // namespace kvtier

#endif  // KVTIER_KV_REMOTE_TIER_OPTIONS_H_
