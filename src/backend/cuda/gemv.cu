// Small-batch GEMM (rows <= kGemvMaxRows), the decode path: weight-bandwidth bound, so one
// warp streams one weight row (an output column) with 16-byte loads, several in flight,
// and dots it with every activation row (read through L1). Semantics in kernels.h.
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.h"

namespace kvtier::cuda {
namespace {

constexpr int kGemvWarps = 8;
constexpr int kGemvUnroll = 2;

template <typename T, int R>
__device__ __forceinline__ void Accumulate(const uint4& wv, const T* __restrict__ x, int k,
                                           int vec, float (&acc)[R]) {
  float wf[8];
  Unpack8<T>(wv, wf);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(r) * k) + vec);
    float xf[8];
    Unpack8<T>(xv, xf);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
  }
}

// Software-pipelined over the weight row: the loads of batch b+1 go out before batch b is
// consumed, so every lane keeps kGemvUnroll..2*kGemvUnroll 16-byte loads in flight, which
// brings the weight stream closer to the memory bandwidth than one batch at a time. An
// unroll of 2, not 4: more registers per warp leave fewer warps per SM to hide latency
// (bench/micro/decode_chain.cu times the variants in the decode chain).
//
// The first kPre 16-byte pieces of each lane's weights are loaded before the PDL wait:
// weights never depend on the previous kernel, so while a latency-bound kernel (a norm,
// QkvPost, the decode attention) runs, the next projection's CTAs already stream their
// weights into registers instead of idling at the wait.
template <typename T, int R, bool kF32Out, int kPre>
__global__ void __launch_bounds__(kGemvWarps * 32)
    GemvKernel(const T* __restrict__ x, const T* __restrict__ w, int k, int n, void* out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = blockIdx.x * kGemvWarps + warp;
  const bool on = col < n;
  const uint4* wrow = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(on ? col : 0) * k);
  const int vecs = k / 8;
  const int pre_n = on ? min(kPre, vecs / 32) : 0;  // whole 32-lane groups only
  const int base = pre_n * 32;
  const int batches = (vecs - base) / (32 * kGemvUnroll);
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  uint4 pre[kPre];
#pragma unroll
  for (int u = 0; u < kPre; ++u) {
    if (u < pre_n) pre[u] = __ldcs(wrow + lane + 32 * u);
  }
  PdlWait();
  PdlLaunchDependents();
  if (!on) return;
  uint4 cur[kGemvUnroll];
  if (batches > 0) {
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) cur[u] = __ldcs(wrow + base + lane + 32 * u);
  }
#pragma unroll
  for (int u = 0; u < kPre; ++u) {
    if (u < pre_n) Accumulate<T, R>(pre[u], x, k, lane + 32 * u, acc);
  }
  for (int b = 0; b < batches; ++b) {
    const int at = base + b * 32 * kGemvUnroll + lane;
    uint4 next[kGemvUnroll];
    if (b + 1 < batches) {
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) next[u] = __ldcs(wrow + at + 32 * kGemvUnroll + 32 * u);
    }
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) Accumulate<T, R>(cur[u], x, k, at + 32 * u, acc);
    if (b + 1 < batches) {
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) cur[u] = next[u];
    }
  }
  for (int i = base + batches * 32 * kGemvUnroll + lane; i < vecs; i += 32) {
    Accumulate<T, R>(__ldcs(wrow + i), x, k, i, acc);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
  }
  if (lane < R) {
    float v = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r == lane) v = acc[r];
    }
    const int64_t at = static_cast<int64_t>(lane) * n + col;
    if constexpr (kF32Out) {
      static_cast<float*>(out)[at] = v;
    } else {
      static_cast<T*>(out)[at] = FromFloat<T>(v);
    }
  }
}

// The gate|up projection with SiLU(gate) * up fused in: warp c dots x with weight rows c
// (gate) and inter + c (up) of the (2 * inter, k) matrix and writes only the product, so
// the decode step has no separate SiluMul kernel (one more dependent step per layer) and
// writes half the output. Both rows are software-pipelined as in GemvKernel.
template <typename T, int R, int kPre>
__global__ void __launch_bounds__(kGemvWarps * 32)
    GemvSiluMulKernel(const T* __restrict__ x, const T* __restrict__ w, int k, int inter,
                      T* __restrict__ out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = blockIdx.x * kGemvWarps + warp;
  const bool on = col < inter;
  const int64_t row = on ? col : 0;
  const uint4* grow = reinterpret_cast<const uint4*>(w + row * k);
  const uint4* urow = reinterpret_cast<const uint4*>(w + (row + inter) * k);
  const int vecs = k / 8;
  const int pre_n = on ? min(kPre, vecs / 32) : 0;  // as GemvKernel, for each of the two rows
  const int base = pre_n * 32;
  const int batches = (vecs - base) / (32 * kGemvUnroll);
  float gacc[R], uacc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) gacc[r] = uacc[r] = 0.0f;
  uint4 gpre[kPre], upre[kPre];
#pragma unroll
  for (int u = 0; u < kPre; ++u) {
    if (u < pre_n) {
      gpre[u] = __ldcs(grow + lane + 32 * u);
      upre[u] = __ldcs(urow + lane + 32 * u);
    }
  }
  PdlWait();
  PdlLaunchDependents();
  if (!on) return;
  uint4 gcur[kGemvUnroll], ucur[kGemvUnroll];
  if (batches > 0) {
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      gcur[u] = __ldcs(grow + base + lane + 32 * u);
      ucur[u] = __ldcs(urow + base + lane + 32 * u);
    }
  }
#pragma unroll
  for (int u = 0; u < kPre; ++u) {
    if (u < pre_n) {
      Accumulate<T, R>(gpre[u], x, k, lane + 32 * u, gacc);
      Accumulate<T, R>(upre[u], x, k, lane + 32 * u, uacc);
    }
  }
  for (int b = 0; b < batches; ++b) {
    const int at = base + b * 32 * kGemvUnroll + lane;
    uint4 gnext[kGemvUnroll], unext[kGemvUnroll];
    if (b + 1 < batches) {
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        gnext[u] = __ldcs(grow + at + 32 * kGemvUnroll + 32 * u);
        unext[u] = __ldcs(urow + at + 32 * kGemvUnroll + 32 * u);
      }
    }
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      Accumulate<T, R>(gcur[u], x, k, at + 32 * u, gacc);
      Accumulate<T, R>(ucur[u], x, k, at + 32 * u, uacc);
    }
    if (b + 1 < batches) {
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        gcur[u] = gnext[u];
        ucur[u] = unext[u];
      }
    }
  }
  for (int i = base + batches * 32 * kGemvUnroll + lane; i < vecs; i += 32) {
    Accumulate<T, R>(__ldcs(grow + i), x, k, i, gacc);
    Accumulate<T, R>(__ldcs(urow + i), x, k, i, uacc);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      gacc[r] += __shfl_xor_sync(0xffffffffu, gacc[r], offset);
      uacc[r] += __shfl_xor_sync(0xffffffffu, uacc[r], offset);
    }
  }
  if (lane < R) {
    float g = 0.0f, u = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r == lane) {
        g = gacc[r];
        u = uacc[r];
      }
    }
    out[static_cast<int64_t>(lane) * inter + col] = FromFloat<T>(g / (1.0f + expf(-g)) * u);
  }
}

// 16-byte pieces per lane loaded before the PDL wait (kPre): CudaLaunchOptions::
// gemv_prefetch rounded down to an instantiated 2, 4 or 8. More pieces keep more of the
// weight stream going while the previous kernel finishes, but at 8 the kernel needs so many
// registers that fewer CTAs fit on an SM and the stream stalls, while 2 leaves more of the
// previous kernel's time unused: hence the default 4 (docs/CUDA_BACKEND.md, "Projections").
int GemvPrefetchPieces(const CudaLaunchOptions& launch) {
  const int requested = launch.gemv_prefetch;
  return requested >= 8 ? 8 : requested >= 4 ? 4 : 2;
}

template <typename T, int R, bool kF32Out>
cudaError_t LaunchGemvOut(const T* x, const T* w, int k, int n, void* out, cudaStream_t stream,
                          const CudaLaunchOptions& launch) {
  const dim3 grid((n + kGemvWarps - 1) / kGemvWarps);
  const dim3 block(kGemvWarps * 32);
  switch (GemvPrefetchPieces(launch)) {
    case 8:
      return LaunchPdl(launch, GemvKernel<T, R, kF32Out, 8>, grid, block, 0, stream, x, w, k, n,
                       out);
    case 4:
      return LaunchPdl(launch, GemvKernel<T, R, kF32Out, 4>, grid, block, 0, stream, x, w, k, n,
                       out);
    default:
      return LaunchPdl(launch, GemvKernel<T, R, kF32Out, 2>, grid, block, 0, stream, x, w, k, n,
                       out);
  }
}

template <typename T, int R>
cudaError_t LaunchGemv(const T* x, const T* w, int k, int n, void* out, bool out_f32,
                       cudaStream_t stream, const CudaLaunchOptions& launch) {
  const cudaError_t err = out_f32 ? LaunchGemvOut<T, R, true>(x, w, k, n, out, stream, launch)
                                  : LaunchGemvOut<T, R, false>(x, w, k, n, out, stream, launch);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

template <typename T, int R>
cudaError_t LaunchGemvSiluMul(const T* x, const T* w, int k, int inter, T* out,
                              cudaStream_t stream, const CudaLaunchOptions& launch) {
  const dim3 grid((inter + kGemvWarps - 1) / kGemvWarps);
  const dim3 block(kGemvWarps * 32);
  cudaError_t err;
  switch (GemvPrefetchPieces(launch)) {
    case 8:
      err = LaunchPdl(launch, GemvSiluMulKernel<T, R, 8>, grid, block, 0, stream, x, w, k, inter,
                      out);
      break;
    case 4:
      err = LaunchPdl(launch, GemvSiluMulKernel<T, R, 4>, grid, block, 0, stream, x, w, k, inter,
                      out);
      break;
    default:
      err = LaunchPdl(launch, GemvSiluMulKernel<T, R, 2>, grid, block, 0, stream, x, w, k, inter,
                      out);
      break;
  }
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t GemvSiluMul(const T* x, const T* w_gate_up, int rows, int k, int inter, T* out,
                        cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (rows < 1 || rows > 2 || !GemvSupported(rows, k, x, w_gate_up)) return cudaErrorInvalidValue;
  return rows == 1 ? LaunchGemvSiluMul<T, 1>(x, w_gate_up, k, inter, out, stream, launch)
                   : LaunchGemvSiluMul<T, 2>(x, w_gate_up, k, inter, out, stream, launch);
}

bool GemvSupported(int rows, int k, const void* x, const void* w) {
  return rows >= 1 && rows <= kGemvMaxRows && k % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

template <typename T>
cudaError_t GemvSmallRows(const T* x, const T* w, int rows, int k, int n, void* out,
                          bool out_f32, cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (!GemvSupported(rows, k, x, w)) return cudaErrorInvalidValue;
  switch (rows) {
    case 1: return LaunchGemv<T, 1>(x, w, k, n, out, out_f32, stream, launch);
    case 2: return LaunchGemv<T, 2>(x, w, k, n, out, out_f32, stream, launch);
    case 3: return LaunchGemv<T, 3>(x, w, k, n, out, out_f32, stream, launch);
    case 4: return LaunchGemv<T, 4>(x, w, k, n, out, out_f32, stream, launch);
    case 5: return LaunchGemv<T, 5>(x, w, k, n, out, out_f32, stream, launch);
    case 6: return LaunchGemv<T, 6>(x, w, k, n, out, out_f32, stream, launch);
    case 7: return LaunchGemv<T, 7>(x, w, k, n, out, out_f32, stream, launch);
    default: return LaunchGemv<T, 8>(x, w, k, n, out, out_f32, stream, launch);
  }
}

#define KVTIER_INSTANTIATE(T)                                                               \
  template cudaError_t GemvSiluMul<T>(const T*, const T*, int, int, int, T*, cudaStream_t, \
                                      const CudaLaunchOptions&);                           \
  template cudaError_t GemvSmallRows<T>(const T*, const T*, int, int, int, void*, bool,    \
                                        cudaStream_t, const CudaLaunchOptions&);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
