// Small-batch GEMM (rows <= kGemvMaxRows), the decode path: weight-bandwidth bound, so one
// warp streams one weight row (an output column) with 16-byte loads, several in flight,
// and dots it with every activation row (read through L1). Semantics in kernels.h.
#include <cstdint>

#include "backend/cuda/kernels.h"

namespace kvtier::cuda {
namespace {

constexpr int kGemvWarps = 8;
constexpr int kGemvUnroll = 4;

__device__ __forceinline__ void Unpack8(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(p[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

template <int R>
__device__ __forceinline__ void Accumulate(const uint4& wv, const bf16* __restrict__ x, int k,
                                           int vec, float (&acc)[R]) {
  float wf[8];
  Unpack8(wv, wf);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(r) * k) + vec);
    float xf[8];
    Unpack8(xv, xf);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
  }
}

template <int R, bool kF32Out>
__global__ void __launch_bounds__(kGemvWarps * 32)
    GemvKernel(const bf16* __restrict__ x, const bf16* __restrict__ w, int k, int n, void* out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = blockIdx.x * kGemvWarps + warp;
  if (col >= n) return;
  const uint4* wrow = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(col) * k);
  const int vecs = k / 8;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  int i = lane;
  for (; i + 32 * (kGemvUnroll - 1) < vecs; i += 32 * kGemvUnroll) {
    uint4 wv[kGemvUnroll];
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) wv[u] = __ldcs(wrow + i + 32 * u);
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) Accumulate<R>(wv[u], x, k, i + 32 * u, acc);
  }
  for (; i < vecs; i += 32) Accumulate<R>(__ldcs(wrow + i), x, k, i, acc);
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
      static_cast<bf16*>(out)[at] = __float2bfloat16(v);
    }
  }
}

template <int R>
cudaError_t LaunchGemv(const bf16* x, const bf16* w, int k, int n, void* out, bool out_f32,
                       cudaStream_t stream) {
  const dim3 grid((n + kGemvWarps - 1) / kGemvWarps);
  if (out_f32) {
    GemvKernel<R, true><<<grid, kGemvWarps * 32, 0, stream>>>(x, w, k, n, out);
  } else {
    GemvKernel<R, false><<<grid, kGemvWarps * 32, 0, stream>>>(x, w, k, n, out);
  }
  return cudaGetLastError();
}

}  // namespace

bool GemvSupported(int rows, int k, const void* x, const void* w) {
  return rows >= 1 && rows <= kGemvMaxRows && k % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

cudaError_t GemvSmallRows(const bf16* x, const bf16* w, int rows, int k, int n, void* out,
                          bool out_f32, cudaStream_t stream) {
  if (!GemvSupported(rows, k, x, w)) return cudaErrorInvalidValue;
  switch (rows) {
    case 1: return LaunchGemv<1>(x, w, k, n, out, out_f32, stream);
    case 2: return LaunchGemv<2>(x, w, k, n, out, out_f32, stream);
    case 3: return LaunchGemv<3>(x, w, k, n, out, out_f32, stream);
    case 4: return LaunchGemv<4>(x, w, k, n, out, out_f32, stream);
    case 5: return LaunchGemv<5>(x, w, k, n, out, out_f32, stream);
    case 6: return LaunchGemv<6>(x, w, k, n, out, out_f32, stream);
    case 7: return LaunchGemv<7>(x, w, k, n, out, out_f32, stream);
    default: return LaunchGemv<8>(x, w, k, n, out, out_f32, stream);
  }
}

}  // namespace kvtier::cuda
