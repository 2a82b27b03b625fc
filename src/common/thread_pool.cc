// ThreadPool implementation: one job at a time, published through an atomic generation
// counter that idle workers spin on, then block on.
#include "common/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvtier {
namespace {

// True on pool worker threads and on a caller while it runs its own range: a nested
// ParallelFor then runs inline instead of waiting on workers that are busy with the outer job.
thread_local bool inside_parallel_for = false;

int ResolveThreads(int num_threads) {
  if (num_threads > 0) return num_threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or spin_us have passed; true when done() held.
template <typename Done>
bool Spin(int spin_us, Done done) {
  if (spin_us <= 0) return done();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

// Pins the calling thread to the index-th processor of the process's affinity set, when
// the set has at least `threads` processors.
void PinToProcessor(int index, int threads) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < threads) return;
  int seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    if (seen++ == index) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
      return;
    }
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads, const Options& options)
    : num_threads_(ResolveThreads(num_threads)), options_(options) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
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
  job_ = &fn;
  job_n_ = n;
  job_ranges_ = ranges;
  pending_.store(num_threads_ - 1);  // every worker reports, those without a range too
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    work_cv_.notify_all();
  }
  inside_parallel_for = true;
  fn(0, n / ranges);
  inside_parallel_for = false;
  if (!Spin(options_.spin_us, [this] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(mu_);
    waiting_caller_.store(true);
    done_cv_.wait(lock, [this] { return pending_.load() == 0; });
    waiting_caller_.store(false);
  }
  job_ = nullptr;
}

bool ThreadPool::AwaitJob(uint64_t seen) {
  // Sequentially consistent loads: after sleepers_ is raised, this must see a generation
  // the caller published before it looked at sleepers_.
  const auto ready = [this, seen] { return generation_.load() != seen || stop_.load(); };
  if (!Spin(options_.spin_us, ready)) {
    std::unique_lock<std::mutex> lock(mu_);
    sleepers_.fetch_add(1);
    work_cv_.wait(lock, ready);
    sleepers_.fetch_sub(1);
  }
  return !stop_.load();
}

void ThreadPool::WorkerLoop(int worker_index) {
  if (options_.pin_workers) PinToProcessor(worker_index, num_threads_);
  inside_parallel_for = true;
  uint64_t seen_generation = 0;
  while (AwaitJob(seen_generation)) {
    seen_generation = generation_.load();
    const int ranges = job_ranges_;
    if (worker_index < ranges) {  // fewer ranges than threads this time: nothing to run
      const int64_t begin = job_n_ * worker_index / ranges;
      const int64_t end = job_n_ * (worker_index + 1) / ranges;
      (*job_)(begin, end);
    }
    if (pending_.fetch_sub(1) == 1 && waiting_caller_.load()) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace kvtier
