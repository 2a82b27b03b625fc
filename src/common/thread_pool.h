// ThreadPool: a fixed set of worker threads that split a loop [0, n) into contiguous
// ranges. ParallelFor is thread-safe (concurrent callers take turns); a call made from
// inside a ParallelFor body runs inline, so nesting never deadlocks.
#ifndef KVTIER_COMMON_THREAD_POOL_H_
#define KVTIER_COMMON_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace kvtier {

// Work is split statically: range r of R is [n*r/R, n*(r+1)/R), the caller runs range 0 and
// worker r runs range r. Static ranges (no work stealing) keep the pool trivially simple;
// callers that need results independent of the thread count compute each output element
// inside one range with a fixed reduction order, which this split never changes.
class ThreadPool {
 public:
  struct Options {
    // Idle workers (and a caller waiting for its workers) spin this long, in microseconds,
    // before they block: a compute loop that calls ParallelFor for every kernel then pays
    // no wake-up per kernel. 0: block at once (pools that run rare, long jobs).
    int spin_us = 0;
    // Pins worker r to the r-th processor of the process's affinity set (the caller keeps
    // its own), when there are at least as many processors as threads.
    bool pin_workers = false;
  };

  // num_threads counts the calling thread: 1 runs everything inline, <= 0 means
  // std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads) : ThreadPool(num_threads, Options{}) {}
  ThreadPool(int num_threads, const Options& options);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) on disjoint contiguous ranges covering [0, n) and returns when
  // all are done. Ranges are never empty; n <= 0 calls nothing.
  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void WorkerLoop(int worker_index);
  // Waits until generation_ differs from `seen` (true) or stop_ is set (false).
  bool AwaitJob(uint64_t seen);

  const int num_threads_;
  const Options options_;
  std::vector<std::thread> workers_;

  // std::mutex rather than absl::Mutex: the system abseil is not built with ThreadSanitizer
  // annotations, so TSan builds could not see absl's happens-before edges.
  std::mutex run_mu_;  // held for a whole ParallelFor: one job in flight at a time

  // The job, written by the caller before it bumps generation_ (release) and read by
  // workers after they see the new generation (acquire).
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_ranges_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // worker ranges not yet finished
  std::atomic<bool> stop_{false};

  // Blocking: a worker done spinning counts itself in sleepers_, then waits on work_cv_; the
  // caller, after bumping generation_, notifies when it sees a sleeper (both sequentially
  // consistent, so one of the two always sees the other). The caller's own wait for the
  // last worker blocks on done_cv_ the same way (waiting_caller_).
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> waiting_caller_{false};
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_THREAD_POOL_H_
