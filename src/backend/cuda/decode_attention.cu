// Decode attention (see decode_attention.h): one query token per row against its paged
// context, graph-capturable and bandwidth-bound.
//
// Grid (rows, kv heads, max_splits), 4 warps per CTA. Each CTA reads its row's position
// from device memory, derives how many splits the row really uses (SplitOf: at least
// kMinSplitTokens positions per split, ranges in whole 16-position tiles) and exits when its
// split is empty, so launch dimensions never depend on context lengths.
//
// A warp takes 16-position tiles (warp w: tiles w, w+4, ...) and does both products on the
// tensor cores (mma.sync m16n8k16, bf16 or fp16 in, fp32 accumulate), which keeps the per-position
// cost to a few instructions and needs no per-position shuffle reduction:
//   S (16 x 16)  = Q (16 rows = the GQA group's heads, zero-padded) . K^T
//   O^T (D x 8)  += V^T (D x 16) . P^T (16 x 8 heads)
// The S accumulator of rows 0..7 is exactly the B fragment P^T of the second product, so P
// never leaves registers, and O^T needs no padded rows (32 fp32 registers for D = 128).
// All heads of the group share each K/V load (K/V are read once per kv head).
//
// K and V go straight from global memory into fragments with 16-byte loads (8 KB per warp
// and tile in flight for D = 128; no shared memory staging). That works because a dot
// product does not care about the order of its terms: each lane loads 16-byte pieces of a
// K row and Q row in the same permuted order (KPiece below), and V is loaded in 16-byte pieces
// of 8 consecutive dims whose fragment pairs are rebuilt with byte permutes (VDim below);
// the permutation of O's dims is undone when writing out. Block ids of the next tile are
// fetched while the current tile computes, so the table lookup stays off the critical path.
//
// Warps combine through shared memory; a row with one split writes `out` directly. Otherwise
// each CTA writes an unnormalised partial (O, max, sum), and the last CTA of the (row, kv
// head) to arrive (atomic counter) merges all splits and resets the counter to zero, so one
// kernel per layer suffices and replays of a captured graph find the counters zeroed.
//
// kv_dtype fp8 (PagedKv::fp8): the same pieces are loaded as 8 codes (8 bytes) plus the row's
// scale, all loads of a tile first, then converted in registers into the 16-bit fragments
// (kv_fp8.cuh), so the tensor-core code is the same; half the KV bytes cross. With bf16
// compute the codes go in unscaled (exact) and the row scales multiply S (K's) and P (V's)
// per position (kFp8ScalesAfterProducts); with f16 each code is dequantized first. The
// pair-tile path (decode_fp8_pair_tile.cuh) takes 32 positions a round with 16-byte code
// loads, so that a warp has as many KV bytes in flight as on the bf16 path; its f16 form
// multiplies in f16, where a code pair converts in one instruction
// (decode_fp8_half_products.cuh).
//
// Launched with programmatic dependent launch (pdl.h): the metadata chain (rows -> pos,
// chunk -> indptr -> first block ids: four dependent loads, four memory latencies) runs
// before PdlWait, overlapping the previous kernel's tail; q, KV, partials and counters are
// touched only after it.
#include "backend/cuda/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cuda/decode_fp8_half_products.cuh"
#include "backend/cuda/decode_fp8_pair_tile.cuh"
#include "backend/cuda/decode_fragments.cuh"
#include "backend/cuda/elem.cuh"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/pdl.h"

namespace kvtier::cuda {
namespace {

using decode::Mma;  // decode_fragments.cuh
using decode::PackRounded;
using decode::PairOf;
using decode::Word;
using decode::NormalizeVScales;  // decode_fp8_half_products.cuh
using decode::QueriesToHalf;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 16;                        // positions per warp iteration (mma N / K)
constexpr int kMaxGroup = kDecodeMaxGroup;       // query heads per kv head (mma N of P.V)
constexpr int kMinSplitTokens = kWarps * kTile;  // every warp of a split gets >= 1 tile
constexpr unsigned kFull = 0xffffffffu;

static_assert(kDecodeMaxSplitsLimit >= kDecodeMaxSplitsCap, "heuristic exceeds the kernel limit");

// fp8 KV, bf16 compute: K and V codes go to the tensor cores unscaled (exact in bf16) and
// the row scales multiply S (K) and P (V) per position, 8 multiplies per lane and tile
// instead of 128, where dequantizing first makes the kernel instruction-bound
// (DecodeAttentionParams::fp8_scales_after_products compares the two; docs/CUDA_BACKEND.md,
// "fp8 KV").
constexpr bool kFp8ScalesAfterProducts = true;
// fp8 KV in rounds of 32 positions with 16-byte code loads (decode_fp8_pair_tile.cuh) where
// the shape allows, 1 with products in T, 2 in f16; DecodeAttentionParams::fp8_pair_tiles
// compares them (0: 16-position tiles).
constexpr int kFp8PairTiles = 1;

struct SplitRange {
  int begin = 0;  // first position
  int end = 0;    // one past the last position
  int count = 0;  // splits the row uses
};

// Splits of a context of `ctx` positions: as many as max_splits allows with at least
// kMinSplitTokens positions each, every split a whole number of kWarps tiles (balanced
// warps) and none empty. Computed identically by every CTA of the row.
__device__ __forceinline__ SplitRange SplitOf(int ctx, int split, int max_splits) {
  const int tiles = (ctx + kTile - 1) / kTile;
  int count = min(max_splits, (ctx + kMinSplitTokens - 1) / kMinSplitTokens);
  int per = (tiles + count - 1) / count;
  per = (per + kWarps - 1) / kWarps * kWarps;
  count = (tiles + per - 1) / per;
  SplitRange r;
  r.begin = split * per * kTile;
  r.end = min(ctx, (split + 1) * per * kTile);
  r.count = count;
  return r;
}

// KV is read exactly once: stream it past L1 and let L2 evict it first. (An L2::256B
// prefetch hint on these loads measured no better.)
template <typename T>
__device__ __forceinline__ uint4 LoadStream(const T* p) {
  return __ldcs(reinterpret_cast<const uint4*>(p));
}

// Q/K layout per lane (g = lane / 4, t = lane % 4): local element e in [0, D/4) of a row is
// dim KDim(e); 16-byte piece j covers dims 8 * (4j + t) .. + 8 (4 lanes: 64 contiguous
// bytes per load instruction). k-step s of S = Q.K^T uses local words 2s (logical k 2t,
// 2t+1) and 2s+1 (k 2t+8, 2t+9) of both Q (A operand) and K (B operand).
__device__ __forceinline__ int KPiece(int j, int t) { return 8 * (4 * j + t); }
// V layout per lane: local element e in [0, D/8) of a position is dim VDim(e); piece j
// covers dims 8 * (8j + g) .. + 8 (8 lanes: 128 contiguous bytes per load instruction).
// O^T m-tile i row g holds element i, row g + 8 element D/16 + i.
__device__ __forceinline__ int VDim(int e, int g) { return 8 * (8 * (e / 8) + g) + e % 8; }

// The explicit min-blocks of 1 stops ptxas from capping the D = 64 instance at 96
// registers with a spill (it then takes 111). How many CTAs fit an SM depends on each
// instance's registers: DecodeResidentCtasPerSm asks the runtime.
// kHalf (pair tiles only): the products in f16 instead of T (decode_fp8_half_products.cuh).
template <typename T, int D, bool kFp8, bool kFold, bool kPair, bool kHalf>
__global__ void __launch_bounds__(kThreads, 1)
    DecodeAttentionKernel(DecodeAttentionParams<T> p, StepTokens tok, PagedKv<T> kv, int group,
                          float scale_log2, int bt_shift) {
  static_assert(!kHalf || kPair, "f16 products need the pair tiles' scales after the products");
  using M = std::conditional_t<kHalf, f16, T>;  // what the tensor cores multiply
  const float softcap_log2 = p.scores.logit_softcap * 1.44269504f;  // 0: none
  constexpr int kMTiles = D / 16;   // k-steps of S, m-tiles of O^T
  constexpr int kKPieces = D / 32;  // 16-byte K (and Q) loads per position per lane
  constexpr int kVPieces = D / 64;  // 16-byte V loads per position per lane
  constexpr int kD4 = D / 4;
  __shared__ __align__(16) float s_o[kWarps][kMaxGroup][D];
  __shared__ float s_m[kWarps][kMaxGroup], s_l[kWarps][kMaxGroup];
  __shared__ float s_w[kMaxGroup][kDecodeMaxSplitsLimit];
  __shared__ bool s_last;

  const int row = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int token = p.rows[row];
  const int ctx = tok.pos[token] + 1;
  // A sliding window reads positions [first, ctx); the splits cover them from the tile
  // boundary at or below `first` (tiles stay within blocks), the positions before it masked.
  const int first = p.scores.window > 0 ? max(0, ctx - p.scores.window) : 0;
  const int span = first & ~(kTile - 1);
  SplitRange range = SplitOf(ctx - span, split, p.max_splits);
  range.begin += span, range.end += span;
  if (split >= range.count) return;
  const int32_t* table = kv.indices + kv.indptr[tok.chunk[token]];

  const int bt = kv.block_tokens;
  const int64_t k_head = static_cast<int64_t>(kv_head) * bt * D;  // within a layer slice
  const int64_t v_delta = static_cast<int64_t>(kv.num_kv_heads) * bt * D;
  const int last = range.end - 1;
  // This lane's positions in a tile: K rows g, g+8 (S columns); V rows 2t, 2t+1, 2t+8,
  // 2t+9 (P^T rows). Clamped to the range so tail loads stay inside the table (their
  // scores are masked to -inf below).
  auto tile_positions = [&](int p0, int (&pp)[6]) {
    pp[0] = p0 + g;
    pp[1] = p0 + g + 8;
    pp[2] = p0 + 2 * t;
    pp[3] = p0 + 2 * t + 1;
    pp[4] = p0 + 2 * t + 8;
    pp[5] = p0 + 2 * t + 9;
#pragma unroll
    for (int i = 0; i < 6; ++i) pp[i] = min(pp[i], last);
  };
  auto lookup = [&](int p0, int32_t (&blk)[6]) {
    int pp[6];
    tile_positions(p0, pp);
#pragma unroll
    for (int i = 0; i < 6; ++i) blk[i] = table[bt_shift >= 0 ? pp[i] >> bt_shift : pp[i] / bt];
  };
  auto row_ptr = [&](int32_t block, int pos) {
    const int in_block = bt_shift >= 0 ? (pos & (bt - 1)) : pos % bt;
    return KvLayerBase(kv, block, p.layer) + k_head + static_cast<int64_t>(in_block) * D;
  };
  // kFp8: the row's first code and its scale (row offsets in elements = bytes).
  auto row_fp8 = [&](int32_t block, int pos, int64_t delta, float* scale) {
    const int in_block = bt_shift >= 0 ? (pos & (bt - 1)) : pos % bt;
    const Fp8Layer slice = Fp8LayerOf<D>(kv, block, p.layer);  // a pool block or a staged slot
    const int64_t row = k_head + delta + static_cast<int64_t>(in_block) * D;
    *scale = __ldcs(slice.scales + row / D);
    return slice.codes + row;
  };

  float o[kMTiles][4];
#pragma unroll
  for (int i = 0; i < kMTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // of head g (shared by the lane quad); l lane-partial

  const int num_tiles = (range.end - range.begin + kTile - 1) / kTile;
  int32_t blk[6] = {0, 0, 0, 0, 0, 0};
  // kPair: the table entries of the two sub-tiles of this warp's next round.
  int32_t pair_entry[2] = {0, 0};
  auto pair_lookup = [&](int p0) {
#pragma unroll
    for (int u = 0; u < 2; ++u) pair_entry[u] = table[PairSubTileStart(p0, u, last) >> bt_shift];
  };
  if constexpr (kPair) {
    if (warp * kPairTilePositions < range.end - range.begin) pair_lookup(range.begin + warp * kPairTilePositions);
  } else if (warp < num_tiles) {
    lookup(range.begin + warp * kTile, blk);
  }

  // Everything below may read what earlier kernels wrote (q, this token's K/V, partials).
  PdlWait();
  PdlLaunchDependents();
  // Q rows of the group (A operand rows 0..group-1; rows >= group and 8..15 are zero).
  uint4 q[kKPieces];
#pragma unroll
  for (int j = 0; j < kKPieces; ++j) q[j] = make_uint4(0, 0, 0, 0);
  if (g < group) {
    const T* qp =
        p.q + (static_cast<int64_t>(token) * p.num_heads + kv_head * group + g) * D;
#pragma unroll
    for (int j = 0; j < kKPieces; ++j) {
      q[j] = *reinterpret_cast<const uint4*>(qp + (kPair ? PairKDim(j, t) : KPiece(j, t)));
    }
  }
  float score_log2 = scale_log2;  // what S's products are multiplied by (with the K row scales)
  if constexpr (kHalf) score_log2 = QueriesToHalf<T>(q, scale_log2);
  // One 16-position tile: S, the online softmax and O^T += V^T.P^T. kFold: s_scale and p_scale
  // are the K and V row scales of the lane's positions p0 + 2t, 2t+1, 2t+8, 2t+9.
  // o_ratio: a factor on O besides the softmax's correction (kHalf: the V normalizer's change).
  auto process_tile = [&](int p0, const uint4 (&kr)[2][kKPieces], const uint4 (&vr)[4][kVPieces],
                          const float (&s_scale)[4], const float (&p_scale)[4], float o_ratio) {
    // S: lane holds S[head g][positions 2t, 2t+1] (n = 0) and [8+2t, 8+2t+1] (n = 1).
    float s[2][4];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int k = 0; k < kMTiles; ++k) {
        Mma<M>(s[n], Word(q, 2 * k), 0u, Word(q, 2 * k + 1), 0u, Word(kr[n], 2 * k),
            Word(kr[n], 2 * k + 1));
      }
    }
    float x[4] = {s[0][0], s[0][1], s[1][0], s[1][1]};
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int pos = p0 + 2 * t + (j & 1) + (j >> 1) * 8;
      float v = x[j] * s_scale[j] * score_log2;
      if (softcap_log2 > 0.0f) v = softcap_log2 * tanhf(v / softcap_log2);  // cap tanh(s / cap), log2 domain
      x[j] = pos >= first && pos < range.end ? v : -INFINITY;
      tile_max = fmaxf(tile_max, x[j]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFull, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFull, tile_max, 2));
    const float m_new = fmaxf(m, tile_max);  // finite: every tile holds `first` or starts past it
    const float correction = exp2f(m - m_new);
    float tile_sum = 0.0f;
    uint32_t pb0, pb1;
    if constexpr (kFold) {
      // P times the V row scales, rounded once; the softmax sum takes P itself.
      float e[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) e[j] = exp2f(x[j] - m_new);
      tile_sum = (e[0] + e[1]) + (e[2] + e[3]);
      pb0 = PackFloat2<M>(e[0] * p_scale[0], e[1] * p_scale[1]);
      pb1 = PackFloat2<M>(e[2] * p_scale[2], e[3] * p_scale[3]);
    } else {
      pb0 = PackRounded<M>(exp2f(x[0] - m_new), exp2f(x[1] - m_new), &tile_sum);
      pb1 = PackRounded<M>(exp2f(x[2] - m_new), exp2f(x[3] - m_new), &tile_sum);
    }
    l = l * correction + tile_sum;
    m = m_new;
    // O^T columns of this lane are heads 2t and 2t+1: fetch their corrections.
    const float c0 = __shfl_sync(kFull, correction, 8 * t) * o_ratio;
    const float c1 = __shfl_sync(kFull, correction, 8 * t + 4) * o_ratio;
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
      o[i][0] *= c0;
      o[i][1] *= c1;
      o[i][2] *= c0;
      o[i][3] *= c1;
      Mma<M>(o[i], PairOf(vr[0], vr[1], i), PairOf(vr[0], vr[1], kMTiles + i),
          PairOf(vr[2], vr[3], i), PairOf(vr[2], vr[3], kMTiles + i), pb0, pb1);
    }
  };
  if constexpr (kPair) {
    // Rounds of 32 positions (decode_fp8_pair_tile.cuh): both sub-tiles' loads first, then
    // the next round's block ids, then the two tiles' products.
    const int num_rounds = (range.end - range.begin + kPairTilePositions - 1) / kPairTilePositions;
    float v_norm = 0.0f;  // kHalf: the largest V row scale so far, which P times the V scales is over
    for (int round = warp; round < num_rounds; round += kWarps) {
      const int p0 = range.begin + round * kPairTilePositions;
      Fp8SubTile sub[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        LoadFp8SubTile(kv, pair_entry[u], p.layer, PairSubTileStart(p0, u, last), last, k_head, v_delta, g, t,
                       &sub[u]);
      }
      if (round + kWarps < num_rounds) pair_lookup(p0 + kWarps * kPairTilePositions);
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        uint4 kr[2][kKPieces], vr[4][kVPieces];
        Fp8SubTileToT<M>(sub[u], kr, vr);
        const int q0 = p0 + 16 * u;
        // A masked position's V scale is 0, not the garbage its unwritten row may hold.
        const float s_scale[4] = {sub[u].ks[0].x, sub[u].ks[0].y, sub[u].ks[1].x, sub[u].ks[1].y};
        float p_scale[4] = {sub[u].vs[0].x, sub[u].vs[0].y, sub[u].vs[1].x, sub[u].vs[1].y};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (q0 + 2 * t + (j & 1) + (j >> 1) * 8 >= range.end) p_scale[j] = 0.0f;
        }
        float o_ratio = 1.0f;
        if constexpr (kHalf) o_ratio = NormalizeVScales(p_scale, &v_norm);
        if (q0 < range.end) process_tile(q0, kr, vr, s_scale, p_scale, o_ratio);
      }
    }
    if constexpr (kHalf) {  // O in V's own units again, for the combine below
#pragma unroll
      for (int i = 0; i < kMTiles; ++i) {
#pragma unroll
        for (int c = 0; c < 4; ++c) o[i][c] *= v_norm;
      }
    }
  } else {
  for (int tile = warp; tile < num_tiles; tile += kWarps) {
    const int p0 = range.begin + tile * kTile;
    int pp[6];
    tile_positions(p0, pp);
    uint4 kr[2][kKPieces], vr[4][kVPieces];
    // kFold: the K scales of this lane's S positions (2t, 2t+1, 2t+8, 2t+9: its V rows) and
    // the V scales, applied to S and P instead of to every code.
    float s_scale[4] = {1.0f, 1.0f, 1.0f, 1.0f}, p_scale[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    if constexpr (kFp8) {
      // Same pieces as below, 8 codes (8 bytes) each: all loads first, then the next block
      // ids, then the dequantization, so the loads are in flight together.
      uint2 kc[2][kKPieces], vc[4][kVPieces];
      float ks[2], vs[4];
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const uint8_t* kp = row_fp8(blk[n], pp[n], 0, &ks[n]);
#pragma unroll
        for (int j = 0; j < kKPieces; ++j) kc[n][j] = __ldcs(reinterpret_cast<const uint2*>(kp + KPiece(j, t)));
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const uint8_t* vp = row_fp8(blk[2 + r], pp[2 + r], v_delta, &vs[r]);
#pragma unroll
        for (int j = 0; j < kVPieces; ++j) vc[r][j] = __ldcs(reinterpret_cast<const uint2*>(vp + 8 * (8 * j + g)));
      }
      if constexpr (kFold) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          row_fp8(blk[2 + r], pp[2 + r], 0, &s_scale[r]);
          p_scale[r] = vs[r];
        }
      }
      if (tile + kWarps < num_tiles) lookup(p0 + kWarps * kTile, blk);
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int j = 0; j < kKPieces; ++j) {
          kr[n][j] = kFold ? Fp8CodesToT<T>(kc[n][j]) : DequantFp8x8<T>(kc[n][j], ks[n]);
        }
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int j = 0; j < kVPieces; ++j) {
          vr[r][j] = kFold ? Fp8CodesToT<T>(vc[r][j]) : DequantFp8x8<T>(vc[r][j], vs[r]);
        }
      }
    } else {
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const T* kp = row_ptr(blk[n], pp[n]);
#pragma unroll
        for (int j = 0; j < kKPieces; ++j) kr[n][j] = LoadStream(kp + KPiece(j, t));
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const T* vp = row_ptr(blk[2 + r], pp[2 + r]) + v_delta;
#pragma unroll
        for (int j = 0; j < kVPieces; ++j) vr[r][j] = LoadStream(vp + 8 * (8 * j + g));
      }
      if (tile + kWarps < num_tiles) lookup(p0 + kWarps * kTile, blk);
    }

    process_tile(p0, kr, vr, s_scale, p_scale, 1.0f);
  }
  }

  // Combine the warps (a warp without tiles contributes m = -inf, l = 0, O = 0).
  l += __shfl_xor_sync(kFull, l, 1);
  l += __shfl_xor_sync(kFull, l, 2);
  if (t == 0) {
    s_m[warp][g] = m;
    s_l[warp][g] = l;
  }
#pragma unroll
  for (int i = 0; i < kMTiles; ++i) {
    const int d0 = kPair ? PairVDim(i, g) : VDim(i, g);
    const int d1 = kPair ? PairVDim(kMTiles + i, g) : VDim(kMTiles + i, g);
    s_o[warp][2 * t][d0] = o[i][0];
    s_o[warp][2 * t + 1][d0] = o[i][1];
    s_o[warp][2 * t][d1] = o[i][2];
    s_o[warp][2 * t + 1][d1] = o[i][3];
  }
  __syncthreads();

  const bool direct = range.count == 1;
  const int64_t slot0 = static_cast<int64_t>(row) * p.max_splits;
  const int64_t slot = slot0 + split;
  for (int idx = threadIdx.x; idx < group * kD4; idx += kThreads) {
    const int h = idx / kD4, d = (idx % kD4) * 4;
    float m_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_max = fmaxf(m_max, s_m[w][h]);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float l_sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = s_m[w][h];
      if (mw == -INFINITY) continue;
      const float c = exp2f(mw - m_max);
      const float4 v = *reinterpret_cast<const float4*>(&s_o[w][h][d]);
      acc.x += c * v.x;
      acc.y += c * v.y;
      acc.z += c * v.z;
      acc.w += c * v.w;
      l_sum += c * s_l[w][h];
    }
    const int head = kv_head * group + h;
    if (direct) {
      const float inv = 1.0f / l_sum;
      const uint2 packed =
          make_uint2(PackFloat2<T>(acc.x * inv, acc.y * inv), PackFloat2<T>(acc.z * inv, acc.w * inv));
      *reinterpret_cast<uint2*>(p.out + (static_cast<int64_t>(token) * p.num_heads + head) * D +
                                d) = packed;
    } else {
      const int64_t at = slot * p.num_heads + head;
      *reinterpret_cast<float4*>(p.partial_out + at * D + d) = acc;
      if (d == 0) *reinterpret_cast<float2*>(p.partial_ml + at * 2) = make_float2(m_max, l_sum);
    }
  }
  if (direct) return;

  // Publish the partial, then count arrivals; the last CTA of the (row, kv head) merges.
  uint32_t* counter = p.split_counters + row * kv.num_kv_heads + kv_head;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    s_last = atomicAdd(counter, 1u) == static_cast<uint32_t>(range.count - 1);
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();

  // Per head: weights exp2(m_s - M) / L of every split (L2 reads: other CTAs' stores).
  for (int h = warp; h < group; h += kWarps) {
    const int head = kv_head * group + h;
    float m_max = -INFINITY;
    for (int sidx = lane; sidx < range.count; sidx += 32) {
      m_max = fmaxf(m_max, __ldcg(p.partial_ml + ((slot0 + sidx) * p.num_heads + head) * 2));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m_max = fmaxf(m_max, __shfl_xor_sync(kFull, m_max, off));
    float l_sum = 0.0f;
    for (int sidx = lane; sidx < range.count; sidx += 32) {
      const float2 ml = __ldcg(reinterpret_cast<const float2*>(
          p.partial_ml + ((slot0 + sidx) * p.num_heads + head) * 2));
      const float c = exp2f(ml.x - m_max);
      s_w[h][sidx] = c;
      l_sum += c * ml.y;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) l_sum += __shfl_xor_sync(kFull, l_sum, off);
    const float inv = 1.0f / l_sum;
    for (int sidx = lane; sidx < range.count; sidx += 32) s_w[h][sidx] *= inv;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * kD4; idx += kThreads) {
    const int h = idx / kD4, d = (idx % kD4) * 4;
    const int head = kv_head * group + h;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int sidx = 0; sidx < range.count; ++sidx) {
      const float w = s_w[h][sidx];
      const float4 v = __ldcg(reinterpret_cast<const float4*>(
          p.partial_out + ((slot0 + sidx) * p.num_heads + head) * D + d));
      acc.x += w * v.x;
      acc.y += w * v.y;
      acc.z += w * v.z;
      acc.w += w * v.w;
    }
    const uint2 packed = make_uint2(PackFloat2<T>(acc.x, acc.y), PackFloat2<T>(acc.z, acc.w));
    *reinterpret_cast<uint2*>(p.out + (static_cast<int64_t>(token) * p.num_heads + head) * D + d) =
        packed;
  }
  if (threadIdx.x == 0) *counter = 0;  // ready for the next launch (all arrivals are in)
}


template <typename T>
using DecodeKernelFn = void (*)(DecodeAttentionParams<T>, StepTokens, PagedKv<T>, int, float, int);

// log2(block_tokens) for a power of two, else -1.
int BlockShift(int block_tokens) {
  if (block_tokens <= 0 || (block_tokens & (block_tokens - 1)) != 0) return -1;
  int shift = 0;
  while ((1 << shift) < block_tokens) ++shift;
  return shift;
}

// The kernel instance for a shape: fp8 KV with bf16 compute puts the scales after the
// products (kFold) unless the caller asks otherwise (not for f16: P times a small V scale
// would fall into f16's subnormals), and takes the pair tiles where the shape allows.
template <typename T>
DecodeKernelFn<T> PickDecodeKernel(int head_dim, bool fp8, int bt_shift, int32_t scales_after_products,
                                   int32_t pair_tiles) {
  const bool fold = fp8 && std::is_same_v<T, bf16> &&
                    (scales_after_products < 0 ? kFp8ScalesAfterProducts : scales_after_products > 0);
  const int pair_mode = pair_tiles < 0 ? kFp8PairTiles : pair_tiles;
  const bool pair = fold && head_dim == kPairTileDim && bt_shift >= 4 && pair_mode > 0;
  if constexpr (std::is_same_v<T, bf16>) {
    if (pair) {
      return pair_mode == 2 ? DecodeAttentionKernel<T, 128, true, true, true, true>
                            : DecodeAttentionKernel<T, 128, true, true, true, false>;
    }
  }
  return head_dim == 128 ? (fold   ? DecodeAttentionKernel<T, 128, true, true, false, false>
                            : fp8  ? DecodeAttentionKernel<T, 128, true, false, false, false>
                                   : DecodeAttentionKernel<T, 128, false, false, false, false>)
                         : (fold  ? DecodeAttentionKernel<T, 64, true, true, false, false>
                            : fp8 ? DecodeAttentionKernel<T, 64, true, false, false, false>
                                  : DecodeAttentionKernel<T, 64, false, false, false, false>);
}

}  // namespace

template <typename T>
int32_t DecodeResidentCtasPerSm(int32_t head_dim, bool fp8_kv, int32_t block_tokens, int32_t fp8_pair_tiles) {
  if (head_dim != 64 && head_dim != 128) return 1;
  int ctas = 0;
  const DecodeKernelFn<T> kernel = PickDecodeKernel<T>(head_dim, fp8_kv, BlockShift(block_tokens), -1, fp8_pair_tiles);
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kThreads, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  return std::max(ctas, 1);
}

template <typename T>
cudaError_t DecodeAttention(const DecodeAttentionParams<T>& params, StepTokens tokens,
                            PagedKv<T> kv, cudaStream_t stream,
                            const CudaLaunchOptions& launch) {
  if (params.num_rows == 0) return cudaSuccess;
  if (!DecodeAttentionSupported(kv.head_dim, params.num_heads, kv.num_kv_heads) ||
      kv.block_tokens <= 0 || params.num_rows < 0 || params.max_splits < 1 ||
      params.max_splits > kDecodeMaxSplitsLimit || kv.num_kv_heads > 65535) {
    return cudaErrorInvalidValue;
  }
  if (params.max_splits > 1 && (params.partial_out == nullptr || params.partial_ml == nullptr ||
                                params.split_counters == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const int group = params.num_heads / kv.num_kv_heads;
  const int bt_shift = BlockShift(kv.block_tokens);
  if (params.scores.scale < 0.0f || params.scores.logit_softcap < 0.0f || params.scores.window < 0) {
    return cudaErrorInvalidValue;
  }
  const double scale =
      params.scores.scale > 0.0f ? params.scores.scale : 1.0 / std::sqrt(static_cast<double>(kv.head_dim));
  const float scale_log2 = static_cast<float>(M_LOG2E * scale);
  const dim3 grid(params.num_rows, kv.num_kv_heads, params.max_splits);
  if (kv.fp8 && kv.block_bytes < kv.block_elements) return cudaErrorInvalidValue;
  const DecodeKernelFn<T> kernel = PickDecodeKernel<T>(kv.head_dim, kv.fp8, bt_shift,
                                                       params.fp8_scales_after_products, params.fp8_pair_tiles);
  return LaunchPdl(launch, kernel, grid, dim3(kThreads), 0, stream, params, tokens, kv, group,
                   scale_log2, bt_shift);
}

#define KVTIER_INSTANTIATE(T)                                                                  \
  template cudaError_t DecodeAttention<T>(const DecodeAttentionParams<T>&, StepTokens, PagedKv<T>, \
                                          cudaStream_t, const CudaLaunchOptions&);               \
  template int32_t DecodeResidentCtasPerSm<T>(int32_t, bool, int32_t, int32_t);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
