// FP8 weight quantization and decode GEMV (fp8_kernels.h).
#include "backend/cuda/fp8_kernels.h"

#include "common/fp8_e4m3.h"

namespace kvtier::cuda {
namespace {

__device__ __forceinline__ float ToF32(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToF32(f16 v) { return __half2float(v); }
template <typename T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ bf16 FromF32<bf16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ f16 FromF32<f16>(float v) { return __float2half_rn(v); }

constexpr int kQuantizeThreads = 256;
constexpr int kGemvWarps = 8;  // output features per CTA
constexpr int kMaxGemvRows = 8;

template <typename T>
__global__ void QuantizeRowsKernel(const T* weights, int64_t cols, uint8_t* codes, float* scales) {
  const int64_t row = blockIdx.x;
  const T* w = weights + row * cols;
  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) amax = fmaxf(amax, fabsf(ToF32(w[c])));
  // max is exact: any reduction order gives the CPU's result.
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  __shared__ float warp_max[kQuantizeThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x < 32) {
    amax = threadIdx.x < blockDim.x / 32 ? warp_max[threadIdx.x] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    if (threadIdx.x == 0) warp_max[0] = amax;
  }
  __syncthreads();
  amax = warp_max[0];
  const float scale = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;  // IEEE division, as on the host
  if (threadIdx.x == 0) scales[row] = scale;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) codes[row * cols + c] = FloatToFp8E4M3(ToF32(w[c]) / scale);
}

template <typename T>
__global__ void GemvFp8Kernel(const T* x, int num_rows, const uint8_t* codes, const float* scales,
                              int64_t out_features, int64_t in_features, T* out) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (n >= out_features) return;
  const uint8_t* w = codes + n * in_features;
  float acc[kMaxGemvRows] = {};
  // Each lane streams 16 codes (one 16-byte load) per 512-column stride.
  for (int64_t c0 = static_cast<int64_t>(lane) * 16; c0 < in_features; c0 += 32 * 16) {
    const uint4 packed = *reinterpret_cast<const uint4*>(w + c0);
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const float weight = Fp8E4M3ToFloat(static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4))));
#pragma unroll
      for (int r = 0; r < kMaxGemvRows; ++r) {
        if (r < num_rows) acc[r] = fmaf(ToF32(x[r * in_features + c0 + i]), weight, acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kMaxGemvRows; ++r) {
    for (int offset = 16; offset > 0; offset >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
  }
  if (lane == 0) {
    const float scale = scales[n];
    for (int r = 0; r < num_rows; ++r) out[r * out_features + n] = FromF32<T>(acc[r] * scale);
  }
}

}  // namespace

template <typename T>
cudaError_t QuantizeRowsFp8(const T* weights, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                            cudaStream_t stream) {
  if (rows <= 0 || cols <= 0 || rows > INT32_MAX) return cudaErrorInvalidValue;
  QuantizeRowsKernel<T><<<static_cast<unsigned>(rows), kQuantizeThreads, 0, stream>>>(weights, cols, codes, scales);
  return cudaGetLastError();
}

template <typename T>
cudaError_t GemvFp8(const T* x, int num_rows, const uint8_t* codes, const float* scales, int64_t out_features,
                    int64_t in_features, T* out, cudaStream_t stream) {
  if (num_rows < 1 || num_rows > kMaxGemvRows || out_features <= 0 || in_features <= 0 || in_features % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t blocks = (out_features + kGemvWarps - 1) / kGemvWarps;
  GemvFp8Kernel<T><<<static_cast<unsigned>(blocks), kGemvWarps * 32, 0, stream>>>(x, num_rows, codes, scales,
                                                                                 out_features, in_features, out);
  return cudaGetLastError();
}

template cudaError_t QuantizeRowsFp8<bf16>(const bf16*, int64_t, int64_t, uint8_t*, float*, cudaStream_t);
template cudaError_t QuantizeRowsFp8<f16>(const f16*, int64_t, int64_t, uint8_t*, float*, cudaStream_t);
template cudaError_t GemvFp8<bf16>(const bf16*, int, const uint8_t*, const float*, int64_t, int64_t, bf16*,
                                   cudaStream_t);
template cudaError_t GemvFp8<f16>(const f16*, int, const uint8_t*, const float*, int64_t, int64_t, f16*,
                                  cudaStream_t);

}  // namespace kvtier::cuda
