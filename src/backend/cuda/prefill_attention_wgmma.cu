// Prefill attention on Hopper's warpgroup MMA (PrefillKernel::kWgmma; semantics in
// prefill_attention.h), bf16 queries over bf16 or fp8 KV, head_dim 128.
//
// One CTA = one PrefillTile x one kv head, 2 warpgroups x 64 query rows (row r = token r /
// group, query head r % group of the kv head's group, as in the mma.sync kernel). Q is staged
// once in shared memory; K and V tiles of kKvTile positions are gathered from the paged pool
// with cp.async by all 256 threads into a ring of kStages stages, in the 128-byte-swizzled
// layout wgmma reads (column blocks of 64 dims, 128 bytes per position). Per KV tile each
// warpgroup runs S = Q K^T as kKvTile-wide wgmmas (both operands K-major in shared memory),
// the online softmax on the S accumulators in registers (log2 domain), then O += P V with P
// from registers (the accumulator layout is the register A layout) and V read N-major (the
// same bytes as K's layout: 128-byte rows of 64 dims, one row per position).
//
// Scores other than plain (AttentionScores: another scale, a soft-cap, a sliding window) run
// on instances with kScores set, so that the plain kernels compile as they were: the scale
// folds into the log2-domain factor, the soft-cap applies to the raw scores before the masks
// (cap over the scale, so that the cap acts on the real score: ScoreRule), the window masks
// per row after the causal mask, and the KV tiles before the tile's first query's window are
// never loaded (TileView::first_kv_tile; the ring starts there), as in the mma.sync kernel.
//
// fp8 KV: the stages hold the raw codes and the per-row scales (half the bytes of a bf16
// tile); before a tile's MMAs every thread dequantizes its share into one bf16 tile in the
// swizzled layout (code -> half exact, times the row's scale in fp32, rounded to bf16: the
// mma.sync kernel's rule), so that the copies stay asynchronous.
//
// Why every thread copies: a paged tile is kKvTile / block_tokens separate block rows, which
// cp.async from every thread gathers without a tensor map per pool; a variant with producer
// warps feeding mbarriers ran no faster (what holds the tensor pipe back is the chain
// S -> softmax -> P V inside each warpgroup, not the copies). The overlapped variants
// (FlashAttention-3's softmax under the next tile's MMAs; PrefillAttentionWgmma variants 4-6)
// are in the timing sweep beside the plain kernel, which stays the default until they
// measure faster.
#include "backend/cuda/prefill_attention_wgmma.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/prefill_wgmma_tile.cuh"

namespace kvtier::cuda {
namespace {

using namespace prefill_wgmma;  // NOLINT: this file is the pieces' one user

// Every thread copies (cp.async into a ring of kStages, one CTA barrier per KV tile) and both
// warpgroups compute; fp8 stages are dequantized by all threads into one bf16 tile.
// kCtasPerSm 2 (64-position tiles, two stages: small enough in shared memory) holds every
// thread to 128 registers so that two CTAs share an SM: four warpgroups to hide one
// another's softmax-to-MMA chains instead of two. kScores: `rule`'s soft-cap and window
// apply too, and the tiles before the window are not visited (the ring starts at
// first_kv_tile; tile j sits in stage j % kStages either way).
template <int kKvTile, int kStages, bool kFp8, int kCtasPerSm, bool kScores>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    PrefillWgmmaKernel(PrefillAttentionParams<bf16> p, PagedKv<bf16> kv, int group, int bt_shift, ScoreRule rule) {
  using C = WgmmaTiles<kKvTile, kStages, kFp8>;
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t q_base = (SmemAddr(smem) + 1023u) & ~1023u;
  const uint32_t conv_base = q_base + kQBytes;
  const uint32_t ring_base = conv_base + C::kConvBytes;
  uint8_t* const smem_aligned = smem + (q_base - SmemAddr(smem));
  if (p.tiles[blockIdx.x].num_tokens <= 0) return;
  const TileView t(p, kv, std::integral_constant<int, kKvTile>(), rule.window);
  const int first = kScores ? t.first_kv_tile : 0;  // a literal 0 for the plain kernels
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;

  LoadQ<kThreads>(t, p, group, q_base, 0, kRows, tid);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    const int kv_tile = first + s;
    if (kv_tile < t.num_kv_tiles) {
      LoadKvTile<kKvTile, kThreads, kFp8>(t, kv, p.layer, bt_shift, kv_tile,
                                          ring_base + (kv_tile % kStages) * C::kStageBytes, tid);
    }
    CpAsyncCommit();
  }
  RowState<kKvTile, kScores> rows(t, group, warp, lane);
  const bool wg_active = wg * 64 < t.tile.num_tokens * group;
  const uint32_t q_rows = q_base + wg * 64 * kRowBytes;

  for (int j = first; j < t.num_kv_tiles; ++j) {
    const int stage = j % kStages;
    CpAsyncWait<kStages - 2>();
    FenceProxyAsync();  // cp.async wrote it; wgmma reads through the async proxy
    // Tile j (and Q) visible to all; every warpgroup is done with tile j - 1's MMAs, whose
    // stage is refilled below.
    __syncthreads();
    uint32_t k_base = ring_base + stage * C::kStageBytes;
    if constexpr (kFp8) {
      DequantizeStage<kKvTile, kThreads>(smem_aligned + (k_base - q_base), smem_aligned + (conv_base - q_base), tid);
      FenceProxyAsync();
      __syncthreads();  // the bf16 tile is complete and the stage's codes are read
      k_base = conv_base;
    }
    const int next = j + kStages - 1;
    if (next < t.num_kv_tiles) {
      LoadKvTile<kKvTile, kThreads, kFp8>(t, kv, p.layer, bt_shift, next, ring_base + (next % kStages) * C::kStageBytes,
                                          tid);
    }
    CpAsyncCommit();
    if (wg_active) rows.Tile(q_rows, k_base, j, t.tile.first_pos, lane, rule);
  }
  CpAsyncWait<0>();
  if (wg_active) rows.Store(t, p, group, lane);
}

// bf16 KV, FlashAttention-3's overlap inside a warpgroup: tile j's P V and tile j + 1's
// S = Q K^T are issued back to back, and tile j + 1's softmax runs while P V is on the tensor
// cores (O is rescaled once P V is done; two P register sets). The ring loads two tiles ahead,
// so kStages >= 3. kScores as in PrefillWgmmaKernel: the steps start at first_kv_tile.
template <int kKvTile, int kStages, bool kScores>
__global__ void __launch_bounds__(kThreads, 1) PrefillWgmmaOverlapKernel(PrefillAttentionParams<bf16> p,
                                                                         PagedKv<bf16> kv, int group, int bt_shift,
                                                                         ScoreRule rule) {
  static_assert(kStages >= 3, "tiles j and j + 1 resident while j + 2 loads");
  using C = WgmmaTiles<kKvTile, kStages, false>;
  using Rows = RowState<kKvTile, kScores>;
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t q_base = (SmemAddr(smem) + 1023u) & ~1023u;
  const uint32_t ring_base = q_base + kQBytes;
  if (p.tiles[blockIdx.x].num_tokens <= 0) return;
  const TileView t(p, kv, std::integral_constant<int, kKvTile>(), rule.window);
  const int first = kScores ? t.first_kv_tile : 0;  // a literal 0 for the plain kernels
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  auto stage_base = [&](int tile) { return ring_base + (tile % kStages) * C::kStageBytes; };

  LoadQ<kThreads>(t, p, group, q_base, 0, kRows, tid);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    const int kv_tile = first + s;
    if (kv_tile < t.num_kv_tiles) {
      LoadKvTile<kKvTile, kThreads, false>(t, kv, p.layer, bt_shift, kv_tile, stage_base(kv_tile), tid);
    }
    CpAsyncCommit();
  }
  Rows rows(t, group, warp, lane);
  const bool wg_active = wg * 64 < t.tile.num_tokens * group;
  const uint32_t q_rows = q_base + wg * 64 * kRowBytes;

  CpAsyncWait<kStages - 2>();  // Q and tile `first`
  FenceProxyAsync();
  __syncthreads();
  float s[kKvTile / 8][4];
  uint32_t pa_a[kKvTile / 16][4], pa_b[kKvTile / 16][4];
  float correction[2];
  if (wg_active) {
    Rows::IssueS(s, q_rows, stage_base(first));
    WgmmaWait<0>();
    Rows::Settle(s);
    rows.Softmax(s, first, t.tile.first_pos, lane, rule, pa_a, correction);  // O is zero: no rescale
  }
  // P of tile j is in pa_cur; tile j + 1's goes to pa_next. Only for j + 1 < num_kv_tiles:
  // the last tile has a step of its own, so that no branch splits a wgmma pipeline (ptxas
  // serializes every wgmma of a kernel where a conditional S issue and its conditional wait
  // straddle the P V issue: C7514).
  auto step = [&](int j, uint32_t(&pa_cur)[kKvTile / 16][4], uint32_t(&pa_next)[kKvTile / 16][4]) {
    CpAsyncWait<kStages - 3>();  // tiles up to j + 1 landed
    FenceProxyAsync();
    // Tile j + 1 visible to all; every warpgroup is done with tile j - 1, whose stage is
    // refilled below.
    __syncthreads();
    const int next = j + kStages - 1;
    if (next < t.num_kv_tiles) {
      LoadKvTile<kKvTile, kThreads, false>(t, kv, p.layer, bt_shift, next, stage_base(next), tid);
    }
    CpAsyncCommit();
    if (!wg_active) return;
    Rows::IssueS(s, q_rows, stage_base(j + 1));
    rows.IssuePv(pa_cur, stage_base(j) + C::kTileBytes);
    WgmmaWait<1>();  // S of tile j + 1 (P V of tile j may still run)
    Rows::Settle(s);
    rows.Softmax(s, j + 1, t.tile.first_pos, lane, rule, pa_next, correction);
    WgmmaWait<0>();
    Rows::Settle(rows.o);
    rows.Rescale(correction);
  };
  // The last tile, landed and visible since the step before it (or the prologue): P V only.
  auto last_step = [&](int j, uint32_t(&pa_cur)[kKvTile / 16][4]) {
    if (!wg_active) return;
    rows.IssuePv(pa_cur, stage_base(j) + C::kTileBytes);
    WgmmaWait<0>();
    Rows::Settle(rows.o);
  };
  for (int j = first;; j += 2) {
    if (j + 1 == t.num_kv_tiles) {
      last_step(j, pa_a);
      break;
    }
    step(j, pa_a, pa_b);
    if (j + 2 == t.num_kv_tiles) {
      last_step(j + 1, pa_b);
      break;
    }
    step(j + 1, pa_b, pa_a);
  }
  CpAsyncWait<0>();
  if (wg_active) rows.Store(t, p, group, lane);
}

// One launch's arguments past the kernel's shape.
struct LaunchArgs {
  const PrefillAttentionParams<bf16>& p;
  const PagedKv<bf16>& kv;
  int group;
  int bt_shift;
  ScoreRule rule;
  cudaStream_t stream;
};

template <int kKvTile, int kStages, bool kFp8, int kCtasPerSm, bool kScores>
cudaError_t Launch(const LaunchArgs& a) {
  using C = WgmmaTiles<kKvTile, kStages, kFp8>;
  static_assert(kCtasPerSm * (C::kSmemBytes + 1024) <= 228 * 1024, "the CTAs fit an SM's shared memory");
  auto kernel = PrefillWgmmaKernel<kKvTile, kStages, kFp8, kCtasPerSm, kScores>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(a.p.num_tiles), static_cast<unsigned>(a.kv.num_kv_heads));
  kernel<<<grid, kThreads, C::kSmemBytes, a.stream>>>(a.p, a.kv, a.group, a.bt_shift, a.rule);
  return cudaGetLastError();
}

template <int kKvTile, int kStages, bool kScores>
cudaError_t LaunchOverlap(const LaunchArgs& a) {
  using C = WgmmaTiles<kKvTile, kStages, false>;
  auto kernel = PrefillWgmmaOverlapKernel<kKvTile, kStages, kScores>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(a.p.num_tiles), static_cast<unsigned>(a.kv.num_kv_heads));
  kernel<<<grid, kThreads, C::kSmemBytes, a.stream>>>(a.p, a.kv, a.group, a.bt_shift, a.rule);
  return cudaGetLastError();
}

template <bool kFp8, bool kScores>
cudaError_t LaunchVariant(int variant, const LaunchArgs& a) {
  if constexpr (!kFp8) {
    switch (variant) {
      case 4:
        return LaunchOverlap<128, 3, kScores>(a);
      case 5:
        return LaunchOverlap<64, 3, kScores>(a);
      case 6:
        return LaunchOverlap<64, 4, kScores>(a);
      default:
        break;
    }
  }
  switch (variant) {
    case 1:
      return Launch<64, 2, kFp8, 1, kScores>(a);
    case 2:
      return Launch<64, 3, kFp8, 1, kScores>(a);
    case 3:
      return Launch<128, 3, kFp8, 1, kScores>(a);
    case 7:
      return Launch<64, 2, kFp8, /*kCtasPerSm=*/2, kScores>(a);
    default:
      return Launch<128, 2, kFp8, 1, kScores>(a);
  }
}

// AttentionScores in the kernel's terms, computed as the mma.sync kernel computes them (the
// scale in double, then log2(e) folded in; the cap over the scale). Plain scores keep
// kScaleLog2, the plain kernels' constant.
ScoreRule RuleOf(const AttentionScores& scores) {
  ScoreRule rule;
  if (scores.scale == 0.0f && scores.logit_softcap == 0.0f && scores.window == 0) return rule;
  const double scale = scores.scale > 0.0f ? scores.scale : 1.0 / std::sqrt(static_cast<double>(kD));
  rule.scale_log2 = static_cast<float>(scale * M_LOG2E);
  rule.cap_raw = scores.logit_softcap * 1.44269504f / rule.scale_log2;  // 0 without a cap
  if (scores.window > 0) rule.window = scores.window;
  return rule;
}

}  // namespace

cudaError_t PrefillAttentionWgmma(const PrefillAttentionParams<bf16>& params, const PagedKv<bf16>& kv, int bt_shift,
                                  cudaStream_t stream, int variant) {
  if (kv.head_dim != kD) return cudaErrorInvalidValue;
  const int group = params.num_heads / kv.num_kv_heads;
  if (group <= 0 || group > kRows) return cudaErrorInvalidValue;
  const AttentionScores& scores = params.scores;
  if (!(scores.scale >= 0.0f) || !(scores.logit_softcap >= 0.0f) || scores.window < 0) return cudaErrorInvalidValue;
  const bool plain = scores.scale == 0.0f && scores.logit_softcap == 0.0f && scores.window == 0;
  const LaunchArgs args{params, kv, group, bt_shift, RuleOf(scores), stream};
  if (kv.fp8) return plain ? LaunchVariant<true, false>(variant, args) : LaunchVariant<true, true>(variant, args);
  return plain ? LaunchVariant<false, false>(variant, args) : LaunchVariant<false, true>(variant, args);
}

}  // namespace kvtier::cuda
