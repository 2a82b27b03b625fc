// RemoteBlockStore (remote_block_store.h): queues, the I/O thread's batches, the tier's
// health.
#include "remote/remote_block_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace kvtier {
namespace {

// One pipelined batch: at most this many jobs and (past its first job) this many bytes,
// so that results land as they arrive rather than all at the end of a long transfer.
constexpr size_t kMaxBatchJobs = 64;
constexpr int64_t kMaxBatchBytes = 8ll << 20;

}  // namespace

RemoteBlockStore::RemoteBlockStore(RemoteStoreOptions options)
    : options_(std::move(options)),
      block_bytes_(static_cast<int64_t>(options_.format.block_bytes)),
      client_(options_.nodes, options_.timeout),
      thread_([this] { Run(); }) {}

RemoteBlockStore::~RemoteBlockStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

absl::Status RemoteBlockStore::AcceptLocked(int64_t bytes) {
  if (stop_) return absl::UnavailableError("remote KV tier: closing");
  if (off_) {
    if (std::chrono::steady_clock::now() < retry_at_) return absl::UnavailableError("remote KV tier: off");
    off_ = false;  // time to try again: this job's batch reconnects
  }
  if (counters_.bytes_in_flight + bytes > options_.max_bytes_in_flight && counters_.bytes_in_flight > 0) {
    return absl::ResourceExhaustedError("remote KV tier: max bytes in flight reached");
  }
  return absl::OkStatus();
}

absl::Status RemoteBlockStore::Put(const Sha256Digest& key, std::span<const int32_t> tokens, const uint8_t* block) {
  const int64_t bytes = static_cast<int64_t>(RemoteValueBytes(options_.format));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (absl::Status accepted = AcceptLocked(bytes); !accepted.ok()) {
      ++counters_.puts_refused;
      return accepted;
    }
    counters_.bytes_in_flight += bytes;  // reserved before the copy: the bound holds
  }
  Job job;
  job.put = true;
  job.key = key;
  job.value = EncodeRemoteValue(options_.format, key, tokens, block);  // outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  work_cv_.notify_one();
  return absl::OkStatus();
}

absl::Status RemoteBlockStore::Get(const Sha256Digest& key, std::span<const int32_t> tokens) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (absl::Status accepted = AcceptLocked(block_bytes_); !accepted.ok()) {
      ++counters_.gets_refused;
      return accepted;
    }
    counters_.bytes_in_flight += block_bytes_;  // until its result is taken
    ++gets_in_flight_;
    Job job;
    job.key = key;
    job.tokens.assign(tokens.begin(), tokens.end());
    queue_.push_back(std::move(job));
  }
  work_cv_.notify_one();
  return absl::OkStatus();
}

std::vector<RemoteBlockStore::GetResult> RemoteBlockStore::TakeFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.bytes_in_flight -= block_bytes_ * static_cast<int64_t>(finished_.size());
  return std::exchange(finished_, {});
}

void RemoteBlockStore::WaitForGets(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait_until(lock, deadline, [&] { return !finished_.empty() || gets_in_flight_ == 0; });
}

void RemoteBlockStore::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

RemoteBlockStore::Counters RemoteBlockStore::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counters c = counters_;
  c.on = !off_;
  return c;
}

void RemoteBlockStore::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and everything sent
    std::vector<Job> batch;
    int64_t bytes = 0;
    while (!queue_.empty() && batch.size() < kMaxBatchJobs && (batch.empty() || bytes < kMaxBatchBytes)) {
      bytes += queue_.front().put ? static_cast<int64_t>(queue_.front().value.size()) : block_bytes_;
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    busy_ = true;
    if (off_) {  // switched off while these waited: fail them without trying
      FailLocked(batch, absl::UnavailableError("remote KV tier is off"));
    } else {
      lock.unlock();
      RunBatch(batch);
      lock.lock();
    }
    busy_ = false;
    done_cv_.notify_all();
  }
}

void RemoteBlockStore::FailLocked(std::vector<Job>& jobs, const absl::Status& why) {
  for (Job& job : jobs) {
    if (job.put) {
      ++counters_.put_errors;
      counters_.bytes_in_flight -= static_cast<int64_t>(job.value.size());
    } else {
      ++counters_.get_errors;
      --gets_in_flight_;
      finished_.push_back({job.key, why, {}});
    }
  }
  jobs.clear();
}

void RemoteBlockStore::SwitchOff(const absl::Status& why, std::vector<Job>& batch) {
  client_.Disconnect();
  std::lock_guard<std::mutex> lock(mu_);
  FailLocked(batch, why);
  std::vector<Job> queued(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  FailLocked(queued, why);
  if (!off_ && !was_off_) ++counters_.disables;
  if (!was_off_) {
    Log(LogLevel::kWarn, "remote KV tier: ", why.message(), "; switched off, retried in ", options_.retry.count(),
        " ms (its blocks are recomputed meanwhile)");
  }
  off_ = true;
  was_off_ = true;
  retry_at_ = std::chrono::steady_clock::now() + options_.retry;
}

void RemoteBlockStore::RunBatch(std::vector<Job>& batch) {
  if (!client_.connected()) {
    if (absl::Status connected = client_.Connect(); !connected.ok()) {
      SwitchOff(connected, batch);
      return;
    }
  }
  std::vector<RedisCommand> commands;
  commands.reserve(batch.size());
  bool has_gets = false;
  const std::string ttl = absl::StrCat(options_.ttl_seconds);
  for (Job& job : batch) {
    if (job.put) {
      RedisCommand command{{"SET", RemoteKeyOf(job.key), std::move(job.value)}};
      if (options_.ttl_seconds > 0) {
        command.args.push_back("EX");
        command.args.push_back(ttl);
      }
      job.value.clear();  // moved: its size is the command's now
      commands.push_back(std::move(command));
    } else {
      has_gets = true;
      commands.push_back({{"GET", RemoteKeyOf(job.key)}});
    }
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<RedisReply> replies;
  const absl::Status executed = client_.Execute(commands, &replies);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!executed.ok()) {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].put) batch[i].value = std::move(commands[i].args[2]);  // for the byte count
    }
    SwitchOff(executed, batch);
    return;
  }
  // Values checked outside the lock.
  std::vector<GetResult> results;
  std::string first_error;
  int64_t puts = 0, put_bytes = 0, stored_bytes = 0, put_errors = 0, hits = 0, misses = 0, corrupt = 0, mismatches = 0, errors = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const RedisReply& reply = replies[i];
    if (reply.kind == RedisReply::Kind::kError && first_error.empty()) first_error = reply.str;
    if (batch[i].put) {
      const int64_t bytes = static_cast<int64_t>(commands[i].args[2].size());
      put_bytes += bytes;
      if (reply.kind == RedisReply::Kind::kStatus) {
        ++puts;
        stored_bytes += bytes;
      } else {
        ++put_errors;
      }
      continue;
    }
    GetResult result{batch[i].key, absl::OkStatus(), {}};
    if (reply.kind == RedisReply::Kind::kNil) {
      result.status = absl::NotFoundError("not in the remote tier");
      ++misses;
    } else if (reply.kind != RedisReply::Kind::kString) {
      result.status = absl::UnavailableError(absl::StrCat("redis: ", reply.str));
      ++errors;
    } else {
      result.bytes.resize(static_cast<size_t>(block_bytes_));
      result.status = DecodeRemoteValue(options_.format, reply.str, batch[i].key, batch[i].tokens, result.bytes.data());
      if (result.status.ok()) {
        ++hits;
      } else {
        result.bytes.clear();
        if (absl::IsFailedPrecondition(result.status)) {
          ++mismatches;
        } else {
          ++corrupt;
        }
        Log(LogLevel::kWarn, "remote KV tier: value of ", RemoteKeyOf(batch[i].key).substr(0, 29), "...: ",
            result.status.message(), "; not used (the block is recomputed)");
      }
    }
    results.push_back(std::move(result));
  }
  if (!first_error.empty()) Log(LogLevel::kWarn, "remote KV tier: redis replied: ", first_error);
  std::lock_guard<std::mutex> lock(mu_);
  if (was_off_) {
    was_off_ = false;
    ++counters_.reconnects;
    Log(LogLevel::kInfo, "remote KV tier: reachable again; back on");
  }
  counters_.puts += puts;
  counters_.put_bytes += stored_bytes;
  counters_.put_errors += put_errors;
  counters_.bytes_in_flight -= put_bytes;
  counters_.hits += hits;
  counters_.misses += misses;
  counters_.corrupt += corrupt;
  counters_.token_mismatches += mismatches;
  counters_.get_errors += errors;
  counters_.gets += static_cast<int64_t>(results.size());
  counters_.get_bytes += hits * block_bytes_;
  (has_gets ? counters_.get_seconds : counters_.put_seconds) += seconds;
  gets_in_flight_ -= static_cast<int64_t>(results.size());
  for (GetResult& result : results) finished_.push_back(std::move(result));
}

}  // namespace kvtier
