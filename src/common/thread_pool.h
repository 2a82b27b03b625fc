// ThreadPool: a fixed set of worker threads that split a loop [0, n) into contiguous
// ranges. ParallelFor is thread-safe (concurrent callers take turns); a call made from
// inside a ParallelFor body runs inline, so nesting never deadlocks.
#ifndef KVTIER_COMMON_THREAD_POOL_H_
#define KVTIER_COMMON_THREAD_POOL_H_

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
  // num_threads counts the calling thread: 1 runs everything inline, <= 0 means
  // std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) on disjoint contiguous ranges covering [0, n) and returns when
  // all are done. Ranges are never empty; n <= 0 calls nothing.
  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void WorkerLoop(int worker_index);

  const int num_threads_;
  std::vector<std::thread> workers_;

  // std::mutex rather than absl::Mutex: the system abseil is not built with ThreadSanitizer
  // annotations, so TSan builds could not see absl's happens-before edges.
  std::mutex run_mu_;  // held for a whole ParallelFor: one job in flight at a time
  std::mutex mu_;
  std::condition_variable work_cv_;  // a job was published, or stop_
  std::condition_variable done_cv_;  // pending_ reached 0
  const std::function<void(int64_t, int64_t)>* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t job_n_ ABSL_GUARDED_BY(mu_) = 0;
  int job_ranges_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped per job; workers wait for it
  int pending_ ABSL_GUARDED_BY(mu_) = 0;           // worker ranges not yet finished
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_THREAD_POOL_H_
