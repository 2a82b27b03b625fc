// The online softmax of the tensor-core prefill attention kernels (prefill_attention.cu,
// prefill_wgmma_tile.cuh) on one tile of scores held as n8 accumulator blocks: s[n][e] is
// row (lane / 4) + 8 * (e / 2) of the warp's 16 and column 8 n + 2 (lane % 4) + e % 2, the
// layout of both mma.sync m16n8 and wgmma m64nN accumulators. Scores are raw Q.K; the
// softmax runs in the log2 domain (scale_log2 = log2(e) / sqrt(head_dim)).
#ifndef KVTIER_BACKEND_CUDA_ONLINE_SOFTMAX_CUH_
#define KVTIER_BACKEND_CUDA_ONLINE_SOFTMAX_CUH_

#include <cmath>
#include <cstdint>

#include "backend/cuda/elem.cuh"

namespace kvtier::cuda {

// Causal mask of the KV tile starting at tile_pos (kN8 * 8 positions): -inf where the
// position is past the row's own (row_pos[h] for this thread's rows h = 0, 1). Tiles that
// end at or before the tile's first query position need none.
template <int kN8>
__device__ __forceinline__ void MaskPastPositions(float (&s)[kN8][4], int tile_pos, int first_pos,
                                                  const int (&row_pos)[2], int lane) {
  if (tile_pos + kN8 * 8 - 1 <= first_pos) return;
#pragma unroll
  for (int n = 0; n < kN8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int pos = tile_pos + n * 8 + (lane & 3) * 2 + (e & 1);
      if (pos > row_pos[e >> 1]) s[n][e] = -INFINITY;
    }
  }
}

// Gemma 2's soft-cap on raw Q.K scores: cap_raw = cap / scale, so that scale times the
// result is cap * tanh(scale * s / cap). Before the masks (tanh would lift a -inf).
template <int kN8>
__device__ __forceinline__ void SoftCapScores(float (&s)[kN8][4], float cap_raw) {
#pragma unroll
  for (int n = 0; n < kN8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = cap_raw * tanhf(s[n][e] / cap_raw);
  }
}

// Sliding-window mask of the KV tile starting at tile_pos: -inf where the position is at or
// before row_pos[h] - window (the row reads keys in (row_pos - window, row_pos]).
template <int kN8>
__device__ __forceinline__ void MaskBeforeWindow(float (&s)[kN8][4], int tile_pos, const int (&row_pos)[2],
                                                 int window, int lane) {
  if (tile_pos > row_pos[0] - window && tile_pos > row_pos[1] - window) return;
#pragma unroll
  for (int n = 0; n < kN8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int pos = tile_pos + n * 8 + (lane & 3) * 2 + (e & 1);
      if (pos <= row_pos[e >> 1] - window) s[n][e] = -INFINITY;
    }
  }
}

// Scores -> unnormalized probabilities against the running max m, with this thread's part
// of the running sums l updated and the factor earlier outputs must be scaled by. Without a
// window the first tile holds position 0, so m is finite from then on and a fully masked
// row of a later tile only gets weights exp2(-inf) = 0; with one, a row may see only masked
// positions in its first tiles, whose max stays -inf: those weigh 0 against a max of 0.
template <int kN8>
__device__ __forceinline__ void OnlineSoftmax(float (&s)[kN8][4], float (&m)[2], float (&l)[2], float scale_log2,
                                              float (&correction)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float row_max = -INFINITY;
#pragma unroll
    for (int n = 0; n < kN8; ++n) row_max = fmaxf(row_max, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
    row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
    row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
    const float m_new = fmaxf(m[h], row_max * scale_log2);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no key read yet: nothing to scale
    correction[h] = exp2f(m[h] - m_use);
    m[h] = m_new;
    float row_sum = 0.0f;
#pragma unroll
    for (int n = 0; n < kN8; ++n) {
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[n][e] = exp2f(fmaf(s[n][e], scale_log2, -m_use));
        row_sum += s[n][e];
      }
    }
    l[h] = l[h] * correction[h] + row_sum;
  }
}

// Output accumulators (same row layout) times each row's correction.
template <int kN8>
__device__ __forceinline__ void RescaleRows(float (&o)[kN8][4], const float (&correction)[2]) {
#pragma unroll
  for (int n = 0; n < kN8; ++n) {
    o[n][0] *= correction[0];
    o[n][1] *= correction[0];
    o[n][2] *= correction[1];
    o[n][3] *= correction[1];
  }
}

// Positions [16 kk, 16 kk + 16) of the probabilities as a 16-bit m16k16 A fragment (the
// register A layout of mma.sync and wgmma).
template <typename T, int kN8>
__device__ __forceinline__ void ProbabilityFragment(const float (&s)[kN8][4], int kk, uint32_t (&a)[4]) {
  a[0] = PackFloat2<T>(s[2 * kk][0], s[2 * kk][1]);
  a[1] = PackFloat2<T>(s[2 * kk][2], s[2 * kk][3]);
  a[2] = PackFloat2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  a[3] = PackFloat2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_ONLINE_SOFTMAX_CUH_
