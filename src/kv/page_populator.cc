// Implementation of PagePopulator (page_populator.h).
#include "kv/page_populator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace kvtier {

void PopulatePages(uint8_t* start, size_t length) {
#ifdef MADV_POPULATE_WRITE
  if (::madvise(start, length, MADV_POPULATE_WRITE) == 0) return;
#endif
  const long page = ::sysconf(_SC_PAGESIZE);
  const size_t step = page > 0 ? static_cast<size_t>(page) : size_t{4096};
  for (size_t at = 0; at < length; at += step) static_cast<volatile uint8_t*>(start)[at] = 0;
}

PagePopulator::PagePopulator(uint8_t* base, size_t bytes, size_t chunk, int threads, int ahead)
    : base_(base),
      bytes_(bytes),
      chunk_(std::max<size_t>(chunk, 1)),
      num_chunks_((bytes + chunk_ - 1) / chunk_),
      ahead_(static_cast<size_t>(std::max(ahead, 1))),
      done_(num_chunks_, false) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Run(); });
}

PagePopulator::~PagePopulator() {
  Stop();
  for (std::thread& thread : threads_) thread.join();
}

void PagePopulator::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

bool PagePopulator::WaitFor(size_t index) {
  std::unique_lock<std::mutex> lock(mu_);
  if (index >= num_chunks_) return false;
  consumer_ = std::max(consumer_, index);
  cv_.notify_all();  // room ahead for the threads
  cv_.wait(lock, [&] { return done_[index] || stop_; });
  return done_[index];
}

void PagePopulator::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || next_ >= num_chunks_ || next_ < consumer_ + ahead_; });
    if (stop_ || next_ >= num_chunks_) return;
    const size_t index = next_++;
    lock.unlock();
    const size_t begin = index * chunk_;
    PopulatePages(base_ + begin, std::min(chunk_, bytes_ - begin));
    lock.lock();
    done_[index] = true;
    cv_.notify_all();
  }
}

}  // namespace kvtier
