// DeviceSamplerChain: the sampler chain (backend/sampler_chain.h) on the GPU, after a
// forward has left its logits rows in device memory — log-probabilities of the raw rows,
// the rows' adjustments, the samples (several may read one row), the sampled tokens'
// log-probabilities — with only the ids and the asked-for numbers copied back.
//
// Invariant: its buffers are allocated once, at Create (device memory through the
// backend's allocator, so it is counted; pinned host staging of its own), sized for
// max_rows logits rows and kMaxCompletions more samples; a batch larger than that runs in
// groups of whole rows, one after another. One thread at a time (the backend's).
#ifndef KVTIER_BACKEND_CUDA_DEVICE_SAMPLER_CHAIN_H_
#define KVTIER_BACKEND_CUDA_DEVICE_SAMPLER_CHAIN_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sampler_chain_kernels.h"
#include "backend/sampler_chain.h"

namespace kvtier {

class DeviceSamplerChain {
 public:
  using Allocator = std::function<absl::StatusOr<void*>(size_t bytes, const char* what)>;
  static absl::StatusOr<std::unique_ptr<DeviceSamplerChain>> Create(int64_t max_rows, int64_t vocab,
                                                                    const Allocator& alloc);
  ~DeviceSamplerChain();  // frees the pinned staging (device memory is the allocator's)
  // Device bytes Create takes (for the backend's memory budget).
  static int64_t DeviceBytes(int64_t max_rows, int64_t vocab);

  // Runs the chain for the samples `samples` (indices into batch.samples, in order of their
  // logits rows) whose rows lie in [first_row, first_row + num_rows) of the step: `logits`
  // holds those rows (row first_row at its start) and is adjusted in place. Writes each
  // sample's token and log-probabilities into result->tokens / sample_logprobs at its
  // index (sized by the caller) and appends alternatives to result->top. Returns when the
  // results are on the host (the stream is synchronised).
  absl::Status Run(float* logits, int64_t first_row, int64_t num_rows, const SamplingBatch& batch,
                   std::span<const int32_t> samples, SamplingResult* result, cudaStream_t stream,
                   const CudaLaunchOptions& launch);

 private:
  DeviceSamplerChain(int64_t max_rows, int64_t vocab);
  // One group: rows [row_begin, row_end) of the step and their samples.
  absl::Status RunGroup(float* logits, int64_t row_begin, int64_t row_end, const SamplingBatch& batch,
                        std::span<const int32_t> samples, SamplingResult* result, cudaStream_t stream,
                        const CudaLaunchOptions& launch);

  const int64_t max_rows_;
  const int64_t max_samples_;
  const int64_t max_adjustments_;
  const int64_t vocab_;
  // Device arrays (sizes in elements).
  cuda::SampleParams* params_ = nullptr;       // (max_samples_)
  cuda::LogprobTask* tasks_ = nullptr;         // (max_samples_)
  cuda::AdjustRange* ranges_ = nullptr;        // (max_rows_)
  cuda::DeviceAdjustment* adjustments_ = nullptr;  // (max_adjustments_)
  float* raw_ = nullptr;                       // (max_adjustments_) logits before adjustment
  int32_t* ids_ = nullptr;                     // (max_samples_)
  float* lse_ = nullptr;                       // (max_samples_) per task
  float* logprobs_ = nullptr;                  // (max_samples_) per task
  int32_t* top_ids_ = nullptr;                 // (max_samples_ * kMaxTopLogprobs)
  float* top_logprobs_ = nullptr;              // (max_samples_ * kMaxTopLogprobs)
  // Pinned host mirrors of the same arrays (inputs written here, outputs read back here).
  struct Host {
    cuda::SampleParams* params = nullptr;
    cuda::LogprobTask* tasks = nullptr;
    cuda::AdjustRange* ranges = nullptr;
    cuda::DeviceAdjustment* adjustments = nullptr;
    int32_t* ids = nullptr;
    float* logprobs = nullptr;
    int32_t* top_ids = nullptr;
    float* top_logprobs = nullptr;
  } host_;
  void* host_memory_ = nullptr;
};

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CUDA_DEVICE_SAMPLER_CHAIN_H_
