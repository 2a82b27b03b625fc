// The one-row fp8 decode GEMV with several weight rows per warp: out (1, n) T = x (1, k) T
// times the fp8 codes (n, k) with per-output-channel scales (fp8_kernels.h GemvFp8, R = 1).
//
// Why several rows per warp: one 16-byte load is 16 codes, so per weight byte an fp8 GEMV
// does twice the conversion and FMA work of the 16-bit one and reads twice the activation
// bytes through L1. With RW rows per warp each activation piece is loaded and unpacked once
// for RW rows, and each lane has RW independent code loads in flight per step. The shape
// of the pipeline is gemv_kernel.cuh's (LoadAhead, Stream): P pieces per row loaded before the
// PDL wait (weights never depend on the previous kernel), then batches of U pieces
// software-pipelined.
//
// kGated: the fused gate|up projection (codes (2 n, k): gate rows then up rows, each with its
// own scale), out = A(gate) * up.
#ifndef KVTIER_BACKEND_CUDA_FP8_GEMV_ROWS_CUH_
#define KVTIER_BACKEND_CUDA_FP8_GEMV_ROWS_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gate_activation.h"

#include "backend/cuda/elem.cuh"
#include "backend/cuda/fp8_codes.cuh"
#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/pdl.h"

namespace kvtier::cuda {

constexpr int kGemvFp8RowsWarps = 8;

namespace fp8_rows {

// acc += dot(16 codes, xf[16]), in element order.
__device__ __forceinline__ float Dot16(const uint4& v, const float (&xf)[16], float acc) {
  float wf[16];
  Fp8x16ToFloat(v, wf);
#pragma unroll
  for (int e = 0; e < 16; ++e) acc = fmaf(wf[e], xf[e], acc);
  return acc;
}

template <typename T>
__device__ __forceinline__ void LoadX16(const T* __restrict__ x, int piece, float (&xf)[16]) {
  const uint4* xp = reinterpret_cast<const uint4*>(x) + 2 * piece;
  float a[8], b[8];
  Unpack8<T>(__ldg(xp), a);
  Unpack8<T>(__ldg(xp + 1), b);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    xf[e] = a[e];
    xf[8 + e] = b[e];
  }
}

}  // namespace fp8_rows

template <typename T, int RW, int P, int U, bool kGated, GateActivation A>
__global__ void __launch_bounds__(kGemvFp8RowsWarps * 32)
    GemvFp8RowsKernel(const T* __restrict__ x, const uint8_t* __restrict__ codes, const float* __restrict__ scales,
                      int k, int n, T* __restrict__ out) {
  constexpr int NR = RW * (kGated ? 2 : 1);  // code rows this warp streams
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int first = (blockIdx.x * kGemvFp8RowsWarps + warp) * RW;
  const bool on = first < n;
  const uint4* wrow[NR];
  int64_t srow[NR];
#pragma unroll
  for (int j = 0; j < NR; ++j) {
    // Rows past n (the last warp of a ragged n) re-read row n - 1 and are not written.
    const int r = min(first + j % RW, n - 1);
    srow[j] = r + (j / RW) * static_cast<int64_t>(n);
    wrow[j] = reinterpret_cast<const uint4*>(codes + srow[j] * k);
  }
  const int pieces = k / 16;
  const int ahead = on ? min(P, pieces / 32) : 0;  // whole 32-lane groups only
  uint4 pre[P][NR];
  gemv::LoadAhead<NR, P>(wrow, lane, ahead, pre);
  float scale[NR];
#pragma unroll
  for (int j = 0; j < NR; ++j) scale[j] = __ldg(scales + srow[j]);
  PdlWait();
  PdlLaunchDependents();
  if (!on) return;
  float acc[NR];
#pragma unroll
  for (int j = 0; j < NR; ++j) acc[j] = 0.0f;
  gemv::Stream<NR, P, U>(wrow, lane, ahead, pieces, pre, [&](const uint4(&v)[NR], int piece) {
    float xf[16];
    fp8_rows::LoadX16(x, piece, xf);
#pragma unroll
    for (int j = 0; j < NR; ++j) acc[j] = fp8_rows::Dot16(v[j], xf, acc[j]);
  });
#pragma unroll
  for (int j = 0; j < NR; ++j) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], offset);
  }
  // Lane j writes output first + j (all lanes hold every sum after the butterfly).
#pragma unroll
  for (int j = 0; j < RW; ++j) {
    if (lane == j && first + j < n) {
      float v = acc[j] * scale[j];
      if constexpr (kGated) v = GateTimes<A>(v, acc[RW + j] * scale[RW + j]);
      out[first + j] = FromFloat<T>(v);
    }
  }
}

// Requires k % 16 == 0 and x, codes 16-byte aligned (GemvFp8Supported); n >= 1.
template <typename T, int RW, int P, int U, bool kGated, GateActivation A = GateActivation::kSilu>
cudaError_t LaunchGemvFp8Rows(const T* x, const uint8_t* codes, const float* scales, int k, int n, T* out,
                              cudaStream_t stream, const CudaLaunchOptions& launch) {
  constexpr int kRowsPerCta = kGemvFp8RowsWarps * RW;
  const dim3 grid((n + kRowsPerCta - 1) / kRowsPerCta);
  const cudaError_t err = LaunchPdl(launch, GemvFp8RowsKernel<T, RW, P, U, kGated, A>, grid,
                                    dim3(kGemvFp8RowsWarps * 32), 0, stream, x, codes, scales, k, n, out);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_FP8_GEMV_ROWS_CUH_
