// The row operations Gemma's layer layout adds to the forward (semantics in kernels.h): the
// RMSNorm of a 16-bit row (the sandwich norms on the attention and MLP outputs before they
// join the residual) and the final logit soft-cap. Neither is on a path whose latency was
// tuned: plain launches, one CTA per row. Stateless.
#include <cmath>
#include <cstdint>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/elem.cuh"
#include "backend/cuda/kernels.h"

namespace kvtier::cuda {
namespace {

constexpr int kThreads = 256;

// Each thread reads x[i] before the block sum and writes out[i] after it, so out may be x.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    RmsNormRowsKernel(const T* x, const float* weight, int dim, float eps, T* out) {
  const int64_t r = blockIdx.x;
  const T* row = x + r * dim;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) {
    const float v = ToFloat(row[i]);
    sum_sq += v * v;
  }
  const float inv_rms = rsqrtf(BlockSum(sum_sq) / static_cast<float>(dim) + eps);
  T* o = out + r * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) o[i] = FromFloat<T>(weight[i] * (ToFloat(row[i]) * inv_rms));
}

__global__ void __launch_bounds__(kThreads) SoftCapRowsKernel(float* logits, int vocab, float cap) {
  float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  for (int i = threadIdx.x; i < vocab; i += kThreads) row[i] = tanhf(row[i] / cap) * cap;
}

}  // namespace

template <typename T>
cudaError_t RmsNormRows(const T* x, const float* weight, int rows, int dim, float eps, T* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows < 0 || dim <= 0) return cudaErrorInvalidValue;
  RmsNormRowsKernel<T><<<rows, kThreads, 0, stream>>>(x, weight, dim, eps, out);
  return cudaGetLastError();
}

cudaError_t SoftCapRows(float* logits, int rows, int vocab, float cap, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows < 0 || vocab <= 0 || !(cap > 0.0f)) return cudaErrorInvalidValue;
  SoftCapRowsKernel<<<rows, kThreads, 0, stream>>>(logits, vocab, cap);
  return cudaGetLastError();
}

#define KVTIER_INSTANTIATE(T) \
  template cudaError_t RmsNormRows<T>(const T*, const float*, int, int, float, T*, cudaStream_t);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
