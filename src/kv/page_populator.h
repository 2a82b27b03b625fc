// PagePopulator: pages a reserved region in ([base, base + bytes), committing its memory)
// ahead of a consumer that walks it a chunk at a time in order — the host tier's pinning,
// whose registration of a chunk is fast once its pages exist but slow while it must fault
// them in itself (bench/micro/host_pin.cu on the H200 machine: 2.1 GB/s pinning with the
// paging-in inline, 22 GB/s with it on 4 threads ahead and huge pages). Paging in takes no
// device driver lock, so it runs beside a context's device work.
// Thread-safe: WaitFor from the one consumer thread; Stop and the destructor from any.
#ifndef KVTIER_KV_PAGE_POPULATOR_H_
#define KVTIER_KV_PAGE_POPULATOR_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace kvtier {

// Commits [start, start + length): MADV_POPULATE_WRITE where the kernel has it, else a
// write to each page.
void PopulatePages(uint8_t* start, size_t length);

class PagePopulator {
 public:
  // Chunks [k * chunk, min((k + 1) * chunk, bytes)) on `threads` threads (at least 1), at
  // most `ahead` chunks (at least 1) past the one the consumer waits for, so that a consumer
  // paused or stopped early leaves little memory committed for nothing.
  PagePopulator(uint8_t* base, size_t bytes, size_t chunk, int threads, int ahead);
  ~PagePopulator();  // Stop(), then joins the threads
  PagePopulator(const PagePopulator&) = delete;
  PagePopulator& operator=(const PagePopulator&) = delete;

  // Blocks until chunk `index` is paged in; true then. False, at once, once Stop() was
  // called and the chunk is not paged in: the caller pages it in itself if it still needs it.
  bool WaitFor(size_t index);
  // The threads stop after the chunks they are paging in; returns at once.
  void Stop();

 private:
  void Run();

  uint8_t* const base_;
  const size_t bytes_;
  const size_t chunk_;
  const size_t num_chunks_;
  const size_t ahead_;
  std::mutex mu_;
  std::condition_variable cv_;  // a chunk done, the consumer moved on, or Stop
  std::vector<bool> done_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;      // the next chunk a thread takes
  size_t consumer_ ABSL_GUARDED_BY(mu_) = 0;  // the chunk the consumer waits for or pins
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_PAGE_POPULATOR_H_
