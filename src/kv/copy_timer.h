// CopyTimer: adds the wall time of a scope to a counter (the KV manager's copy_seconds, the
// host time its tier moves take). Not thread-safe: the counter is the caller's.
#ifndef KVTIER_KV_COPY_TIMER_H_
#define KVTIER_KV_COPY_TIMER_H_

#include <chrono>

namespace kvtier {

class CopyTimer {
 public:
  explicit CopyTimer(double* total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~CopyTimer() { *total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  CopyTimer(const CopyTimer&) = delete;
  CopyTimer& operator=(const CopyTimer&) = delete;

 private:
  double* total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_COPY_TIMER_H_
