// Implementation of ChunkedPreparer (chunked_preparer.h).
#include "kv/chunked_preparer.h"

#include <algorithm>
#include <utility>

namespace kvtier {

ChunkedPreparer::ChunkedPreparer(int64_t begin, int64_t total, int64_t chunk, PrepareFn prepare)
    : total_(std::max<int64_t>(total, 0)),
      chunk_(std::max<int64_t>(chunk, 1)),
      prepare_(std::move(prepare)),
      ready_(std::clamp<int64_t>(begin, 0, std::max<int64_t>(total, 0))) {
  if (ready_.load() >= total_) {
    done_.store(true, std::memory_order_release);
    return;
  }
  thread_ = std::thread([this] { Run(); });
}

ChunkedPreparer::~ChunkedPreparer() {
  Cancel();
  if (thread_.joinable()) thread_.join();
}

absl::Status ChunkedPreparer::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void ChunkedPreparer::Cancel() {
  cancelled_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(mu_);
  resume_cv_.notify_all();
}

void ChunkedPreparer::Pause() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = true;
}

void ChunkedPreparer::Resume() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = false;
  resume_cv_.notify_all();
}

void ChunkedPreparer::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return done_.load(std::memory_order_acquire); });
}

void ChunkedPreparer::Run() {
  absl::Status failure;
  int64_t begin = ready_.load(std::memory_order_relaxed);
  while (begin < total_ && !cancelled_.load(std::memory_order_acquire)) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      resume_cv_.wait(lock, [this] { return !paused_ || cancelled_.load(std::memory_order_acquire); });
    }
    if (cancelled_.load(std::memory_order_acquire)) break;
    const int64_t end = std::min(total_, (begin / chunk_ + 1) * chunk_);
    failure = prepare_(begin, end);
    if (!failure.ok()) break;
    ready_.store(end, std::memory_order_release);
    begin = end;
  }
  std::lock_guard<std::mutex> lock(mu_);
  status_ = std::move(failure);
  done_.store(true, std::memory_order_release);
  done_cv_.notify_all();
}

}  // namespace kvtier
