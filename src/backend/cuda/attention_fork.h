// AttentionFork: a second stream on which a mixed step's decode attention runs beside its
// prefill attention (CudaOptions::overlap_attention). The two read the same KV pool and write
// disjoint rows of the attention output; the decode attention streams KV from memory while the
// prefill attention keeps the tensor cores busy, so together they take about the longer of
// the two instead of their sum. Fork() makes the side stream wait for what the compute stream
// has enqueued so far; Join() makes the compute stream wait for what the side stream has
// enqueued since. Both are plain event edges, so they also hold inside a graph capture. One
// thread at a time.
#ifndef KVTIER_BACKEND_CUDA_ATTENTION_FORK_H_
#define KVTIER_BACKEND_CUDA_ATTENTION_FORK_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace kvtier::cuda {

class AttentionFork {
 public:
  static absl::StatusOr<std::unique_ptr<AttentionFork>> Create();
  ~AttentionFork();
  AttentionFork(const AttentionFork&) = delete;
  AttentionFork& operator=(const AttentionFork&) = delete;

  // The side stream, after an edge from everything enqueued on `compute` so far.
  cudaError_t Fork(cudaStream_t compute, cudaStream_t* side);
  // An edge from everything enqueued on the side stream so far to what `compute` runs next.
  cudaError_t Join(cudaStream_t compute);
  // Waits for the side stream's work (teardown).
  void Synchronize();
  // Fork() calls so far (one per layer of each overlapped step): compute_path reports it.
  int64_t forks() const { return forks_; }

 private:
  AttentionFork() = default;

  cudaStream_t side_ = nullptr;
  cudaEvent_t forked_ = nullptr;
  cudaEvent_t joined_ = nullptr;
  int64_t forks_ = 0;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_ATTENTION_FORK_H_
