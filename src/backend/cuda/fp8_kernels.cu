// FP8 weight quantization, decode GEMV and dequantization (fp8_kernels.h).
#include "backend/cuda/fp8_kernels.h"

#include <cuda_fp8.h>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/fp8_gemv_rows.cuh"
#include "backend/cuda/gemv_bulk.cuh"
#include "backend/cuda/pdl.h"
#include "common/fp8_e4m3.h"

namespace kvtier::cuda {
namespace {

constexpr int kQuantizeThreads = 256;
// Pieces per lane loaded before the PDL wait. One piece is 16 codes here (8 elements in
// gemv.cu), so 4 pieces cover 2048 columns of each row: the 16-bit GEMV's default depth in
// bytes (gemv.cu, GemvPrefetchPieces, says why).
constexpr int kGemvPre = 4;
// The one-row fp8 GEMV takes the copy engine by default up to this many bytes of codes: Qwen3-
// 30B-A3B's qkv and o (10.5 and 8.4 MB) made W1 steps 2.9% faster that way, Llama-3-8B's (25.2
// and 16.8 MB) 5.7% slower (bench/results/2026-12-07-l2-prefetch).
constexpr int64_t kFp8OneRowBulkMaxBytes = int64_t{12} << 20;

template <typename T>
__global__ void QuantizeRowsKernel(const T* weights, int64_t cols, uint8_t* codes, float* scales) {
  const int64_t row = blockIdx.x;
  const T* w = weights + row * cols;
  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) amax = fmaxf(amax, fabsf(ToFloat(w[c])));
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
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) codes[row * cols + c] = FloatToFp8E4M3(ToFloat(w[c]) / scale);
}

// 16 codes per thread (cols % 16 == 0, so a piece never straddles two rows).
template <typename T>
__global__ void DequantizeRowsKernel(const uint8_t* __restrict__ codes, const float* __restrict__ scales,
                                     int64_t cols, int64_t pieces, T* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pieces; p += stride) {
    const float s = __ldg(scales + p * 16 / cols);
    float f[16];
    Fp8x16ToFloat(__ldcs(reinterpret_cast<const uint4*>(codes) + p), f);
    float a[8], b[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      a[e] = f[e] * s;
      b[e] = f[8 + e] * s;
    }
    uint4* o = reinterpret_cast<uint4*>(out) + 2 * p;
    o[0] = Pack8<T>(a);
    o[1] = Pack8<T>(b);
  }
}

// Any shape: one element per thread.
template <typename T>
__global__ void DequantizeRowsScalarKernel(const uint8_t* __restrict__ codes, const float* __restrict__ scales,
                                           int64_t cols, int64_t count, T* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    out[i] = FromFloat<T>(Fp8E4M3ToFloat(codes[i]) * scales[i / cols]);
  }
}

// R activation rows (2..8) against the codes: plain, or gate|up with activation A (kGated).
template <typename T, int R, bool kGated, GateActivation A = GateActivation::kSilu>
cudaError_t LaunchGemvFp8(const T* x, const uint8_t* codes, const float* scales, int k, int n, T* out,
                          cudaStream_t stream, const CudaLaunchOptions& launch) {
  return gemv::LaunchDecodeGemv<gemv::WeightsFp8<T>, T, R, kGated ? 2 : 1, false, kGemvPre, A>(x, codes, scales, k, n, out,
                                                                                     stream, launch);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One activation row (the single-sequence decode step): fp8_gemv_rows.cuh's kernel with 2
// weight rows per warp (each activation piece loaded and unpacked once for both), 2 pieces
// per row before the PDL wait and 2 per pipelined batch, for the plain projections and for
// gate|up + activation alike. Variants with one piece per batch or more registers (fewer CTAs per
// SM) stream slower; bench/micro/fp8_decode_chain.cu times them in the whole decode chain.
// gemv_bulk.cuh's kernel runs instead where the whole matrix fits in the SMs' shared memory and
// launch.gemv_bulk asks for it (1), or leaves the choice (-1) and the matrix is at most
// kFp8OneRowBulkMaxBytes (the same bits: each lane's pieces in the same order, the same
// butterfly and scale).
template <typename T, bool kGated, GateActivation A = GateActivation::kSilu>
cudaError_t LaunchGemvFp8OneRow(const T* x, const uint8_t* codes, const float* scales, int k, int n, T* out,
                                cudaStream_t stream, const CudaLaunchOptions& launch) {
  constexpr int W = kGated ? 2 : 1;
  const bool bulk = launch.gemv_bulk == 1 ||
                    (launch.gemv_bulk < 0 && int64_t{W} * n * k <= kFp8OneRowBulkMaxBytes);
  const size_t shared = bulk ? gemv::BulkSharedBytes<gemv::WeightsFp8<T>, T, 1, W, false, A>(k, n) : 0;
  if (shared > 0) {
    return gemv::LaunchBulk<gemv::WeightsFp8<T>, T, 1, W, false, A>(x, codes, scales, k, n, out, shared, stream,
                                                                      launch);
  }
  return LaunchGemvFp8Rows<T, 2, 2, 2, kGated, A>(x, codes, scales, k, n, out, stream, launch);
}

template <typename T, GateActivation A>
cudaError_t LaunchGemvGatedFp8(const T* x, int num_rows, const uint8_t* codes, const float* scales, int k, int n,
                               T* out, cudaStream_t stream, const CudaLaunchOptions& launch) {
  return num_rows == 1 ? LaunchGemvFp8OneRow<T, true, A>(x, codes, scales, k, n, out, stream, launch)
                       : LaunchGemvFp8<T, 2, true, A>(x, codes, scales, k, n, out, stream, launch);
}

}  // namespace

template <typename T>
cudaError_t QuantizeRowsFp8(const T* weights, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                            cudaStream_t stream) {
  if (rows <= 0 || cols <= 0 || rows > INT32_MAX) return cudaErrorInvalidValue;
  QuantizeRowsKernel<T><<<static_cast<unsigned>(rows), kQuantizeThreads, 0, stream>>>(weights, cols, codes, scales);
  return cudaGetLastError();
}

bool GemvFp8Supported(int num_rows, int64_t in_features, const void* x, const void* codes) {
  return num_rows >= 1 && num_rows <= kGemvFp8MaxRows && in_features > 0 && in_features % 16 == 0 &&
         in_features <= INT32_MAX && Aligned16(x) && Aligned16(codes);
}

template <typename T>
cudaError_t GemvFp8(const T* x, int num_rows, const uint8_t* codes, const float* scales, int64_t out_features,
                    int64_t in_features, T* out, cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (!GemvFp8Supported(num_rows, in_features, x, codes) || out_features <= 0 || out_features > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  const int k = static_cast<int>(in_features), n = static_cast<int>(out_features);
  switch (num_rows) {
    case 1: return LaunchGemvFp8OneRow<T, false>(x, codes, scales, k, n, out, stream, launch);
    case 2: return LaunchGemvFp8<T, 2, false>(x, codes, scales, k, n, out, stream, launch);
    case 3: return LaunchGemvFp8<T, 3, false>(x, codes, scales, k, n, out, stream, launch);
    case 4: return LaunchGemvFp8<T, 4, false>(x, codes, scales, k, n, out, stream, launch);
    case 5: return LaunchGemvFp8<T, 5, false>(x, codes, scales, k, n, out, stream, launch);
    case 6: return LaunchGemvFp8<T, 6, false>(x, codes, scales, k, n, out, stream, launch);
    case 7: return LaunchGemvFp8<T, 7, false>(x, codes, scales, k, n, out, stream, launch);
    default: return LaunchGemvFp8<T, 8, false>(x, codes, scales, k, n, out, stream, launch);
  }
}

template <typename T>
cudaError_t GemvGatedMulFp8(const T* x, int num_rows, const uint8_t* codes, const float* scales, int64_t inter,
                            int64_t in_features, GateActivation act, T* out, cudaStream_t stream,
                            const CudaLaunchOptions& launch) {
  if (num_rows > 2 || !GemvFp8Supported(num_rows, in_features, x, codes) || inter <= 0 || inter > INT32_MAX / 2) {
    return cudaErrorInvalidValue;
  }
  const int k = static_cast<int>(in_features), n = static_cast<int>(inter);
  return act == GateActivation::kGeluTanh
             ? LaunchGemvGatedFp8<T, GateActivation::kGeluTanh>(x, num_rows, codes, scales, k, n, out, stream, launch)
             : LaunchGemvGatedFp8<T, GateActivation::kSilu>(x, num_rows, codes, scales, k, n, out, stream, launch);
}

template <typename T>
cudaError_t DequantizeRowsFp8(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, T* out,
                              cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaErrorInvalidValue;
  constexpr int kThreads = 256;
  constexpr int64_t kMaxBlocks = int64_t{1} << 16;
  if (cols % 16 == 0 && Aligned16(codes) && Aligned16(out)) {
    const int64_t pieces = rows * cols / 16;
    const int64_t blocks = std::min(kMaxBlocks, (pieces + kThreads - 1) / kThreads);
    DequantizeRowsKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(codes, scales, cols, pieces, out);
  } else {
    const int64_t count = rows * cols;
    const int64_t blocks = std::min(kMaxBlocks, (count + kThreads - 1) / kThreads);
    DequantizeRowsScalarKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(codes, scales, cols, count,
                                                                                           out);
  }
  return cudaGetLastError();
}

#define KVTIER_INSTANTIATE(T)                                                                                    \
  template cudaError_t QuantizeRowsFp8<T>(const T*, int64_t, int64_t, uint8_t*, float*, cudaStream_t);          \
  template cudaError_t GemvFp8<T>(const T*, int, const uint8_t*, const float*, int64_t, int64_t, T*, cudaStream_t, \
                                  const CudaLaunchOptions&);                                                     \
  template cudaError_t GemvGatedMulFp8<T>(const T*, int, const uint8_t*, const float*, int64_t, int64_t,         \
                                          GateActivation, T*, cudaStream_t, const CudaLaunchOptions&);           \
  template cudaError_t DequantizeRowsFp8<T>(const uint8_t*, const float*, int64_t, int64_t, T*, cudaStream_t);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
