// DiskWriter: one I/O thread that writes host-tier blocks to disk slots (DiskBlockStore::
// Write: pwrite + fdatasync, ~2 ms per 2 MiB block) so that the stepping thread does not.
// The KV manager submits a job per cached host block it wants on disk ahead of that
// block's eviction, polls for finished jobs at step start (non-blocking), and blocks only
// when it must evict a host block whose job is still queued or running (Wait).
//
// The bytes a job reads (a host slot, pinned on CUDA) must stay unchanged and allocated
// until the job is reported finished; the disk slot it writes must not be read or written
// by anyone else until then. The manager guarantees both (kv_cache_manager.h), so the
// writer may run its Write concurrently with the stepping thread's own disk reads and
// writes of other slots: DiskBlockStore is thread-safe for distinct slots (positioned I/O,
// atomic counters), as are both FileIo implementations (POSIX pread/pwrite; FakeFileIo's
// one mutex). No extra serialisation is added, so a synchronous read on the stepping
// thread (prefix hit, swap-in) never queues behind a background write.
//
// Thread-safety: Submit, TakeFinished, Wait and WaitAll are called by one thread (the
// owner); the I/O thread only runs jobs. Jobs finish in submission order (FIFO).
#ifndef KVTIER_KV_DISK_WRITER_H_
#define KVTIER_KV_DISK_WRITER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"

namespace kvtier {

class DiskBlockStore;

class DiskWriter {
 public:
  struct Finished {
    int64_t job = 0;
    absl::Status status;  // Write's result
  };

  // `store` must outlive the writer. Starts the I/O thread.
  explicit DiskWriter(DiskBlockStore* store);
  // Runs the jobs still queued, then joins the thread (their results are discarded).
  ~DiskWriter();
  DiskWriter(const DiskWriter&) = delete;
  DiskWriter& operator=(const DiskWriter&) = delete;

  // Queues Write(slot, tag, token_count, data); returns the job's id (> 0, increasing).
  int64_t Submit(int64_t slot, uint64_t tag, int32_t token_count, const void* data);
  // The jobs finished since the last call, in submission order. Never blocks on I/O (only
  // on the queue's mutex, which the I/O thread holds for a few instructions).
  std::vector<Finished> TakeFinished();
  // Blocks until job `job` (and every earlier one) has finished; TakeFinished reports it.
  void Wait(int64_t job);
  void WaitAll() { Wait(last_submitted_); }
  int64_t last_submitted() const { return last_submitted_; }

 private:
  struct Job {
    int64_t id;
    int64_t slot;
    uint64_t tag;
    int32_t token_count;
    const void* data;
  };
  void Run();

  DiskBlockStore* const store_;
  int64_t last_submitted_ = 0;  // owner thread only
  // std::mutex, not absl::Mutex: the system abseil is not built with ThreadSanitizer
  // annotations, so TSan could not see absl's happens-before edges (as in ThreadPool).
  std::mutex mu_;
  std::condition_variable work_cv_;  // a job was queued, or stop_
  std::condition_variable done_cv_;  // last_finished_ advanced
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<Finished> finished_ ABSL_GUARDED_BY(mu_);
  int64_t last_finished_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started after every member above is initialised
};

}  // namespace kvtier

#endif  // KVTIER_KV_DISK_WRITER_H_
