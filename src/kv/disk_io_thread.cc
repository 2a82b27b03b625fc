// DiskIoThread (disk_io_thread.h): a FIFO of block reads and writes drained by one or more
// threads, its results reported in submission order. The mutex guards only the queue and
// the results; the I/O itself runs unlocked.
#include "kv/disk_io_thread.h"

#include <algorithm>
#include <utility>

#include "storage/disk_block_store.h"

namespace kvtier {

DiskIoThread::DiskIoThread(DiskBlockStore* store, int num_threads) : store_(store) {
  for (int i = 0; i < std::max(num_threads, 1); ++i) threads_.emplace_back([this] { Run(); });
}

DiskIoThread::~DiskIoThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

int64_t DiskIoThread::Submit(Job job) {
  const int64_t id = job.id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  work_cv_.notify_one();
  return id;
}

int64_t DiskIoThread::SubmitWrite(int64_t slot, const Sha256Digest& key, std::span<const int32_t> tokens,
                                  const void* data, DiskBlockStore::Content content) {
  Job job;
  job.id = ++last_submitted_;
  job.write = true;
  job.slot = slot;
  job.key = key;
  job.tokens.assign(tokens.begin(), tokens.end());
  job.content = content;
  job.data = data;
  return Submit(std::move(job));
}

int64_t DiskIoThread::SubmitRead(int64_t slot, const Sha256Digest& key, std::span<const int32_t> tokens, void* dest) {
  Job job;
  job.id = ++last_submitted_;
  job.slot = slot;
  job.key = key;
  job.tokens.assign(tokens.begin(), tokens.end());
  job.dest = dest;
  return Submit(std::move(job));
}

int64_t DiskIoThread::SubmitProbe(int64_t slot) {
  Job job;
  job.id = ++last_submitted_;
  job.probe = true;
  job.slot = slot;
  return Submit(std::move(job));
}

std::vector<DiskIoThread::Finished> DiskIoThread::TakeFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(finished_, {});
}

int64_t DiskIoThread::num_unfinished() {
  std::lock_guard<std::mutex> lock(mu_);
  return last_submitted_ - last_finished_;
}

void DiskIoThread::Wait(int64_t job) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return last_finished_ >= job; });
}

bool DiskIoThread::CanStartFront() const {
  if (queue_.empty() || write_running_) return false;
  return !queue_.front().write || running_ == 0;  // a write waits for every job before it
}

void DiskIoThread::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return (stop_ && queue_.empty()) || CanStartFront(); });
    if (queue_.empty()) return;  // stop_ and nothing left: queued jobs always run first
    // Writes queued back to back go to the store together: one sync of the slot file and one
    // of the journal for all of them (group commit), so a backlog drains faster, not slower.
    std::vector<Job> jobs;
    do {
      jobs.push_back(std::move(queue_.front()));
      queue_.pop_front();
    } while (jobs.front().write && !queue_.empty() && queue_.front().write && jobs.size() < kMaxWriteBatch);
    ++running_;
    write_running_ = jobs.front().write;
    // Another thread may take the next job now (a read after a read).
    if (CanStartFront()) work_cv_.notify_one();
    lock.unlock();
    std::vector<absl::Status> done;
    if (jobs.front().write) {
      std::vector<DiskBlockStore::WriteRequest> batch;
      for (const Job& job : jobs) batch.push_back({job.slot, job.key, job.tokens, job.data, job.content});
      done = store_->WriteBatch(batch);
    } else {
      const Job& job = jobs.front();
      done.push_back(job.probe ? store_->ProbeRead(job.slot) : store_->Read(job.slot, job.key, job.tokens, job.dest));
    }
    lock.lock();
    --running_;
    if (jobs.front().write) write_running_ = false;
    // Reported in submission order: ids are consecutive, so a job is reported once every
    // earlier one has ended; one that ends first waits in ended_unreported_.
    for (size_t i = 0; i < jobs.size(); ++i) {
      ended_unreported_.emplace(jobs[i].id, Finished{jobs[i].id, std::move(done[i])});
    }
    const int64_t before = last_finished_;
    for (auto it = ended_unreported_.begin(); it != ended_unreported_.end() && it->first == last_finished_ + 1;
         it = ended_unreported_.erase(it)) {
      finished_.push_back(std::move(it->second));
      last_finished_ = it->first;
    }
    if (last_finished_ != before) done_cv_.notify_all();
    // A write at the front may have waited for this job to end.
    if (CanStartFront() || (stop_ && queue_.empty())) work_cv_.notify_all();
  }
}

}  // namespace kvtier
