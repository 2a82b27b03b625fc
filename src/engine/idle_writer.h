// IdleWriter: a background thread that moves the KV manager's queued block writes (disk,
// remote) while the engine is idle, so that the step that ends the last request returns at
// once. Woken after such a step, it calls `pump` (which moves what it can and returns the
// writes left, 0 when the engine is busy again) every few milliseconds until none are left,
// none landed for a long while, or it is destroyed. Thread-safe; the destructor stops and
// joins the thread.
#ifndef KVTIER_ENGINE_IDLE_WRITER_H_
#define KVTIER_ENGINE_IDLE_WRITER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"

namespace kvtier {

class IdleWriter {
 public:
  explicit IdleWriter(std::function<int64_t()> pump);
  ~IdleWriter();
  IdleWriter(const IdleWriter&) = delete;
  IdleWriter& operator=(const IdleWriter&) = delete;

  // The engine went idle: pump until the queued writes are done.
  void Wake();

 private:
  void Run();

  const std::function<int64_t()> pump_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started last, joined first
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_IDLE_WRITER_H_
