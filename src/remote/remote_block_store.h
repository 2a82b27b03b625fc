// RemoteBlockStore: the remote KV tier's I/O — cached blocks put into and got from Redis
// (one node or a cluster, RedisClient) on I/O threads of its own, so that the stepping
// thread never does network I/O. Lookups (gets) run on `get_connections` lanes in
// parallel, each a thread with its own connections, taking pipelined batches from one
// queue; a get's value is received straight into its result's bytes and checked there
// (remote_value.h) — or into memory the caller gives (a host-tier slot), in place — and its
// result (a block's bytes, a miss, or why it is unusable) waits in TakeFinished. A probe
// (EXISTS for many keys, one pipeline, ahead of the queued lookups) says which blocks Redis
// holds before a load plan counts on them. Puts run on one more lane, after the lookups: a put batch starts only
// while no lookup is queued or running, so a context's own puts never delay its prefix.
// A put of a block known to be in Redis (a lookup found it, or this store stored it) is
// skipped; the put lane asks Redis first (EXISTS, or EXPIRE with a TTL, which renews it)
// and sends only the blocks Redis lacks (a value found corrupt is overwritten).
//
// Bounded: the bytes of queued puts and of gets not yet taken (those with no destination)
// never pass max_bytes_in_flight (a put or get that would is refused, counted: the block is then
// simply not shared, or recomputed). Every socket operation is bounded by `timeout`.
// Self-healing: a connection failure or timeout switches the tier off (one log line) —
// everything queued fails at once (gets as Unavailable misses, puts dropped) and Put/Get
// refuse — until `retry` has passed; the next Put or Get then tries to connect again
// (a log line when it succeeds). Expiry and memory limits are Redis's own (per-put TTL
// here, `maxmemory` and an LRU policy there).
// Thread-safe: any thread may call the public methods (the KV manager calls them from the
// stepping thread); the lanes only run batches.
#ifndef KVTIER_REMOTE_REMOTE_BLOCK_STORE_H_
#define KVTIER_REMOTE_REMOTE_BLOCK_STORE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/sha256.h"
#include "remote/redis_address.h"
#include "remote/redis_client.h"
#include "remote/remote_block_bytes.h"
#include "remote/remote_value.h"

namespace kvtier {

struct RemoteStoreOptions {
  std::vector<RedisAddress> nodes;  // one node, or a cluster's seeds (ParseRemoteKvUrl)
  RemoteValueFormat format;
  int64_t ttl_seconds = 0;  // per put; 0 = none (Redis's maxmemory policy evicts)
  int64_t max_bytes_in_flight = 64ll << 20;
  std::chrono::milliseconds timeout{100};  // connect and every read/write
  std::chrono::milliseconds retry{5000};   // off this long after a failure
  int get_connections = 4;  // lookup lanes in parallel (each a thread with its own connections)
};

class RemoteBlockStore {
 public:
  struct Counters {
    int64_t puts = 0;            // blocks stored
    int64_t put_bytes = 0;       // value bytes stored
    int64_t puts_refused = 0;    // not queued: tier off or max_bytes_in_flight reached
    int64_t puts_skipped = 0;    // not sent: the block is in Redis already
    int64_t put_errors = 0;      // refused by Redis, or lost with a failed connection
    int64_t gets = 0;            // lookups answered (hit, miss or unusable)
    int64_t gets_refused = 0;    // not queued: tier off or max_bytes_in_flight reached
    int64_t hits = 0;            // blocks found and valid
    int64_t misses = 0;          // not in Redis (never stored, expired or evicted)
    int64_t corrupt = 0;         // corrupt or foreign values (detected, not used)
    int64_t token_mismatches = 0;  // values holding the key with other tokens (refused)
    int64_t get_errors = 0;      // refused by Redis, or lost with a failed connection
    int64_t get_bytes = 0;       // block bytes of the hits
    double get_seconds = 0;      // time at least one lookup batch was running (bandwidth)
    double put_seconds = 0;      // time put batches were running
    int64_t disables = 0;        // times the tier switched itself off
    int64_t reconnects = 0;      // times it came back after that
    bool on = true;              // not switched off now
    int64_t bytes_in_flight = 0;
  };
  struct GetResult {
    Sha256Digest key;
    absl::Status status;        // OK: bytes (or the get's destination) hold the block; NotFound: a miss; else unusable
    RemoteBlockBytes bytes;     // empty for a get with a destination
    uint8_t* destination = nullptr;  // the get's destination, if it had one
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
  // Put without the copy: the value is encoded (copied, checksummed) on the put lane, so the
  // caller's thread pays nothing per byte. `block` must stay valid and unchanged until
  // staged_puts() is 0 again (its value encoded, or the put dropped).
  absl::Status PutStaged(const Sha256Digest& key, std::span<const int32_t> tokens, const uint8_t* block);
  int64_t staged_puts() const { return staged_puts_.load(std::memory_order_acquire); }
  // Blocks until another put would be accepted (staged_puts() is 0 and max_bytes_in_flight
  // has room for one more value; or the tier is off, which refuses it at once) or
  // `deadline`; whether it would. The put buffer being free is not enough: its last batch
  // may still be on the wire, holding the bytes a put needs.
  bool WaitForPutRoom(std::chrono::steady_clock::time_point deadline);
  // Queues a lookup of the block with these tokens; refused as Put is. With a
  // `destination` (block_bytes, the caller's, valid until its result is taken or the store
  // is destroyed), the block's bytes are received there, in place, and count nothing
  // toward max_bytes_in_flight (the caller's memory bounds them); a value found unusable
  // may have left anything there.
  absl::Status Get(const Sha256Digest& key, std::span<const int32_t> tokens, uint8_t* destination = nullptr);
  // Which of `keys` Redis holds (one pipelined EXISTS, ahead of the queued lookups), in
  // order; waits at most until `deadline` (DeadlineExceeded), Unavailable when the tier is
  // off or fails meanwhile. Blocks found are remembered as present (their puts skipped).
  absl::StatusOr<std::vector<bool>> Probe(std::span<const Sha256Digest> keys,
                                          std::chrono::steady_clock::time_point deadline);
  // Results of the gets finished since the last call, in the order they finished.
  std::vector<GetResult> TakeFinished();
  // Blocks until a get has finished (not taken yet), no get is in flight, or `deadline`.
  void WaitForGets(std::chrono::steady_clock::time_point deadline);
  // Blocks until everything queued has been sent and answered (tests, benchmarks).
  void Flush();
  Counters counters() const;
  // Puts queued or being sent (blocks): the writes a caller may wait for before it
  // measures something the put lane would share Redis with.
  int64_t puts_pending() const;
  // Whether the block is known to be in Redis (found by a lookup, or stored, here): its
  // put would be skipped.
  bool KnownPresent(const Sha256Digest& key) const;
  const RemoteStoreOptions& options() const { return options_; }

 private:
  // A Probe's answer, shared with the caller (who may have stopped waiting).
  struct ProbeAnswer {
    bool done = false;
    absl::Status status;
    std::vector<bool> present;
  };
  // A staged put's hold on its caller's memory: released once the value is encoded, or when
  // the job is dropped unsent.
  class StagedHold {
   public:
    StagedHold() = default;
    explicit StagedHold(std::atomic<int64_t>* count) : count_(count) { count_->fetch_add(1, std::memory_order_relaxed); }
    StagedHold(StagedHold&& other) noexcept : count_(std::exchange(other.count_, nullptr)) {}
    StagedHold& operator=(StagedHold&& other) noexcept {
      Release();
      count_ = std::exchange(other.count_, nullptr);
      return *this;
    }
    ~StagedHold() { Release(); }
    void Release() {
      if (count_ != nullptr) std::exchange(count_, nullptr)->fetch_sub(1, std::memory_order_release);
    }

   private:
    std::atomic<int64_t>* count_ = nullptr;
  };
  struct Job {
    bool put = false;
    std::vector<Sha256Digest> probe_keys;       // a Probe: its keys (and no other work)
    std::shared_ptr<ProbeAnswer> probe;         // a Probe: where its answer goes
    uint8_t* destination = nullptr;             // gets: where the block's bytes land, if given
    Sha256Digest key;
    std::vector<int32_t> tokens;  // gets: the tokens expected
    std::string value;            // puts: the encoded value
    const uint8_t* staged = nullptr;  // staged puts: the block, until value is encoded
    StagedHold hold;                  // staged puts: on `staged`
    int64_t bytes = 0;            // counted in bytes_in_flight while queued or running
    bool overwrite = false;       // puts: Redis holds a bad value under the key: no EXISTS
  };
  // A thread and its Redis connections: one of the lookup lanes, or the put lane.
  struct Lane {
    Lane(const RemoteStoreOptions& options, bool gets) : client(options.nodes, options.timeout), gets(gets) {}
    RedisClient client;     // its thread's only
    const bool gets;
    int64_t generation = 0;  // the store's generation_ its connections were made in
    std::thread thread;
  };
  enum class Known { kPresent, kBad };

  // Put and PutStaged: `staged`, whether the lane encodes the value from `block`.
  absl::Status QueuePut(const Sha256Digest& key, std::span<const int32_t> tokens, const uint8_t* block, bool staged);
  // Whether a job of `bytes` may be queued now (see Put).
  absl::Status AcceptLocked(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `bytes` more fit under max_bytes_in_flight (one job always fits when none is).
  bool RoomForLocked(int64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(Lane* lane);
  // Takes the next batch off `queue` (at most kMaxBatchJobs, and kMaxBatchBytes past the first).
  std::vector<Job> TakeBatchLocked(std::deque<Job>& queue) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Connects the lane if it is not (or was connected before the tier last went off);
  // false when that failed (the batch then failed, the tier switched off).
  bool EnsureConnected(Lane* lane, int64_t generation, std::vector<Job>& batch);
  // The batch's work; true when Redis answered (so its time counts toward the bandwidth).
  bool RunGets(Lane* lane, std::vector<Job>& batch);
  bool RunProbe(Lane* lane, std::vector<Job>& batch);  // a batch of one probe
  bool RunPuts(Lane* lane, std::vector<Job>& batch);
  // Fails the batch and everything queued, and switches the tier off for `retry`.
  void SwitchOff(Lane* lane, const absl::Status& why, std::vector<Job>& batch);
  // Ends jobs that were not answered: gets report `why`, puts are lost (under mu_).
  void FailLocked(std::vector<Job>& jobs, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A batch was answered: the tier is back if it was off.
  void NoteReachableLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberLocked(const Sha256Digest& key, Known known) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PutsMayRunLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !put_queue_.empty() && get_queue_.empty() && get_batches_running_ == 0;
  }

  const RemoteStoreOptions options_;
  const int64_t block_bytes_;
  // std::mutex, not absl::Mutex: TSan sees std's happens-before edges (as in DiskIoThread).
  mutable std::mutex mu_;
  std::condition_variable get_cv_;   // a lookup was queued, or stop_
  std::condition_variable put_cv_;   // a put was queued, lookups went idle, or stop_
  std::condition_variable done_cv_;  // a batch ended
  std::deque<Job> get_queue_ ABSL_GUARDED_BY(mu_);
  std::deque<Job> put_queue_ ABSL_GUARDED_BY(mu_);
  std::vector<GetResult> finished_ ABSL_GUARDED_BY(mu_);
  int64_t gets_in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // queued or running, not finished
  int get_batches_running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t put_batch_jobs_ ABSL_GUARDED_BY(mu_) = 0;  // the running put batch's (0: none runs)
  std::atomic<int64_t> staged_puts_{0};  // staged puts whose block is not encoded yet
  // The lookup lanes' busy time is counted once however many run: up to here so far.
  std::chrono::steady_clock::time_point get_time_mark_ ABSL_GUARDED_BY(mu_);
  bool off_ ABSL_GUARDED_BY(mu_) = false;
  bool was_off_ ABSL_GUARDED_BY(mu_) = false;        // off since the last success
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;      // times switched off: stale connections
  std::chrono::steady_clock::time_point retry_at_ ABSL_GUARDED_BY(mu_);
  // Blocks whose state in Redis is known (bounded, oldest forgotten first; cleared when
  // the tier goes off: Redis may have restarted empty).
  std::map<Sha256Digest, Known> known_ ABSL_GUARDED_BY(mu_);
  std::deque<Sha256Digest> known_order_ ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Lane>> lanes_;  // started last, in the constructor's body
};

}  // namespace kvtier

#endif  // KVTIER_REMOTE_REMOTE_BLOCK_STORE_H_
