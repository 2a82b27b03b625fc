// RemoteBlockStore (remote_block_store.h): queues, the lanes' batches, the tier's health.
#include "remote/remote_block_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace kvtier {
namespace {

// One pipelined batch: at most this many jobs and (past its first job) this many bytes,
// so that results land as they arrive rather than all at the end of a long transfer.
constexpr size_t kMaxBatchJobs = 64;
constexpr int64_t kMaxBatchBytes = 8ll << 20;
// Blocks whose state in Redis is remembered (known_), at most.
constexpr size_t kMaxKnownBlocks = 16384;

}  // namespace

RemoteBlockStore::RemoteBlockStore(RemoteStoreOptions options)
    : options_(std::move(options)), block_bytes_(static_cast<int64_t>(options_.format.block_bytes)) {
  const int get_lanes = std::max(options_.get_connections, 1);
  for (int i = 0; i <= get_lanes; ++i) lanes_.push_back(std::make_unique<Lane>(options_, /*gets=*/i < get_lanes));
  // Every member is initialised: the threads may start.
  for (const std::unique_ptr<Lane>& lane : lanes_) {
    Lane* raw = lane.get();
    lane->thread = std::thread([this, raw] { Run(raw); });
  }
}

RemoteBlockStore::~RemoteBlockStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  get_cv_.notify_all();
  put_cv_.notify_all();
  for (const std::unique_ptr<Lane>& lane : lanes_) lane->thread.join();
}

absl::Status RemoteBlockStore::AcceptLocked(int64_t bytes) {
  if (stop_) return absl::UnavailableError("remote KV tier: closing");
  if (off_) {
    if (std::chrono::steady_clock::now() < retry_at_) return absl::UnavailableError("remote KV tier: off");
    off_ = false;  // time to try again: this job's batch reconnects
  }
  if (!RoomForLocked(bytes)) return absl::ResourceExhaustedError("remote KV tier: max bytes in flight reached");
  return absl::OkStatus();
}

bool RemoteBlockStore::RoomForLocked(int64_t bytes) const {
  return counters_.bytes_in_flight == 0 || counters_.bytes_in_flight + bytes <= options_.max_bytes_in_flight;
}

bool RemoteBlockStore::KnownPresent(const Sha256Digest& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = known_.find(key);
  return it != known_.end() && it->second == Known::kPresent;
}

void RemoteBlockStore::RememberLocked(const Sha256Digest& key, Known known) {
  auto [it, inserted] = known_.insert_or_assign(key, known);
  if (!inserted) return;
  known_order_.push_back(key);
  if (known_order_.size() > kMaxKnownBlocks) {
    known_.erase(known_order_.front());
    known_order_.pop_front();
  }
}

absl::Status RemoteBlockStore::Put(const Sha256Digest& key, std::span<const int32_t> tokens, const uint8_t* block) {
  return QueuePut(key, tokens, block, /*staged=*/false);
}

absl::Status RemoteBlockStore::PutStaged(const Sha256Digest& key, std::span<const int32_t> tokens,
                                         const uint8_t* block) {
  return QueuePut(key, tokens, block, /*staged=*/true);
}

absl::Status RemoteBlockStore::QueuePut(const Sha256Digest& key, std::span<const int32_t> tokens, const uint8_t* block,
                                        bool staged) {
  const int64_t bytes = static_cast<int64_t>(RemoteValueBytes(options_.format));
  bool overwrite = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto known = known_.find(key); known != known_.end()) {
      if (known->second == Known::kPresent) {
        ++counters_.puts_skipped;
        return absl::OkStatus();
      }
      overwrite = true;
    }
    if (absl::Status accepted = AcceptLocked(bytes); !accepted.ok()) {
      ++counters_.puts_refused;
      return accepted;
    }
    counters_.bytes_in_flight += bytes;  // reserved before the copy: the bound holds
  }
  Job job;
  job.put = true;
  job.key = key;
  job.bytes = bytes;
  job.overwrite = overwrite;
  if (staged) {
    job.tokens.assign(tokens.begin(), tokens.end());
    job.staged = block;
    job.hold = StagedHold(&staged_puts_);
  } else {
    job.value = EncodeRemoteValue(options_.format, key, tokens, block);  // outside the lock
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    put_queue_.push_back(std::move(job));
  }
  put_cv_.notify_one();
  return absl::OkStatus();
}

absl::Status RemoteBlockStore::Get(const Sha256Digest& key, std::span<const int32_t> tokens, uint8_t* destination) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Landing in the caller's memory, it holds none of ours: only the tier's state decides.
    const int64_t bytes = destination != nullptr ? 0 : block_bytes_;
    if (absl::Status accepted = AcceptLocked(bytes); !accepted.ok()) {
      ++counters_.gets_refused;
      return accepted;
    }
    counters_.bytes_in_flight += bytes;  // until its result is taken
    ++gets_in_flight_;
    Job job;
    job.key = key;
    job.bytes = bytes;
    job.destination = destination;
    job.tokens.assign(tokens.begin(), tokens.end());
    get_queue_.push_back(std::move(job));
  }
  get_cv_.notify_one();
  return absl::OkStatus();
}

std::vector<RemoteBlockStore::GetResult> RemoteBlockStore::TakeFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const GetResult& result : finished_) {
    if (result.destination == nullptr) counters_.bytes_in_flight -= block_bytes_;
  }
  return std::exchange(finished_, {});
}

absl::StatusOr<std::vector<bool>> RemoteBlockStore::Probe(std::span<const Sha256Digest> keys,
                                                          std::chrono::steady_clock::time_point deadline) {
  if (keys.empty()) return std::vector<bool>();
  auto answer = std::make_shared<ProbeAnswer>();
  std::unique_lock<std::mutex> lock(mu_);
  if (absl::Status accepted = AcceptLocked(0); !accepted.ok()) return accepted;
  Job job;
  job.probe_keys.assign(keys.begin(), keys.end());
  job.probe = answer;
  get_queue_.push_front(std::move(job));  // ahead of the lookups: a plan waits for it
  get_cv_.notify_one();
  if (!done_cv_.wait_until(lock, deadline, [&] { return answer->done; })) {
    return absl::DeadlineExceededError("remote KV tier: no answer to EXISTS in time");
  }
  if (!answer->status.ok()) return answer->status;
  return answer->present;
}

void RemoteBlockStore::WaitForGets(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait_until(lock, deadline, [&] { return !finished_.empty() || gets_in_flight_ == 0; });
}

void RemoteBlockStore::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] {
    return get_queue_.empty() && put_queue_.empty() && get_batches_running_ == 0 && put_batch_jobs_ == 0;
  });
}

bool RemoteBlockStore::WaitForPutRoom(std::chrono::steady_clock::time_point deadline) {
  const int64_t bytes = static_cast<int64_t>(RemoteValueBytes(options_.format));
  std::unique_lock<std::mutex> lock(mu_);
  // A staged block is released inside its batch, and its bytes when the batch ends, before
  // it notifies.
  return done_cv_.wait_until(lock, deadline,
                             [&] { return stop_ || off_ || (staged_puts() == 0 && RoomForLocked(bytes)); });
}

int64_t RemoteBlockStore::puts_pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(put_queue_.size()) + put_batch_jobs_;
}

RemoteBlockStore::Counters RemoteBlockStore::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counters c = counters_;
  c.on = !off_;
  return c;
}

std::vector<RemoteBlockStore::Job> RemoteBlockStore::TakeBatchLocked(std::deque<Job>& queue) {
  std::vector<Job> batch;
  int64_t bytes = 0;
  // A probe is a batch of its own.
  if (!queue.empty() && queue.front().probe != nullptr) {
    batch.push_back(std::move(queue.front()));
    queue.pop_front();
    return batch;
  }
  while (!queue.empty() && batch.size() < kMaxBatchJobs && (batch.empty() || bytes < kMaxBatchBytes) &&
         queue.front().probe == nullptr) {
    // A get's size is its block's, wherever it lands (job.bytes is what it holds of the
    // bound): a batch of 64 in-place gets would land all at once, and make Redis buffer
    // 64 values for one connection.
    bytes += queue.front().put ? queue.front().bytes : block_bytes_;
    batch.push_back(std::move(queue.front()));
    queue.pop_front();
  }
  return batch;
}

void RemoteBlockStore::Run(Lane* lane) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (lane->gets) {
      get_cv_.wait(lock, [&] { return stop_ || !get_queue_.empty(); });
      if (get_queue_.empty()) return;  // stop_, and everything sent
    } else {
      // Puts wait for the lookups (which the stepping thread may be waiting for).
      put_cv_.wait(lock, [&] { return (stop_ && put_queue_.empty()) || PutsMayRunLocked(); });
      if (put_queue_.empty()) return;
    }
    std::vector<Job> batch = TakeBatchLocked(lane->gets ? get_queue_ : put_queue_);
    // A probe is no lookup: its time does not count toward the bandwidth.
    const bool probe = batch.front().probe != nullptr;
    if (lane->gets && !probe) {
      if (get_batches_running_++ == 0) get_time_mark_ = std::chrono::steady_clock::now();
    } else if (!lane->gets) {
      put_batch_jobs_ = static_cast<int64_t>(batch.size());
    }
    bool answered = false;
    const auto start = std::chrono::steady_clock::now();
    if (off_) {  // switched off while these waited: fail them without trying
      FailLocked(batch, absl::UnavailableError("remote KV tier is off"));
    } else {
      const int64_t generation = generation_;
      lock.unlock();
      if (EnsureConnected(lane, generation, batch)) {
        if (probe) {
          RunProbe(lane, batch);
        } else {
          answered = lane->gets ? RunGets(lane, batch) : RunPuts(lane, batch);
        }
      }
      lock.lock();
    }
    const auto now = std::chrono::steady_clock::now();
    if (lane->gets && !probe) {
      // The time since the last lookup batch ended (or since they got busy): counted once.
      if (answered) counters_.get_seconds += std::chrono::duration<double>(now - get_time_mark_).count();
      get_time_mark_ = now;
      --get_batches_running_;
    } else if (!lane->gets) {
      if (answered) counters_.put_seconds += std::chrono::duration<double>(now - start).count();
      put_batch_jobs_ = 0;
    }
    // Whatever batch ended (a lookup batch, or a probe that held the lookup queue), puts
    // waiting for the lookups may run now: without this wake-up a put lane slept with puts
    // queued until the next lookup batch, and Flush (a context's free) waited forever.
    if (PutsMayRunLocked()) put_cv_.notify_one();
    done_cv_.notify_all();
  }
}

bool RemoteBlockStore::EnsureConnected(Lane* lane, int64_t generation, std::vector<Job>& batch) {
  if (lane->client.connected() && lane->generation == generation) return true;
  lane->client.Disconnect();  // made before the tier last went off: maybe to a dead server
  lane->generation = generation;
  if (absl::Status connected = lane->client.Connect(); !connected.ok()) {
    SwitchOff(lane, connected, batch);
    return false;
  }
  return true;
}

void RemoteBlockStore::FailLocked(std::vector<Job>& jobs, const absl::Status& why) {
  for (Job& job : jobs) {
    if (job.probe != nullptr) {
      job.probe->done = true;
      job.probe->status = why;
    } else if (job.put) {
      ++counters_.put_errors;
      counters_.bytes_in_flight -= job.bytes;
    } else {
      ++counters_.get_errors;
      --gets_in_flight_;
      finished_.push_back({job.key, why, {}, job.destination});
    }
  }
  jobs.clear();
}

void RemoteBlockStore::SwitchOff(Lane* lane, const absl::Status& why, std::vector<Job>& batch) {
  lane->client.Disconnect();
  std::lock_guard<std::mutex> lock(mu_);
  FailLocked(batch, why);
  for (std::deque<Job>* queue : {&get_queue_, &put_queue_}) {
    std::vector<Job> queued(std::make_move_iterator(queue->begin()), std::make_move_iterator(queue->end()));
    queue->clear();
    FailLocked(queued, why);
  }
  if (!off_ && !was_off_) ++counters_.disables;
  if (!was_off_) {
    Log(LogLevel::kWarn, "remote KV tier: ", why.message(), "; switched off, retried in ", options_.retry.count(),
        " ms (its blocks are recomputed meanwhile)");
  }
  off_ = true;
  was_off_ = true;
  ++generation_;  // the other lanes reconnect before their next batch
  known_.clear();  // Redis may come back empty
  known_order_.clear();
  retry_at_ = std::chrono::steady_clock::now() + options_.retry;
}

void RemoteBlockStore::NoteReachableLocked() {
  if (!was_off_) return;
  was_off_ = false;
  ++counters_.reconnects;
  Log(LogLevel::kInfo, "remote KV tier: reachable again; back on");
}

bool RemoteBlockStore::RunGets(Lane* lane, std::vector<Job>& batch) {
  std::vector<RedisCommand> commands;
  commands.reserve(batch.size());
  for (const Job& job : batch) commands.push_back({{"GET", RemoteKeyOf(job.key)}});
  // A value of the expected size is received in two parts, in place: its header here, its
  // payload in the result's bytes (checked there; no other copy).
  const size_t header_bytes = RemoteValueHeaderBytes(options_.format);
  const size_t value_bytes = RemoteValueBytes(options_.format);
  std::vector<GetResult> results(batch.size());
  std::vector<std::vector<uint8_t>> headers(batch.size());
  const BulkDestination destination = [&](size_t i, size_t length) -> std::vector<std::span<uint8_t>> {
    if (length != value_bytes) return {};  // a wrong size: refused below, from the reply
    headers[i].resize(header_bytes);
    if (batch[i].destination != nullptr) {
      return {std::span<uint8_t>(headers[i]), std::span<uint8_t>(batch[i].destination, static_cast<size_t>(block_bytes_))};
    }
    results[i].bytes.resize(static_cast<size_t>(block_bytes_));
    return {std::span<uint8_t>(headers[i]), std::span<uint8_t>(results[i].bytes)};
  };
  std::vector<RedisReply> replies;
  if (absl::Status executed = lane->client.Execute(commands, &replies, destination); !executed.ok()) {
    SwitchOff(lane, executed, batch);
    return false;
  }
  // Values checked outside the lock.
  std::string first_error;
  int64_t hits = 0, misses = 0, corrupt = 0, mismatches = 0, errors = 0;
  std::vector<Known> known(batch.size(), Known::kPresent);
  for (size_t i = 0; i < batch.size(); ++i) {
    const RedisReply& reply = replies[i];
    GetResult& result = results[i];
    result.key = batch[i].key;
    result.destination = batch[i].destination;
    const std::span<const uint8_t> payload =
        result.destination != nullptr ? std::span<const uint8_t>(result.destination, static_cast<size_t>(block_bytes_))
                                      : std::span<const uint8_t>(result.bytes);
    if (reply.kind == RedisReply::Kind::kNil) {
      result.status = absl::NotFoundError("not in the remote tier");
      ++misses;
    } else if (reply.kind != RedisReply::Kind::kString) {
      if (first_error.empty()) first_error = reply.str;
      result.status = absl::UnavailableError(absl::StrCat("redis: ", reply.str));
      ++errors;
    } else {
      if (reply.in_destination) {
        result.status = CheckRemoteValue(options_.format, headers[i], payload, batch[i].key, batch[i].tokens);
      } else {
        result.status = absl::DataLossError(absl::StrCat("value of ", reply.str.size(), " bytes, not ", value_bytes));
      }
      if (result.status.ok()) {
        ++hits;
      } else {
        result.bytes.clear();
        known[i] = Known::kBad;
        if (absl::IsFailedPrecondition(result.status)) {
          ++mismatches;
        } else {
          ++corrupt;
        }
        Log(LogLevel::kWarn, "remote KV tier: value of ", RemoteKeyOf(batch[i].key).substr(0, 29), "...: ",
            result.status.message(), "; not used (the block is recomputed)");
      }
    }
  }
  if (!first_error.empty()) Log(LogLevel::kWarn, "remote KV tier: redis replied: ", first_error);
  std::lock_guard<std::mutex> lock(mu_);
  NoteReachableLocked();
  for (size_t i = 0; i < batch.size(); ++i) {
    if (replies[i].kind == RedisReply::Kind::kString) RememberLocked(batch[i].key, known[i]);
  }
  counters_.hits += hits;
  counters_.misses += misses;
  counters_.corrupt += corrupt;
  counters_.token_mismatches += mismatches;
  counters_.get_errors += errors;
  counters_.gets += static_cast<int64_t>(results.size());
  counters_.get_bytes += hits * block_bytes_;
  gets_in_flight_ -= static_cast<int64_t>(results.size());
  for (GetResult& result : results) finished_.push_back(std::move(result));
  return true;
}

bool RemoteBlockStore::RunProbe(Lane* lane, std::vector<Job>& batch) {
  Job& job = batch.front();
  std::vector<RedisCommand> commands;
  commands.reserve(job.probe_keys.size());
  for (const Sha256Digest& key : job.probe_keys) commands.push_back({{"EXISTS", RemoteKeyOf(key)}});
  std::vector<RedisReply> replies;
  if (absl::Status executed = lane->client.Execute(commands, &replies); !executed.ok()) {
    SwitchOff(lane, executed, batch);
    return false;
  }
  std::vector<bool> present(job.probe_keys.size(), false);
  for (size_t i = 0; i < present.size(); ++i) {
    present[i] = replies[i].kind == RedisReply::Kind::kInteger && replies[i].integer == 1;
  }
  std::lock_guard<std::mutex> lock(mu_);
  NoteReachableLocked();
  for (size_t i = 0; i < present.size(); ++i) {
    // (A value known bad stays so: its put overwrites it.)
    if (present[i] && !known_.contains(job.probe_keys[i])) RememberLocked(job.probe_keys[i], Known::kPresent);
  }
  job.probe->present = std::move(present);
  job.probe->done = true;
  batch.clear();
  return true;
}

bool RemoteBlockStore::RunPuts(Lane* lane, std::vector<Job>& batch) {
  // First which blocks Redis holds (EXPIRE renews their TTL where there is one), then the
  // others' values.
  const std::string ttl = absl::StrCat(options_.ttl_seconds);
  std::vector<RedisCommand> probes;
  std::vector<size_t> probed;  // batch index of each probe
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].overwrite) continue;
    probes.push_back(options_.ttl_seconds > 0 ? RedisCommand{{"EXPIRE", RemoteKeyOf(batch[i].key), ttl}}
                                              : RedisCommand{{"EXISTS", RemoteKeyOf(batch[i].key)}});
    probed.push_back(i);
  }
  std::vector<bool> present(batch.size(), false);
  std::vector<RedisReply> replies;
  if (!probes.empty()) {
    if (absl::Status executed = lane->client.Execute(probes, &replies); !executed.ok()) {
      SwitchOff(lane, executed, batch);
      return false;
    }
    for (size_t p = 0; p < probes.size(); ++p) {
      present[probed[p]] = replies[p].kind == RedisReply::Kind::kInteger && replies[p].integer == 1;
    }
  }
  // Staged blocks are encoded here, off the caller's thread (those Redis holds need not be).
  for (size_t i = 0; i < batch.size(); ++i) {
    Job& job = batch[i];
    if (job.staged == nullptr) continue;
    if (!present[i]) job.value = EncodeRemoteValue(options_.format, job.key, job.tokens, job.staged);
    job.staged = nullptr;
    job.hold.Release();
  }
  std::vector<RedisCommand> sets;
  std::vector<size_t> set_of;  // batch index of each SET
  for (size_t i = 0; i < batch.size(); ++i) {
    if (present[i]) continue;
    RedisCommand command{{"SET", RemoteKeyOf(batch[i].key), std::move(batch[i].value)}};
    if (options_.ttl_seconds > 0) {
      command.args.push_back("EX");
      command.args.push_back(ttl);
    }
    sets.push_back(std::move(command));
    set_of.push_back(i);
  }
  if (!sets.empty()) {
    if (absl::Status executed = lane->client.Execute(sets, &replies); !executed.ok()) {
      SwitchOff(lane, executed, batch);
      return false;
    }
  }
  std::string first_error;
  int64_t puts = 0, stored_bytes = 0, put_errors = 0, in_flight = 0;
  std::vector<bool> stored(batch.size(), false);
  for (size_t s = 0; s < sets.size(); ++s) {
    if (replies[s].kind == RedisReply::Kind::kStatus) {
      ++puts;
      stored_bytes += static_cast<int64_t>(sets[s].args[2].size());
      stored[set_of[s]] = true;
    } else {
      ++put_errors;
      if (first_error.empty()) first_error = replies[s].str;
    }
  }
  if (!first_error.empty()) Log(LogLevel::kWarn, "remote KV tier: redis replied: ", first_error);
  std::lock_guard<std::mutex> lock(mu_);
  NoteReachableLocked();
  for (size_t i = 0; i < batch.size(); ++i) {
    in_flight += batch[i].bytes;
    if (present[i] || stored[i]) RememberLocked(batch[i].key, Known::kPresent);
  }
  counters_.puts += puts;
  counters_.put_bytes += stored_bytes;
  counters_.puts_skipped += static_cast<int64_t>(std::count(present.begin(), present.end(), true));
  counters_.put_errors += put_errors;
  counters_.bytes_in_flight -= in_flight;
  return true;
}

}  // namespace kvtier
