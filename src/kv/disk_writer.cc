// DiskWriter (disk_writer.h): a FIFO of write jobs drained by one thread. The mutex guards
// only the queue and the results; the Write itself runs unlocked.
#include "kv/disk_writer.h"

#include <utility>

#include "storage/disk_block_store.h"

namespace kvtier {

DiskWriter::DiskWriter(DiskBlockStore* store) : store_(store), thread_([this] { Run(); }) {}

DiskWriter::~DiskWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_one();
  thread_.join();
}

int64_t DiskWriter::Submit(int64_t slot, uint64_t tag, int32_t token_count, const void* data) {
  const int64_t id = ++last_submitted_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Job{id, slot, tag, token_count, data});
  }
  work_cv_.notify_one();
  return id;
}

std::vector<DiskWriter::Finished> DiskWriter::TakeFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(finished_, {});
}

void DiskWriter::Wait(int64_t job) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return last_finished_ >= job; });
}

void DiskWriter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left: queued jobs always run first
    const Job job = queue_.front();
    queue_.pop_front();
    lock.unlock();
    absl::Status written = store_->Write(job.slot, job.tag, job.token_count, job.data);
    lock.lock();
    finished_.push_back(Finished{job.id, std::move(written)});
    last_finished_ = job.id;
    done_cv_.notify_all();
  }
}

}  // namespace kvtier
