// FP8 weight quantization, decode GEMV and dequantization (fp8_kernels.h).
#include "backend/cuda/fp8_kernels.h"

#include <cuda_fp8.h>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/fp8_gemv_rows.cuh"
#include "backend/cuda/pdl.h"
#include "common/fp8_e4m3.h"

namespace kvtier::cuda {
namespace {

constexpr int kQuantizeThreads = 256;
constexpr int kGemvWarps = 8;   // output features per CTA
constexpr int kGemvUnroll = 2;  // 16-byte pieces per lane per pipelined batch, as gemv.cu
// Pieces per lane loaded before the PDL wait. One piece is 16 codes here (8 elements in
// gemv.cu), so 4 pieces cover 2048 columns of each row: the 16-bit GEMV's default depth in
// bytes (gemv.cu, GemvPrefetchPieces, says why).
constexpr int kGemvPre = 4;

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

// 16 codes as floats: the hardware's e4m3x2 -> f16x2 conversion (exact: every E4M3 value is
// an f16 value), then f16 -> f32 (exact).
__device__ __forceinline__ void DecodeFp8x16(const uint4& v, float (&f)[16]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(w[i] >> (16 * half));
      const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
      const float2 t = __half22float2(__half2(raw));
      f[4 * i + 2 * half] = t.x;
      f[4 * i + 2 * half + 1] = t.y;
    }
  }
}

// acc[r] += the 16 codes of piece `piece` times x[r, 16 * piece ..].
template <typename T, int R>
__device__ __forceinline__ void AccumulateFp8(const uint4& wv, const T* __restrict__ x, int k, int piece,
                                              float (&acc)[R]) {
  float wf[16];
  DecodeFp8x16(wv, wf);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uint4* xr = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(r) * k) + 2 * piece;
    float xa[8], xb[8];
    Unpack8<T>(__ldg(xr), xa);
    Unpack8<T>(__ldg(xr + 1), xb);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xa[e], acc[r]);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[8 + e], xb[e], acc[r]);
  }
}

// Warp `col` streams weight row col (and, kSilu, row n + col: the up row of gate|up) in
// the pipelined order of gemv.cu's GemvKernel; the scales are applied once per output.
template <typename T, int R, bool kSilu>
__global__ void __launch_bounds__(kGemvWarps * 32)
    GemvFp8Kernel(const T* __restrict__ x, const uint8_t* __restrict__ codes, const float* __restrict__ scales,
                  int k, int n, T* __restrict__ out) {
  constexpr int W = kSilu ? 2 : 1;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = blockIdx.x * kGemvWarps + warp;
  const bool on = col < n;
  const int64_t row = on ? col : 0;
  const uint4* wrow[W];
#pragma unroll
  for (int j = 0; j < W; ++j) wrow[j] = reinterpret_cast<const uint4*>(codes + (row + j * static_cast<int64_t>(n)) * k);
  const int vecs = k / 16;
  const int pre_n = on ? min(kGemvPre, vecs / 32) : 0;  // whole 32-lane groups only
  const int base = pre_n * 32;
  const int batches = (vecs - base) / (32 * kGemvUnroll);
  float acc[W][R];
#pragma unroll
  for (int j = 0; j < W; ++j) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[j][r] = 0.0f;
  }
  uint4 pre[W][kGemvPre];
#pragma unroll
  for (int u = 0; u < kGemvPre; ++u) {
    if (u < pre_n) {
#pragma unroll
      for (int j = 0; j < W; ++j) pre[j][u] = __ldcs(wrow[j] + lane + 32 * u);
    }
  }
  float scale[W];
#pragma unroll
  for (int j = 0; j < W; ++j) scale[j] = __ldg(scales + row + j * static_cast<int64_t>(n));
  PdlWait();
  PdlLaunchDependents();
  if (!on) return;
  uint4 cur[W][kGemvUnroll];
  if (batches > 0) {
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < W; ++j) cur[j][u] = __ldcs(wrow[j] + base + lane + 32 * u);
    }
  }
#pragma unroll
  for (int u = 0; u < kGemvPre; ++u) {
    if (u < pre_n) {
#pragma unroll
      for (int j = 0; j < W; ++j) AccumulateFp8<T, R>(pre[j][u], x, k, lane + 32 * u, acc[j]);
    }
  }
  for (int b = 0; b < batches; ++b) {
    const int at = base + b * 32 * kGemvUnroll + lane;
    uint4 next[W][kGemvUnroll];
    if (b + 1 < batches) {
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
#pragma unroll
        for (int j = 0; j < W; ++j) next[j][u] = __ldcs(wrow[j] + at + 32 * kGemvUnroll + 32 * u);
      }
    }
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < W; ++j) AccumulateFp8<T, R>(cur[j][u], x, k, at + 32 * u, acc[j]);
    }
    if (b + 1 < batches) {
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
#pragma unroll
        for (int j = 0; j < W; ++j) cur[j][u] = next[j][u];
      }
    }
  }
  for (int i = base + batches * 32 * kGemvUnroll + lane; i < vecs; i += 32) {
#pragma unroll
    for (int j = 0; j < W; ++j) AccumulateFp8<T, R>(__ldcs(wrow[j] + i), x, k, i, acc[j]);
  }
#pragma unroll
  for (int j = 0; j < W; ++j) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) acc[j][r] += __shfl_xor_sync(0xffffffffu, acc[j][r], offset);
    }
  }
  if (lane < R) {
    float v[W];
#pragma unroll
    for (int j = 0; j < W; ++j) {
      v[j] = 0.0f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r == lane) v[j] = acc[j][r] * scale[j];
      }
    }
    float result = v[0];
    if constexpr (kSilu) result = v[0] / (1.0f + expf(-v[0])) * v[W - 1];
    out[static_cast<int64_t>(lane) * n + col] = FromFloat<T>(result);
  }
}

// 16 codes per thread (cols % 16 == 0, so a piece never straddles two rows).
template <typename T>
__global__ void DequantizeRowsKernel(const uint8_t* __restrict__ codes, const float* __restrict__ scales,
                                     int64_t cols, int64_t pieces, T* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pieces; p += stride) {
    const float s = __ldg(scales + p * 16 / cols);
    float f[16];
    DecodeFp8x16(__ldcs(reinterpret_cast<const uint4*>(codes) + p), f);
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

template <typename T, int R, bool kSilu>
cudaError_t LaunchGemvFp8(const T* x, const uint8_t* codes, const float* scales, int k, int n, T* out,
                          cudaStream_t stream, const CudaLaunchOptions& launch) {
  const dim3 grid((n + kGemvWarps - 1) / kGemvWarps);
  const cudaError_t err =
      LaunchPdl(launch, GemvFp8Kernel<T, R, kSilu>, grid, dim3(kGemvWarps * 32), 0, stream, x, codes, scales, k, n, out);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One activation row (the single-sequence decode step): fp8_gemv_rows.cuh's kernel with 2
// weight rows per warp (each activation piece loaded and unpacked once for both), 2 pieces
// per row before the PDL wait and 2 per pipelined batch, for the plain projections and for
// gate|up + SiLU alike. Variants with one piece per batch or more registers (fewer CTAs per
// SM) stream slower; bench/micro/fp8_decode_chain.cu times them in the whole decode chain.
template <typename T, bool kSilu>
cudaError_t LaunchGemvFp8OneRow(const T* x, const uint8_t* codes, const float* scales, int k, int n, T* out,
                                cudaStream_t stream, const CudaLaunchOptions& launch) {
  if constexpr (kSilu) {
    return LaunchGemvFp8Rows<T, 2, 2, 2, true>(x, codes, scales, k, n, out, stream, launch);
  } else {
    return LaunchGemvFp8Rows<T, 2, 2, 2, false>(x, codes, scales, k, n, out, stream, launch);
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
cudaError_t GemvSiluMulFp8(const T* x, int num_rows, const uint8_t* codes, const float* scales, int64_t inter,
                           int64_t in_features, T* out, cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (num_rows > 2 || !GemvFp8Supported(num_rows, in_features, x, codes) || inter <= 0 || inter > INT32_MAX / 2) {
    return cudaErrorInvalidValue;
  }
  const int k = static_cast<int>(in_features), n = static_cast<int>(inter);
  return num_rows == 1 ? LaunchGemvFp8OneRow<T, true>(x, codes, scales, k, n, out, stream, launch)
                       : LaunchGemvFp8<T, 2, true>(x, codes, scales, k, n, out, stream, launch);
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
  template cudaError_t GemvSiluMulFp8<T>(const T*, int, const uint8_t*, const float*, int64_t, int64_t, T*,      \
                                         cudaStream_t, const CudaLaunchOptions&);                                \
  template cudaError_t DequantizeRowsFp8<T>(const uint8_t*, const float*, int64_t, int64_t, T*, cudaStream_t);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
