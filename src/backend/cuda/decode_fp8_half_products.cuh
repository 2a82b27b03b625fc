// Pair tiles with f16 products (DecodeAttentionParams::fp8_pair_tiles 2): a code pair reaches
// the tensor cores by one conversion (e4m3x2 -> f16x2) instead of four through f32 to bf16.
// f16's range is narrower than bf16's, so Q goes in at a power-of-two scale that puts its
// largest magnitude in [2^13, 2^14) (S is multiplied back by its inverse, exactly), and P times
// the V row scales is taken over the largest V scale seen so far (at most 1, and no f16
// subnormal for the positions that matter); when that maximum grows, O is rescaled with the
// softmax's correction, and it is multiplied back once at the end. Stateless device functions
// of decode_attention.cu.
#ifndef KVTIER_BACKEND_CUDA_DECODE_FP8_HALF_PRODUCTS_CUH_
#define KVTIER_BACKEND_CUDA_DECODE_FP8_HALF_PRODUCTS_CUH_

#include <cstdint>

#include "backend/cuda/decode_fragments.cuh"
#include "backend/cuda/elem.cuh"

namespace kvtier::cuda::decode {

// The warp's Q pieces (elements of T; zero rows included) as f16 at that scale, in place;
// returns scale_log2 over the scale.
template <typename T, int N>
__device__ __forceinline__ float QueriesToHalf(uint4 (&q)[N], float scale_log2) {
  float amax = 0.0f;
#pragma unroll
  for (int w = 0; w < 4 * N; ++w) {
    const float2 f = UnpackFloat2<T>(Word(q, w));
    amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  int e = 0;
  frexpf(amax, &e);  // amax < 2^e
  // 2^k by its bits (exact): k in [-114, 100] for every finite bf16 or f16 amax.
  const int k = min(14 - e, 100);
  const float q_scale = amax > 0.0f && isfinite(amax) ? __int_as_float((127 + k) << 23) : 1.0f;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    uint32_t h[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float2 f = UnpackFloat2<T>(Word(q, 4 * j + c));
      h[c] = PackFloat2<f16>(f.x * q_scale, f.y * q_scale);
    }
    q[j] = make_uint4(h[0], h[1], h[2], h[3]);
  }
  return scale_log2 / q_scale;
}

// One sub-tile's V row scales (of the lane's positions 2t, 2t+1, 2t+8, 2t+9; masked ones 0) over
// the largest scale so far, *v_norm, which this updates; returns O's factor for the change
// (old over new maximum; exactly 1 when it did not grow). The quad's four lanes hold the
// sub-tile's 16 positions, so every lane of the warp agrees on the maximum.
__device__ __forceinline__ float NormalizeVScales(float (&p_scale)[4], float* v_norm) {
  float tile = fmaxf(fmaxf(p_scale[0], p_scale[1]), fmaxf(p_scale[2], p_scale[3]));
  tile = fmaxf(tile, __shfl_xor_sync(0xffffffffu, tile, 1));
  tile = fmaxf(tile, __shfl_xor_sync(0xffffffffu, tile, 2));
  const float before = *v_norm, after = fmaxf(before, tile);
  if (!(after > 0.0f)) return 1.0f;  // every scale so far zero: so is every product
  const float inv = 1.0f / after;
#pragma unroll
  for (int j = 0; j < 4; ++j) p_scale[j] *= inv;
  *v_norm = after;
  return after == before ? 1.0f : before * inv;
}

}  // namespace kvtier::cuda::decode

#endif  // KVTIER_BACKEND_CUDA_DECODE_FP8_HALF_PRODUCTS_CUH_
