// The decode GEMV kernel, one template for every weight format: 16-bit weights in the compute
// dtype (gemv.cu: GemvSmallRows, GemvGatedMul) and fp8 E4M3 codes with one fp32 scale per
// output row (fp8_kernels.cu: GemvFp8, GemvGatedMulFp8). Only the bytes of a 16-byte weight
// piece differ between the formats (8 elements or 16 codes, and the scale applied once per
// output); the streaming around them is the same.
//
// Small-batch GEMM (rows <= 8), the decode path: weight-bandwidth bound, so one warp streams
// one weight row (an output column) with 16-byte loads, several in flight, and dots it with
// every activation row (read through L1). With W = 2 (gate|up) the warp streams rows c (gate)
// and n + c (up) of the (2 n, k) matrix and writes only act(gate) * up, so the decode step
// has no separate GatedMul kernel (one more dependent step per layer) and writes half the
// output.
//
// Software-pipelined over the weight row: the loads of batch b+1 go out before batch b is
// consumed, so every lane keeps kUnroll..2*kUnroll 16-byte loads in flight, which brings the
// weight stream closer to the memory bandwidth than one batch at a time. An unroll of 2, not
// 4: more registers per warp leave fewer warps per SM to hide latency (bench/micro/
// decode_chain.cu times the variants in the decode chain).
//
// The first kPre 16-byte pieces of each lane's weights (and the scales) are loaded before the
// PDL wait: weights never depend on the previous kernel, so while a latency-bound kernel (a
// norm, QkvPost, the decode attention) runs, the next projection's CTAs already stream their
// weights into registers instead of idling at the wait.
#ifndef KVTIER_BACKEND_CUDA_GEMV_KERNEL_CUH_
#define KVTIER_BACKEND_CUDA_GEMV_KERNEL_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/fp8_codes.cuh"
#include "backend/cuda/gate_activation.h"
#include "backend/cuda/pdl.h"
#include "backend/cuda_options.h"

namespace kvtier::cuda::gemv {

constexpr int kWarps = 8;   // output features per CTA
constexpr int kUnroll = 2;  // 16-byte pieces per lane per pipelined batch

// The software pipeline of the decode GEMV kernels (Kernel below and fp8_gemv_rows.cuh) over
// the NR weight rows a warp streams, in 16-byte pieces: each lane's first P pieces of every
// row are loaded before the PDL wait (LoadAhead: `ahead` of them, 0 for a warp with no row),
// the rest after it in batches of U pieces, the loads of batch b + 1 issued before batch b is
// consumed (Stream). consume(v, piece) gets the NR rows' pieces at index `piece`, in order.
template <int NR, int P>
__device__ __forceinline__ void LoadAhead(const uint4* const (&rows)[NR], int lane, int ahead, uint4 (&pre)[P][NR]) {
#pragma unroll
  for (int u = 0; u < P; ++u) {
    if (u < ahead) {
#pragma unroll
      for (int j = 0; j < NR; ++j) pre[u][j] = __ldcs(rows[j] + lane + 32 * u);
    }
  }
}

template <int NR, int P, int U, typename Consume>
__device__ __forceinline__ void Stream(const uint4* const (&rows)[NR], int lane, int ahead, int pieces,
                                       const uint4 (&pre)[P][NR], Consume&& consume) {
  const int base = ahead * 32;
  const int batches = (pieces - base) / (32 * U);
  uint4 cur[U][NR];
  if (batches > 0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int j = 0; j < NR; ++j) cur[u][j] = __ldcs(rows[j] + base + lane + 32 * u);
    }
  }
#pragma unroll
  for (int u = 0; u < P; ++u) {
    if (u < ahead) consume(pre[u], lane + 32 * u);
  }
  for (int b = 0; b < batches; ++b) {
    const int at = base + b * 32 * U + lane;
    uint4 next[U][NR];
    if (b + 1 < batches) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int j = 0; j < NR; ++j) next[u][j] = __ldcs(rows[j] + at + 32 * U + 32 * u);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) consume(cur[u], at + 32 * u);
    if (b + 1 < batches) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int j = 0; j < NR; ++j) cur[u][j] = next[u][j];
      }
    }
  }
  for (int i = base + batches * 32 * U + lane; i < pieces; i += 32) {
    uint4 v[NR];
#pragma unroll
    for (int j = 0; j < NR; ++j) v[j] = __ldcs(rows[j] + i);
    consume(v, i);
  }
}

// Weights in the compute dtype T: 8 elements per 16-byte piece, no scales.
template <typename T>
struct Weights16 {
  using Element = T;
  static constexpr int kPerPiece = 8;
  static constexpr int kXPieces = 1;  // 16-byte pieces of x per weight piece
  static constexpr bool kScaled = false;
  static __device__ __forceinline__ void Unpack(const uint4& wv, float (&wf)[kPerPiece]) { Unpack8<T>(wv, wf); }
  // acc += a piece's unpacked weights times its x.
  static __device__ __forceinline__ void Fma(const float (&wf)[kPerPiece], const uint4 (&xv)[kXPieces], float& acc) {
    float xf[8];
    Unpack8<T>(xv[0], xf);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(wf[e], xf[e], acc);
  }
  // acc[r] += the 8 weights of piece `piece` times x[r, 8 * piece ..].
  template <int R>
  static __device__ __forceinline__ void Accumulate(const uint4& wv, const T* __restrict__ x, int k, int piece,
                                                    float (&acc)[R]) {
    float wf[kPerPiece];
    Unpack(wv, wf);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint4 xv[kXPieces] = {__ldg(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(r) * k) + piece)};
      Fma(wf, xv, acc[r]);
    }
  }
};

// fp8 E4M3 codes with one fp32 scale per row: 16 codes per 16-byte piece.
template <typename T>
struct WeightsFp8 {
  using Element = uint8_t;
  static constexpr int kPerPiece = 16;
  static constexpr int kXPieces = 2;
  static constexpr bool kScaled = true;
  static __device__ __forceinline__ void Unpack(const uint4& wv, float (&wf)[kPerPiece]) { Fp8x16ToFloat(wv, wf); }
  static __device__ __forceinline__ void Fma(const float (&wf)[kPerPiece], const uint4 (&xv)[kXPieces], float& acc) {
    float xa[8], xb[8];
    Unpack8<T>(xv[0], xa);
    Unpack8<T>(xv[1], xb);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(wf[e], xa[e], acc);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(wf[8 + e], xb[e], acc);
  }
  // acc[r] += the 16 codes of piece `piece` times x[r, 16 * piece ..].
  template <int R>
  static __device__ __forceinline__ void Accumulate(const uint4& wv, const T* __restrict__ x, int k, int piece,
                                                    float (&acc)[R]) {
    float wf[kPerPiece];
    Unpack(wv, wf);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint4* xr = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(r) * k) + 2 * piece;
      const uint4 xv[kXPieces] = {__ldg(xr), __ldg(xr + 1)};
      Fma(wf, xv, acc[r]);
    }
  }
};

// A warp's epilogue: each lane's partial sums reduced by butterfly, then lane r writes row r of
// column col: the scale (Format::kScaled), A(gate) * up with W = 2, the output type.
template <typename Format, typename T, int R, int W, bool kF32Out, GateActivation A>
__device__ __forceinline__ void Finish(float (&acc)[W][R], const float (&scale)[W], int lane, int col, int n,
                                       void* out) {
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
        if (r == lane) {
          if constexpr (Format::kScaled) {
            v[j] = acc[j][r] * scale[j];
          } else {
            v[j] = acc[j][r];
          }
        }
      }
    }
    float result = v[0];
    if constexpr (W == 2) result = GateTimes<A>(v[0], v[1]);
    const int64_t at = static_cast<int64_t>(lane) * n + col;
    if constexpr (kF32Out) {
      static_cast<float*>(out)[at] = result;
    } else {
      static_cast<T*>(out)[at] = FromFloat<T>(result);
    }
  }
}

// out (R, n) = x (R, k) times w (W * n, k)^T (W = 1), or A(gate) * up of it (W = 2); fp32
// out only with W = 1. `scales` (W * n) with Format::kScaled, else unused.
template <typename Format, typename T, int R, int W, bool kF32Out, int kPre, GateActivation A>
__global__ void __launch_bounds__(kWarps * 32)
    Kernel(const T* __restrict__ x, const typename Format::Element* __restrict__ w, const float* __restrict__ scales,
           int k, int n, void* out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = blockIdx.x * kWarps + warp;
  const bool on = col < n;
  const int64_t row = on ? col : 0;
  const uint4* wrow[W];
#pragma unroll
  for (int j = 0; j < W; ++j) wrow[j] = reinterpret_cast<const uint4*>(w + (row + j * static_cast<int64_t>(n)) * k);
  const int pieces = k / Format::kPerPiece;
  const int ahead = on ? min(kPre, pieces / 32) : 0;  // whole 32-lane groups only
  uint4 pre[kPre][W];
  LoadAhead<W, kPre>(wrow, lane, ahead, pre);
  float scale[W];
  if constexpr (Format::kScaled) {
#pragma unroll
    for (int j = 0; j < W; ++j) scale[j] = __ldg(scales + row + j * static_cast<int64_t>(n));
  }
  PdlWait();
  PdlLaunchDependents();
  if (!on) return;
  float acc[W][R];
#pragma unroll
  for (int j = 0; j < W; ++j) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[j][r] = 0.0f;
  }
  Stream<W, kPre, kUnroll>(wrow, lane, ahead, pieces, pre, [&](const uint4(&v)[W], int piece) {
#pragma unroll
    for (int j = 0; j < W; ++j) Format::template Accumulate<R>(v[j], x, k, piece, acc[j]);
  });
  Finish<Format, T, R, W, kF32Out, A>(acc, scale, lane, col, n, out);
}

// Requires k a multiple of Format::kPerPiece and x, w 16-byte aligned; n >= 1.
template <typename Format, typename T, int R, int W, bool kF32Out, int kPre,
          GateActivation A = GateActivation::kSilu>
cudaError_t Launch(const T* x, const typename Format::Element* w, const float* scales, int k, int n, void* out,
                   cudaStream_t stream, const CudaLaunchOptions& launch) {
  static_assert(W == 1 || !kF32Out, "gate|up writes the compute dtype");
  const dim3 grid((n + kWarps - 1) / kWarps);
  const cudaError_t err =
      LaunchPdl(launch, Kernel<Format, T, R, W, kF32Out, kPre, A>, grid, dim3(kWarps * 32), 0, stream, x, w, scales, k,
                n, out);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace kvtier::cuda::gemv

#endif  // KVTIER_BACKEND_CUDA_GEMV_KERNEL_CUH_
