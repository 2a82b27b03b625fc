// RemoteBlockStore: the remote KV tier's I/O — cached blocks put into and got from Redis
// (one node or a cluster, RedisClient) on its own I/O thread, so that the stepping thread
// never does network I/O. Puts and gets are queued (each copying what it needs) and sent
// in pipelined batches; a get's value is checked on the I/O thread (remote_value.h) and
// its result (a block's bytes, a miss, or why it is unusable) waits in TakeFinished.
//
// Bounded: the bytes of queued puts and of gets not yet taken never pass
// max_bytes_in_flight (a put or get that would is refused, counted: the block is then
// simply not shared, or recomputed). Every socket operation is bounded by `timeout`.
// Self-healing: a connection failure or timeout switches the tier off (one log line) —
// everything queued fails at once (gets as Unavailable misses, puts dropped) and Put/Get
// refuse — until `retry` has passed; the next Put or Get then tries to connect again
// (a log line when it succeeds). Expiry and memory limits are Redis's own (per-put TTL
// here, `maxmemory` and an LRU policy there).
// Thread-safe: any thread may call the public methods (the KV manager calls them from the
// stepping thread); the I/O thread only runs batches.
#ifndef KVTIER_REMOTE_REMOTE_BLOCK_STORE_H_
#define KVTIER_REMOTE_REMOTE_BLOCK_STORE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/sha256.h"
#include "remote/redis_address.h"
#include "remote/redis_client.h"
#include "remote/remote_value.h"

namespace kvtier {

struct RemoteStoreOptions {
  std::vector<RedisAddress> nodes;  // one node, or a cluster's seeds (ParseRemoteKvUrl)
  RemoteValueFormat format;
  int64_t ttl_seconds = 0;  // per put; 0 = none (Redis's maxmemory policy evicts)
  int64_t max_bytes_in_flight = 64ll << 20;
  std::chrono::milliseconds timeout{100};  // connect and every read/write
  std::chrono::milliseconds retry{5000};   // off this long after a failure
};

class RemoteBlockStore {
 public:
  struct Counters {
    int64_t puts = 0;            // blocks stored
    int64_t put_bytes = 0;       // value bytes stored
    int64_t puts_refused = 0;    // not queued: tier off or max_bytes_in_flight reached
    int64_t put_errors = 0;      // refused by Redis, or lost with a failed connection
    int64_t gets = 0;            // lookups answered (hit, miss or unusable)
    int64_t gets_refused = 0;    // not queued: tier off or max_bytes_in_flight reached
    int64_t hits = 0;            // blocks found and valid
    int64_t misses = 0;          // not in Redis (never stored, expired or evicted)
    int64_t corrupt = 0;         // corrupt or foreign values (detected, not used)
    int64_t token_mismatches = 0;  // values holding the key with other tokens (refused)
    int64_t get_errors = 0;      // refused by Redis, or lost with a failed connection
    int64_t get_bytes = 0;       // block bytes of the hits
    double get_seconds = 0;      // I/O thread time of batches with gets (bandwidth)
    double put_seconds = 0;      // I/O thread time of batches of puts only
    int64_t disables = 0;        // times the tier switched itself off
    int64_t reconnects = 0;      // times it came back after that
    bool on = true;              // not switched off now
    int64_t bytes_in_flight = 0;
  };
  struct GetResult {
    Sha256Digest key;
    absl::Status status;        // OK: bytes hold the block; NotFound: a miss; else unusable
    std::vector<uint8_t> bytes;
  };

  explicit RemoteBlockStore(RemoteStoreOptions options);  // starts the I/O thread
  // Sends what is queued (each batch bounded by the timeout; nothing when off), then joins.
  ~RemoteBlockStore();
  RemoteBlockStore(const RemoteBlockStore&) = delete;
  RemoteBlockStore& operator=(const RemoteBlockStore&) = delete;

  // Queues a put of the block (block_bytes at `block`, copied). Refused (and counted):
  // Unavailable while the tier is off, ResourceExhausted while max_bytes_in_flight is
  // reached (try again once earlier jobs are done).
  absl::Status Put(const Sha256Digest& key, std::span<const int32_t> tokens, const uint8_t* block);
  // Queues a lookup of the block with these tokens; refused as Put is.
  absl::Status Get(const Sha256Digest& key, std::span<const int32_t> tokens);
  // Results of the gets finished since the last call, in submission order.
  std::vector<GetResult> TakeFinished();
  // Blocks until a get has finished (not taken yet), no get is in flight, or `deadline`.
  void WaitForGets(std::chrono::steady_clock::time_point deadline);
  // Blocks until everything queued has been sent and answered (tests, benchmarks).
  void Flush();
  Counters counters() const;
  const RemoteStoreOptions& options() const { return options_; }

 private:
  struct Job {
    bool put = false;
    Sha256Digest key;
    std::vector<int32_t> tokens;  // gets: the tokens expected
    std::string value;            // puts: the encoded value
  };
  // Whether a job of `bytes` may be queued now (see Put).
  absl::Status AcceptLocked(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();
  void RunBatch(std::vector<Job>& batch);
  // Fails the batch and everything queued, and switches the tier off for `retry`.
  void SwitchOff(const absl::Status& why, std::vector<Job>& batch);
  // Ends jobs that were not answered: gets report `why`, puts are lost (under mu_).
  void FailLocked(std::vector<Job>& jobs, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RemoteStoreOptions options_;
  const int64_t block_bytes_;
  RedisClient client_;  // the I/O thread's only
  // std::mutex, not absl::Mutex: TSan sees std's happens-before edges (as in DiskIoThread).
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // a job was queued, or stop_
  std::condition_variable done_cv_;  // a batch ended
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<GetResult> finished_ ABSL_GUARDED_BY(mu_);
  int64_t gets_in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // queued or running, not finished
  bool busy_ ABSL_GUARDED_BY(mu_) = false;           // a batch is running
  bool off_ ABSL_GUARDED_BY(mu_) = false;
  bool was_off_ ABSL_GUARDED_BY(mu_) = false;        // off since the last success
  std::chrono::steady_clock::time_point retry_at_ ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started after every member above is initialised
};

}  // namespace kvtier

#endif  // KVTIER_REMOTE_REMOTE_BLOCK_STORE_H_
