// ChunkedPreparer: runs a slow preparation of [0, total) — pinning a host tier, reserving a
// disk tier's file — on its own thread, one chunk after another in order, so that a context
// is usable at once and each part of a tier becomes usable as soon as it is prepared.
// Thread-safe: ready(), done() and status() may be read from any thread while it runs.
#ifndef KVTIER_KV_CHUNKED_PREPARER_H_
#define KVTIER_KV_CHUNKED_PREPARER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"

namespace kvtier {

// Progress is a prefix: [0, ready()) is prepared, and it only grows. A chunk that fails
// stops the preparation there for good (status() says why): what was prepared before it
// stays usable, the rest never becomes so. Cancel() (and the destructor) stop it before
// the next chunk; the chunk running then finishes first (a pin or an fallocate cannot be
// interrupted), so a cancel waits at most one chunk.
class ChunkedPreparer {
 public:
  // Prepares [begin, end) on the preparer's thread; never two calls at once, always in
  // order, each starting where the last one ended.
  using PrepareFn = std::function<absl::Status(int64_t begin, int64_t end)>;

  // Starts the thread at once unless [begin, total) is empty (then done already). Chunks
  // end at multiples of `chunk` (> 0) and at total; [0, begin) counts as prepared.
  ChunkedPreparer(int64_t begin, int64_t total, int64_t chunk, PrepareFn prepare);
  ~ChunkedPreparer();  // Cancel(), then waits for the thread
  ChunkedPreparer(const ChunkedPreparer&) = delete;
  ChunkedPreparer& operator=(const ChunkedPreparer&) = delete;

  int64_t total() const { return total_; }
  // The prepared prefix; acquire: what the preparation wrote is visible to the reader.
  int64_t ready() const { return ready_.load(std::memory_order_acquire); }
  // Finished: all prepared, failed, or cancelled (nothing runs any more).
  bool done() const { return done_.load(std::memory_order_acquire); }
  // The failure that stopped it; OK while running, when complete, or when cancelled.
  absl::Status status() const;

  // Stops before the next chunk; returns at once.
  void Cancel();
  // Holds the next chunk back until Resume() (the chunk running finishes first, so the
  // caller may wait for at most one chunk's work to end); Cancel still stops it.
  void Pause();
  void Resume();
  // Blocks until done().
  void Wait();

 private:
  void Run();

  const int64_t total_;
  const int64_t chunk_;
  const PrepareFn prepare_;
  std::atomic<int64_t> ready_;
  std::atomic<bool> done_{false};
  std::atomic<bool> cancelled_{false};
  // std::mutex, not absl::Mutex: TSan sees these (the system abseil is not instrumented).
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  std::condition_variable resume_cv_;  // Resume() and Cancel() wake a paused Run()
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: started once every member above exists
};

}  // namespace kvtier

#endif  // KVTIER_KV_CHUNKED_PREPARER_H_
