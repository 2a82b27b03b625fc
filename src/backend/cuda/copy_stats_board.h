// CopyStatsBoard: the CUDA backend's tier-copy and host-KV timings (BackendCopyStats),
// written by the stepping thread and read from any thread. Thread-safe.
#ifndef KVTIER_BACKEND_CUDA_COPY_STATS_BOARD_H_
#define KVTIER_BACKEND_CUDA_COPY_STATS_BOARD_H_

#include <mutex>

#include "backend/backend.h"

namespace kvtier::cuda {

class CopyStatsBoard {
 public:
  // Runs fn(BackendCopyStats&) under the lock.
  template <typename Fn>
  void Update(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    fn(stats_);
  }
  BackendCopyStats Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  mutable std::mutex mu_;
  BackendCopyStats stats_;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_COPY_STATS_BOARD_H_
