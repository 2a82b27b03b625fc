// The sampler chain's adjustment and log-probability kernels (sampler_chain_kernels.h).
#include <cstdint>

#include "backend/cuda/row_select.cuh"
#include "backend/cuda/sampler_chain_kernels.h"

namespace kvtier::cuda {
namespace {

using row_select::IdOf;
using row_select::kThreads;
using row_select::kWarps;
using row_select::LogitOf;
using row_select::OrderKey;

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

// The largest key of the block; every thread gets it. `scratch`: kWarps entries.
__device__ uint64_t BlockMax(uint64_t v, uint64_t* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const uint64_t o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = o > v ? o : v;
  }
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  uint64_t best = 0;
  for (int w = 0; w < kWarps; ++w) best = scratch[w] > best ? scratch[w] : best;
  __syncthreads();
  return best;
}

// Two passes over the row: each thread keeps its own n largest keys, the block takes the
// n largest of those in n rounds of a block maximum (the first is the row's maximum); then
// the sum of exp(logit - max), in float per thread and double across threads.
__global__ void __launch_bounds__(kThreads)
    RowLogprobsKernel(const float* logits, int vocab, const LogprobTask* tasks, float* lse,
                      int32_t* top_ids, float* top_logprobs) {
  __shared__ uint64_t scratch[kWarps];
  __shared__ uint64_t top[kMaxTop];
  __shared__ double sums[kWarps];
  const LogprobTask task = tasks[blockIdx.x];
  const float* row = logits + static_cast<int64_t>(task.logits_row) * vocab;
  const int n = min(task.top_n, min(vocab, kMaxTop));
  const int keep = max(n, 1);  // the maximum at least
  uint64_t mine[kMaxTop];      // descending
  int count = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t key = OrderKey(row[i], i);
    if (count == keep && key <= mine[keep - 1]) continue;
    int j = count < keep ? count++ : keep - 1;
    for (; j > 0 && mine[j - 1] < key; --j) mine[j] = mine[j - 1];
    mine[j] = key;
  }
  int head = 0;
  for (int r = 0; r < keep; ++r) {
    const uint64_t best = BlockMax(head < count ? mine[head] : 0, scratch);
    if (head < count && mine[head] == best) ++head;  // keys are distinct: one thread owns it
    if (threadIdx.x == 0) top[r] = best;
  }
  __syncthreads();
  const float max_logit = LogitOf(top[0]);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kThreads) sum += expf(row[i] - max_logit);
  double total = sum;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffffu, total, offset);
  if ((threadIdx.x & 31) == 0) sums[threadIdx.x >> 5] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    double all = 0;
    for (int w = 0; w < kWarps; ++w) all += sums[w];
    const double row_lse = static_cast<double>(max_logit) + log(all);
    lse[blockIdx.x] = static_cast<float>(row_lse);
    sums[0] = row_lse;
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < n) {
    const uint64_t key = top[threadIdx.x];
    top_ids[task.top_offset + threadIdx.x] = IdOf(key);
    top_logprobs[task.top_offset + threadIdx.x] =
        static_cast<float>(static_cast<double>(LogitOf(key)) - sums[0]);
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
