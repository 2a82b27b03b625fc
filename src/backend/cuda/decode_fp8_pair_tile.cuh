// The fp8 KV loads of decode_attention.cu's pair-tile path (DecodeAttentionParams::
// fp8_pair_tiles): a warp takes 32 positions at a time, two 16-position sub-tiles, and every
// lane issues the loads of both before it computes either. Codes come in 16-byte loads (16
// codes) where the 16-position path issues 8-byte ones, so a warp keeps 8 KB of KV in flight
// per round, as the bf16 path does, in the same number of load instructions; the row scales
// of a lane's four positions come as two 8-byte pairs instead of one 4-byte load per row.
//
// Requires head_dim 128, bf16 compute with the scales applied after the products (the codes
// go to the tensor cores unscaled), and a power-of-two block of at least 16 positions, so
// that an aligned sub-tile lies in one block (one table lookup per sub-tile).
//
// Element orders (the kernel's products do not care about the order of their terms):
//   K and Q: 8-dim piece pi of lane t covers dims PairKDim(pi, t) .. + 8, i.e. a 16-byte code
//     load of dims 16 (4 jj + t) .. + 16 fills pieces 2 jj and 2 jj + 1.
//   V: local element e of lane g is dim PairVDim(e, g) = 16 g + e (one 16-byte code load of
//     the row's dims 16 g .. 16 g + 16 per position).
#ifndef KVTIER_BACKEND_CUDA_DECODE_FP8_PAIR_TILE_CUH_
#define KVTIER_BACKEND_CUDA_DECODE_FP8_PAIR_TILE_CUH_

#include <cstdint>

#include "backend/cuda/fp8_codes.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_fp8.cuh"

namespace kvtier::cuda {

inline constexpr int kPairTileDim = 128;     // head_dim the path supports
inline constexpr int kPairTilePositions = 32;  // positions per warp round (two sub-tiles)

__device__ __forceinline__ int PairKDim(int pi, int t) { return 16 * (4 * (pi / 2) + t) + 8 * (pi % 2); }
__device__ __forceinline__ int PairVDim(int e, int g) { return 16 * g + e; }

// One 16-position sub-tile's codes and scales as a lane holds them.
struct Fp8SubTile {
  uint4 k[2][2];  // K rows g, g + 8 (n); 16 codes at dims 16 (4 jj + t) (jj)
  uint4 v[4];     // V rows 2t, 2t + 1, 2t + 8, 2t + 9: 16 codes at dims 16 g
  float2 ks[2];   // K scales of positions (2t, 2t + 1), (2t + 8, 2t + 9)
  float2 vs[2];   // V scales of the same positions
};

// Start of the sub-tile u of the round at p0 whose rows the lane reads: the round's own, or
// for a second sub-tile wholly past `last`, the one holding `last` (its positions are masked;
// its block is in the table). Sub-tiles are 16-aligned, as split ranges are.
__device__ __forceinline__ int PairSubTileStart(int p0, int u, int last) { return min(p0 + 16 * u, last & ~15); }

// Loads the sub-tile starting at `start` (PairSubTileStart) of table entry `entry` (a pool block
// or a staged slot). k_head: the kv head's first element within a layer's K; v_delta: V's
// offset from K. Rows past `last` read `last`'s codes (finite; their scores are masked); the
// scales of the sub-tile's 16 positions are in the block whatever `last` is and are read
// unclamped: the kernel selects 0 for a masked position's V scale (0 x garbage is not 0).
template <typename T>
__device__ __forceinline__ void LoadFp8SubTile(const PagedKv<T>& kv, int32_t entry, int32_t layer, int start,
                                               int last, int64_t k_head, int64_t v_delta, int g, int t,
                                               Fp8SubTile* out) {
  constexpr int D = kPairTileDim;
  const Fp8Layer slice = Fp8LayerOf<D>(kv, entry, layer);
  const int in0 = start & (kv.block_tokens - 1);
  const uint8_t* k_rows = slice.codes + k_head + static_cast<int64_t>(in0) * D;
  const uint8_t* v_rows = k_rows + v_delta;
  const int last_row = last - start;  // >= 0
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    const uint8_t* row = k_rows + min(g + 8 * n, last_row) * D;
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) out->k[n][jj] = __ldcs(reinterpret_cast<const uint4*>(row + 16 * (4 * jj + t)));
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int pos = 2 * t + (r & 1) + 8 * (r >> 1);
    out->v[r] = __ldcs(reinterpret_cast<const uint4*>(v_rows + min(pos, last_row) * D + 16 * g));
  }
  const float* k_scales = slice.scales + k_head / D + in0;
  const float* v_scales = k_scales + v_delta / D;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    out->ks[h] = __ldcs(reinterpret_cast<const float2*>(k_scales + 2 * t + 8 * h));
    out->vs[h] = __ldcs(reinterpret_cast<const float2*>(v_scales + 2 * t + 8 * h));
  }
}

// The sub-tile's codes as the 16-bit fragments' sources of the kernel's products: kr[n][pi]
// (8 dims per piece, PairKDim) and vr[r][j] (local elements 8 j .. 8 j + 8, PairVDim), unscaled.
template <typename T>
__device__ __forceinline__ void Fp8SubTileToT(const Fp8SubTile& s, uint4 (&kr)[2][4], uint4 (&vr)[4][2]) {
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const uint4 c = s.k[n][jj];
      kr[n][2 * jj] = Fp8CodesToT<T>(make_uint2(c.x, c.y));
      kr[n][2 * jj + 1] = Fp8CodesToT<T>(make_uint2(c.z, c.w));
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    vr[r][0] = Fp8CodesToT<T>(make_uint2(s.v[r].x, s.v[r].y));
    vr[r][1] = Fp8CodesToT<T>(make_uint2(s.v[r].z, s.v[r].w));
  }
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_DECODE_FP8_PAIR_TILE_CUH_
