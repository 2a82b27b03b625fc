// AttentionFork (attention_fork.h).
#include "backend/cuda/attention_fork.h"

#include "absl/strings/str_cat.h"

namespace kvtier::cuda {

absl::StatusOr<std::unique_ptr<AttentionFork>> AttentionFork::Create() {
  std::unique_ptr<AttentionFork> fork(new AttentionFork());
  cudaError_t err = cudaStreamCreateWithFlags(&fork->side_, cudaStreamNonBlocking);
  // Timing off: these events only order work, and untimed events cost less to record.
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&fork->forked_, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&fork->joined_, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    return absl::InternalError(absl::StrCat("attention side stream: ", cudaGetErrorString(err)));
  }
  return fork;
}

AttentionFork::~AttentionFork() {
  Synchronize();
  if (joined_ != nullptr) cudaEventDestroy(joined_);
  if (forked_ != nullptr) cudaEventDestroy(forked_);
  if (side_ != nullptr) cudaStreamDestroy(side_);
}

cudaError_t AttentionFork::Fork(cudaStream_t compute, cudaStream_t* side) {
  if (cudaError_t err = cudaEventRecord(forked_, compute); err != cudaSuccess) return err;
  if (cudaError_t err = cudaStreamWaitEvent(side_, forked_, 0); err != cudaSuccess) return err;
  *side = side_;
  ++forks_;
  return cudaSuccess;
}

cudaError_t AttentionFork::Join(cudaStream_t compute) {
  if (cudaError_t err = cudaEventRecord(joined_, side_); err != cudaSuccess) return err;
  return cudaStreamWaitEvent(compute, joined_, 0);
}

void AttentionFork::Synchronize() {
  if (side_ != nullptr) cudaStreamSynchronize(side_);
}

}  // namespace kvtier::cuda
