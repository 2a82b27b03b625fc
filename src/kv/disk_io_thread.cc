// DiskIoThread (disk_io_thread.h): a FIFO of block reads and writes (and index saves)
// drained by one thread.
// The mutex guards only the queue and the results; the I/O itself runs unlocked.
#include "kv/disk_io_thread.h"

#include <utility>

#include "storage/disk_block_store.h"

namespace kvtier {

DiskIoThread::DiskIoThread(DiskBlockStore* store) : store_(store), thread_([this] { Run(); }) {}

DiskIoThread::~DiskIoThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_one();
  thread_.join();
}

int64_t DiskIoThread::Submit(const Job& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
  }
  work_cv_.notify_one();
  return job.id;
}

int64_t DiskIoThread::SubmitWrite(int64_t slot, uint64_t tag, int32_t token_count, const void* data) {
  Job job;
  job.id = ++last_submitted_;
  job.kind = Kind::kWrite;
  job.slot = slot;
  job.tag = tag;
  job.token_count = token_count;
  job.data = data;
  return Submit(job);
}

int64_t DiskIoThread::SubmitRead(int64_t slot, uint64_t tag, void* dest) {
  Job job;
  job.id = ++last_submitted_;
  job.kind = Kind::kRead;
  job.slot = slot;
  job.tag = tag;
  job.dest = dest;
  return Submit(job);
}

int64_t DiskIoThread::SubmitSaveIndex(std::vector<DiskIndexEntry> entries) {
  Job job;
  job.id = ++last_submitted_;
  job.kind = Kind::kSaveIndex;
  job.index = std::make_shared<const std::vector<DiskIndexEntry>>(std::move(entries));
  return Submit(job);
}

std::vector<DiskIoThread::Finished> DiskIoThread::TakeFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(finished_, {});
}

void DiskIoThread::Wait(int64_t job) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return last_finished_ >= job; });
}

void DiskIoThread::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left: queued jobs always run first
    const Job job = queue_.front();
    queue_.pop_front();
    lock.unlock();
    absl::Status done;
    switch (job.kind) {
      case Kind::kRead: done = store_->Read(job.slot, job.tag, job.dest); break;
      case Kind::kWrite: done = store_->Write(job.slot, job.tag, job.token_count, job.data); break;
      case Kind::kSaveIndex: done = store_->SaveIndex(*job.index); break;
    }
    lock.lock();
    finished_.push_back(Finished{job.id, std::move(done)});
    last_finished_ = job.id;
    done_cv_.notify_all();
  }
}

}  // namespace kvtier
