// ThreadPool implementation: one job at a time, published under a mutex with a generation
// counter that idle workers wait on.
#include "common/thread_pool.h"

#include <algorithm>

namespace kvtier {
namespace {

// True on pool worker threads and on a caller while it runs its own range: a nested
// ParallelFor then runs inline instead of waiting on workers that are busy with the outer job.
thread_local bool inside_parallel_for = false;

int ResolveThreads(int num_threads) {
  if (num_threads > 0) return num_threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(ResolveThreads(num_threads)) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::ParallelFor(int64_t n,
                             const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  const int ranges = static_cast<int>(std::min<int64_t>(n, num_threads_));
  if (ranges == 1 || inside_parallel_for) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_ranges_ = ranges;
    pending_ = ranges - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  inside_parallel_for = true;
  fn(0, n / ranges);
  inside_parallel_for = false;
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int worker_index) {
  inside_parallel_for = true;
  uint64_t seen_generation = 0;
  while (true) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    int ranges;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this, seen_generation] {
        return stop_ || generation_ != seen_generation;
      });
      if (stop_) return;
      seen_generation = generation_;
      job = job_;
      n = job_n_;
      ranges = job_ranges_;
    }
    if (worker_index >= ranges) continue;  // fewer ranges than threads this time
    const int64_t begin = n * worker_index / ranges;
    const int64_t end = n * (worker_index + 1) / ranges;
    (*job)(begin, end);
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

}  // namespace kvtier
