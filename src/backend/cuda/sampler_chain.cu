// The sampler chain's adjustment and log-probability kernels (sampler_chain_kernels.h).
#include <cstdint>

#include "backend/cuda/row_select.cuh"
#include "backend/cuda/sampler_chain_kernels.h"

namespace kvtier::cuda {
namespace {

using namespace row_select;  // NOLINT: the select machinery of sampling.cu

// kvtier::AdjustLogit with one rounding per operation (the _rn intrinsics are never fused
// into a multiply-add), so the device and the host give the same bits.
__device__ __forceinline__ float Adjust(float logit, const DeviceAdjustment& a) {
  float l = __fadd_rn(logit, a.bias);
  if (a.repetition != 1.0f) l = l > 0.0f ? __fdiv_rn(l, a.repetition) : __fmul_rn(l, a.repetition);
  return __fsub_rn(l, a.subtract);
}

__global__ void AdjustLogitsKernel(float* logits, int vocab, const AdjustRange* ranges,
                                   const DeviceAdjustment* adjustments, float* raw) {
  // Structured output's allowed-token mask (masked logits = -inf), step 1 of the chain,
  // belongs here, before the adjustments.
  const AdjustRange range = ranges[blockIdx.x];
  float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  for (int j = range.begin + static_cast<int>(threadIdx.x); j < range.begin + range.count;
       j += blockDim.x) {
    const DeviceAdjustment a = adjustments[j];
    const float l = row[a.token];
    raw[j] = l;
    row[a.token] = Adjust(l, a);
  }
}

constexpr int kMaxTop = 20;

__global__ void __launch_bounds__(kThreads)
    RowLogprobsKernel(const float* logits, int vocab, const LogprobTask* tasks, float* lse,
                      int32_t* top_ids, float* top_logprobs) {
  __shared__ SelectState s;
  __shared__ uint64_t top[kMaxTop];
  __shared__ int num_top;
  const LogprobTask task = tasks[blockIdx.x];
  RowView row;
  row.logits = logits + static_cast<int64_t>(task.logits_row) * vocab;
  row.vocab = vocab;
  uint64_t best = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t key = OrderKey(row.logits[i], i);
    best = key > best ? key : best;
  }
  best = BlockMaxKey(best, s);
  const float max_logit = LogitOf(best);
  double sum = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) sum += exp(static_cast<double>(row.logits[i]) - max_logit);
  sum = BlockSum(sum, s);
  const double row_lse = static_cast<double>(max_logit) + log(sum);
  if (threadIdx.x == 0) lse[blockIdx.x] = static_cast<float>(row_lse);
  const int n = min(task.top_n, min(vocab, kMaxTop));
  if (n <= 0) return;
  // The n largest keys: the n-th by a count select, then those at or above it (exactly n:
  // keys are distinct), sorted.
  const uint64_t floor = n == 1 ? best : Select<false>(row, 0, n, false, s);
  if (threadIdx.x == 0) num_top = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t key = OrderKey(row.logits[i], i);
    if (key >= floor) {
      const int at = atomicAdd(&num_top, 1);
      if (at < kMaxTop) top[at] = key;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < n; ++i) {  // insertion sort, descending
      const uint64_t key = top[i];
      int j = i;
      for (; j > 0 && top[j - 1] < key; --j) top[j] = top[j - 1];
      top[j] = key;
    }
  }
  __syncthreads();
  if (threadIdx.x < n) {
    const uint64_t key = top[threadIdx.x];
    top_ids[task.top_offset + threadIdx.x] = IdOf(key);
    top_logprobs[task.top_offset + threadIdx.x] =
        static_cast<float>(static_cast<double>(LogitOf(key)) - row_lse);
  }
}

__global__ void PickedLogprobsKernel(const float* logits, int vocab, const LogprobTask* tasks,
                                     int num_tasks, const int32_t* ids, const float* lse,
                                     const AdjustRange* ranges,
                                     const DeviceAdjustment* adjustments, const float* raw,
                                     float* logprobs) {
  const int t = blockIdx.x * (blockDim.x / 32) + static_cast<int>(threadIdx.x / 32);
  const int lane = threadIdx.x & 31;
  if (t >= num_tasks) return;
  const int row = tasks[t].logits_row;
  const int id = ids[tasks[t].sample];
  float value = logits[static_cast<int64_t>(row) * vocab + id];
  if (ranges != nullptr) {
    const AdjustRange range = ranges[row];
    int found = -1;
    for (int j = range.begin + lane; j < range.begin + range.count; j += 32) {
      if (adjustments[j].token == id) found = j;
    }
    for (int offset = 16; offset > 0; offset >>= 1) found = max(found, __shfl_xor_sync(0xffffffffu, found, offset));
    if (found >= 0) value = raw[found];
  }
  if (lane == 0) logprobs[t] = static_cast<float>(static_cast<double>(value) - static_cast<double>(lse[t]));
}

}  // namespace

cudaError_t AdjustLogits(float* logits, int rows, int vocab, const AdjustRange* ranges,
                         const DeviceAdjustment* adjustments, float* raw, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  AdjustLogitsKernel<<<rows, 256, 0, stream>>>(logits, vocab, ranges, adjustments, raw);
  return cudaGetLastError();
}

cudaError_t RowLogprobs(const float* logits, int vocab, const LogprobTask* tasks, int num_tasks,
                        float* lse, int32_t* top_ids, float* top_logprobs, cudaStream_t stream) {
  if (num_tasks == 0) return cudaSuccess;
  RowLogprobsKernel<<<num_tasks, kThreads, 0, stream>>>(logits, vocab, tasks, lse, top_ids,
                                                        top_logprobs);
  return cudaGetLastError();
}

cudaError_t PickedLogprobs(const float* logits, int vocab, const LogprobTask* tasks, int num_tasks,
                           const int32_t* ids, const float* lse, const AdjustRange* ranges,
                           const DeviceAdjustment* adjustments, const float* raw, float* logprobs,
                           cudaStream_t stream) {
  if (num_tasks == 0) return cudaSuccess;
  constexpr int kWarpsPerBlock = 8;
  PickedLogprobsKernel<<<(num_tasks + kWarpsPerBlock - 1) / kWarpsPerBlock, 32 * kWarpsPerBlock, 0,
                         stream>>>(logits, vocab, tasks, num_tasks, ids, lse, ranges, adjustments,
                                   raw, logprobs);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda
