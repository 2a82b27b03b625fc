// The sampler chain's kernels besides SampleRows (kernels.h): the sparse adjustments of
// each logits row (logit bias, repetition/frequency/presence penalties) and the
// log-probabilities of the raw rows. Semantics: SampleOnHost in backend/sampler_chain.h,
// whose order the backend follows: log-probabilities of the raw row, then the adjustments
// (in place, keeping the raw values), then SampleRows, then the picked tokens'
// log-probabilities from the kept raw values.
#ifndef KVTIER_BACKEND_CUDA_SAMPLER_CHAIN_KERNELS_H_
#define KVTIER_BACKEND_CUDA_SAMPLER_CHAIN_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace kvtier::cuda {

// kvtier::TokenAdjustment as the device reads it (same layout).
struct DeviceAdjustment {
  int32_t token;
  float bias;
  float repetition;
  float subtract;
};

// A logits row's adjustments: DeviceAdjustment[begin, begin + count).
struct AdjustRange {
  int32_t begin;
  int32_t count;
};

// For each row r < rows and each adjustment j of ranges[r]: raw[j] = logits[r, token];
// logits[r, token] = kvtier::AdjustLogit(raw[j], adjustments[j]), bit for bit (one
// rounding per operation). Each token at most once per row. All pointers device memory.
cudaError_t AdjustLogits(float* logits, int rows, int vocab, const AdjustRange* ranges,
                         const DeviceAdjustment* adjustments, float* raw, cudaStream_t stream);

// One log-probability request: the log-sum-exp of a logits row and its top_n most likely
// tokens (kvtier::AppendTopLogprobs's order), written at top[top_offset, + top_n).
struct LogprobTask {
  int32_t logits_row;
  int32_t top_n;       // 0..20
  int32_t top_offset;
  int32_t sample;      // PickedLogprobs: the sample whose token it scores
};

// For each task t < tasks: lse[t] = log(sum exp(row)) (sums in double), and top_ids /
// top_logprobs[task.top_offset + i] = the i-th most likely token and its log-probability.
// Run on the raw logits (before AdjustLogits).
cudaError_t RowLogprobs(const float* logits, int vocab, const LogprobTask* tasks, int num_tasks,
                        float* lse, int32_t* top_ids, float* top_logprobs, cudaStream_t stream);

// The sampled tokens' log-probabilities: for each task t, logprobs[t] = the raw logit of
// ids[task.sample] in row task.logits_row - lse[t], the raw logit taken from `raw` when
// AdjustLogits changed it (ranges may be null: no adjustments), else from `logits`.
cudaError_t PickedLogprobs(const float* logits, int vocab, const LogprobTask* tasks, int num_tasks,
                           const int32_t* ids, const float* lse, const AdjustRange* ranges,
                           const DeviceAdjustment* adjustments, const float* raw, float* logprobs,
                           cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_SAMPLER_CHAIN_KERNELS_H_
