// Per-token E4M3 quantization fused into RMSNorm and SiLU-mul (fp8_activations.h).
//
// Each kernel makes two passes over its row: the first finds the row's largest magnitude,
// the second recomputes every value and writes its code. The recomputation reads the row
// again, from L1/L2 (a row is at most 56 KiB), which costs less than writing 16-bit values
// to memory and quantizing them in another kernel.
#include "backend/cuda/fp8_activations.h"

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/elem.cuh"
#include "backend/cuda/pdl.h"
#include "common/fp8_e4m3.h"

namespace kvtier::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float RowScale(float amax) { return amax > 0.0f ? amax / kFp8E4M3Max : 1.0f; }

template <typename T, bool kEarly>
__global__ void __launch_bounds__(kThreads)
    AddRmsNormFp8Kernel(float* residual, const T* add, const float* weight, int dim, float eps, uint8_t* codes,
                        float* scales) {
  PdlEnter<kEarly>();
  const int64_t r = blockIdx.x;
  float* x = residual + r * dim;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) {
    float v = x[i];
    if (add != nullptr) {
      v += ToFloat(add[r * dim + i]);
      x[i] = v;
    }
    sum_sq += v * v;
  }
  const float inv_rms = rsqrtf(BlockSum(sum_sq) / static_cast<float>(dim) + eps);
  float amax = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) amax = fmaxf(amax, fabsf(weight[i] * (x[i] * inv_rms)));
  const float scale = RowScale(BlockMax(amax));
  if (threadIdx.x == 0) scales[r] = scale;
  uint8_t* out = codes + r * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) out[i] = FloatToFp8E4M3(weight[i] * (x[i] * inv_rms) / scale);
}

template <typename T>
__device__ __forceinline__ float SiluTimes(const T* row, int dim, int i) {
  const float g = ToFloat(row[i]);
  return g / (1.0f + expf(-g)) * ToFloat(row[dim + i]);
}

template <typename T, bool kEarly>
__global__ void __launch_bounds__(kThreads)
    SiluMulFp8Kernel(const T* gate_up, int dim, uint8_t* codes, float* scales) {
  PdlEnter<kEarly>();
  const int64_t r = blockIdx.x;
  const T* row = gate_up + r * 2 * dim;
  float amax = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) amax = fmaxf(amax, fabsf(SiluTimes(row, dim, i)));
  const float scale = RowScale(BlockMax(amax));
  if (threadIdx.x == 0) scales[r] = scale;
  uint8_t* out = codes + r * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) out[i] = FloatToFp8E4M3(SiluTimes(row, dim, i) / scale);
}

}  // namespace

template <typename T>
cudaError_t AddRmsNormFp8(float* residual, const T* add, const float* weight, int rows, int dim, float eps,
                          uint8_t* codes, float* scales, cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (rows == 0) return cudaSuccess;
  auto kernel = launch.pdl_early_trigger ? AddRmsNormFp8Kernel<T, true> : AddRmsNormFp8Kernel<T, false>;
  const cudaError_t err = LaunchPdl(launch, kernel, dim3(rows), dim3(kThreads), 0, stream, residual, add, weight, dim,
                                    eps, codes, scales);
  return err != cudaSuccess ? err : cudaGetLastError();
}

template <typename T>
cudaError_t SiluMulFp8(const T* gate_up, int rows, int dim, uint8_t* codes, float* scales, cudaStream_t stream,
                       const CudaLaunchOptions& launch) {
  if (rows == 0) return cudaSuccess;
  auto kernel = launch.pdl_early_trigger ? SiluMulFp8Kernel<T, true> : SiluMulFp8Kernel<T, false>;
  const cudaError_t err =
      LaunchPdl(launch, kernel, dim3(rows), dim3(kThreads), 0, stream, gate_up, dim, codes, scales);
  return err != cudaSuccess ? err : cudaGetLastError();
}

#define KVTIER_INSTANTIATE(T)                                                                                   \
  template cudaError_t AddRmsNormFp8<T>(float*, const T*, const float*, int, int, float, uint8_t*, float*,      \
                                        cudaStream_t, const CudaLaunchOptions&);                                \
  template cudaError_t SiluMulFp8<T>(const T*, int, int, uint8_t*, float*, cudaStream_t, const CudaLaunchOptions&);
KVTIER_INSTANTIATE(bf16)
KVTIER_INSTANTIATE(f16)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
