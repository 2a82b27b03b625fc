// DiskIoThread: I/O threads that move whole blocks between the disk tier and host-tier
// memory (DiskBlockStore::Write: pwrite + fdatasync, and for cached blocks the index
// journal's append + fdatasync, milliseconds per block; Read: pread + checks), so that the
// stepping thread does not. The KV manager has two, through Transfers: one (one thread)
// writes cached host blocks to disk ahead of their eviction, and swapped or evicted device
// blocks from staging buffers; the other (several threads: one thread's preads leave most
// of an NVMe drive's bandwidth unused) reads disk blocks into host slots ahead of their
// use (a waiting sequence's prefix hits on disk, the blocks of a sequence swapped out to
// disk), or into staging buffers at their use, so reads never queue behind writes. The
// manager submits jobs, polls for finished ones at step start (non-blocking), and blocks
// only when it needs a job's result now (Wait).
//
// The host bytes a job reads or writes (a host slot or a staging buffer, pinned on CUDA)
// must stay allocated, and unchanged by anyone else, until the job is reported finished; so
// must its disk slot. Jobs carry their own copy of the key and tokens.
// The manager guarantees both (kv_cache_manager.h), so jobs may run concurrently with the
// stepping thread's own synchronous disk I/O on other slots: DiskBlockStore is thread-safe
// for distinct slots (positioned I/O, atomic counters), as are both FileIo implementations
// (POSIX pread/pwrite; FakeFileIo's one mutex).
//
// Writes queued back to back run as one DiskBlockStore::WriteBatch (one sync of the slot
// file and of the index journal for up to kMaxWriteBatch blocks: group commit), so a
// writer that falls behind catches up instead of paying two syncs per block.
//
// With several threads, reads queued back to back run concurrently, while a write waits
// for every job before it and holds back every job after it: writes keep their order
// among themselves and against reads, as with one thread. Whatever the order jobs run in,
// they are reported finished in submission order (FIFO): a job that ends early is held
// until every earlier one has ended, so Wait(job) still means "it and every earlier one".
//
// Thread-safety: Submit*, TakeFinished, Wait and WaitAll are called by one thread (the
// owner, Transfers); the I/O threads only run jobs.
#ifndef KVTIER_KV_DISK_IO_THREAD_H_
#define KVTIER_KV_DISK_IO_THREAD_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/sha256.h"
#include "storage/disk_block_store.h"

namespace kvtier {

class DiskIoThread {
 public:
  struct Finished {
    int64_t job = 0;
    absl::Status status;  // Write's or Read's result
  };

  // `store` must outlive the threads. Starts `num_threads` (at least 1) I/O threads.
  explicit DiskIoThread(DiskBlockStore* store, int num_threads = 1);
  // Runs the jobs still queued, then joins the threads (their results are discarded).
  ~DiskIoThread();
  DiskIoThread(const DiskIoThread&) = delete;
  DiskIoThread& operator=(const DiskIoThread&) = delete;

  // Queues Write(slot, key, tokens, data, content); returns the job's id (> 0, increasing).
  int64_t SubmitWrite(int64_t slot, const Sha256Digest& key, std::span<const int32_t> tokens, const void* data,
                      DiskBlockStore::Content content);
  // Queues Read(slot, key, tokens, dest) (dest: one block); returns the job's id.
  int64_t SubmitRead(int64_t slot, const Sha256Digest& key, std::span<const int32_t> tokens, void* dest);
  // Queues ProbeRead(slot) (the store's read speed; nothing is returned but the status).
  int64_t SubmitProbe(int64_t slot);
  // The jobs finished since the last call, in submission order. Never blocks on I/O (only
  // on the queue's mutex, which the I/O thread holds for a few instructions).
  std::vector<Finished> TakeFinished();
  // Blocks until job `job` (and every earlier one) has finished; TakeFinished reports it.
  void Wait(int64_t job);
  void WaitAll() { Wait(last_submitted_); }
  int64_t last_submitted() const { return last_submitted_; }
  // Jobs submitted and not finished yet (queued or running); from the owner thread.
  int64_t num_unfinished();

 private:
  struct Job {
    int64_t id = 0;
    bool write = false;
    bool probe = false;  // a read: ProbeRead
    int64_t slot = 0;
    Sha256Digest key;
    std::vector<int32_t> tokens;  // written, or expected
    DiskBlockStore::Content content = DiskBlockStore::Content::kCached;  // writes
    const void* data = nullptr;   // writes: the source
    void* dest = nullptr;         // reads: the destination
  };
  static constexpr size_t kMaxWriteBatch = 32;  // writes committed together at most
  int64_t Submit(Job job);
  // Whether a thread may take the queue's front job now (see the class comment).
  bool CanStartFront() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();

  DiskBlockStore* const store_;
  int64_t last_submitted_ = 0;  // owner thread only
  // std::mutex, not absl::Mutex: the system abseil is not built with ThreadSanitizer
  // annotations, so TSan could not see absl's happens-before edges (as in ThreadPool).
  std::mutex mu_;
  std::condition_variable work_cv_;  // a job was queued or ended, or stop_
  std::condition_variable done_cv_;  // last_finished_ advanced
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;               // jobs taken by a thread, not ended
  bool write_running_ ABSL_GUARDED_BY(mu_) = false;    // one of them is a write (batch)
  // Jobs ended while an earlier one has not: reported once it has (ids are consecutive).
  std::map<int64_t, Finished> ended_unreported_ ABSL_GUARDED_BY(mu_);
  std::vector<Finished> finished_ ABSL_GUARDED_BY(mu_);
  int64_t last_finished_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: started after every member above is initialised
};

}  // namespace kvtier

#endif  // KVTIER_KV_DISK_IO_THREAD_H_
