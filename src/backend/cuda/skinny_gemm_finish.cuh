// How a skinny projection CTA finishes a tile (skinny_gemm_common.cuh), shared by the
// cp.async and TMA pipelines: a tile whose steps one CTA covered whole is scaled and written;
// a tile split over CTAs is finished by whichever contributor arrives last (per-tile counter
// in the workspace): each stores its fp32 partial, the last one adds them all in CTA order
// (deterministic for a given SM count), writes out and resets the counter.
#ifndef KVTIER_BACKEND_CUDA_SKINNY_GEMM_FINISH_CUH_
#define KVTIER_BACKEND_CUDA_SKINNY_GEMM_FINISH_CUH_

#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda/skinny_gemm_common.cuh"

namespace kvtier::cuda::skinny {

// What a traced CTA's finishes cost, summed over its tiles (SkinnyTraceSlot): kept in
// registers by the tracing thread and written once at the end.
struct FinishTimes {
  int64_t arrive_ns = 0, reduce_ns = 0, output_ns = 0;
  int whole_tiles = 0, last_arrivals = 0;
  __device__ void Write(int64_t* trace) const {
    trace[kTraceArriveNs] = arrive_ns;
    trace[kTraceReduceNs] = reduce_ns;
    trace[kTraceOutputNs] = output_ns;
    trace[kTraceWholeTiles] = whole_tiles;
    trace[kTraceLastArrivals] = last_arrivals;
  }
};

// A barrier over the CTA's kThreads MMA threads only: with a producer warp beside them (the
// TMA pipeline) a whole-CTA barrier would wait for a warp that never arrives.
__device__ __forceinline__ void ConsumerSync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory"); }

// The scales thread `tid` applies to its accumulator elements (layout below): its two output
// columns' (fp8 weights; 1 for bf16) and its tokens' (W8A8; 1 otherwise). Loaded ahead of the
// finish (the tokens' once per call, the columns' as a tile's steps begin), so that no load
// round trip sits between a tile's last MMA and its output.
template <int MT>
struct TileScales {
  float col[2];
  float token[MT / 8][2];
};

template <int MT, bool kX8>
__device__ __forceinline__ void LoadTokenScales(const Params& p, const TileSpan& span, int tid,
                                                TileScales<MT>& scales) {
  const int lane = tid & 31;
#pragma unroll
  for (int b = 0; b < MT / 8; ++b)
#pragma unroll
    for (int o = 0; o < 2; ++o) {
      const int token = b * 8 + (lane & 3) * 2 + o;
      scales.token[b][o] = (kX8 && token < span.m) ? p.x_scales[span.x_row + token] : 1.0f;
    }
}

template <int MT, bool kFp8>
__device__ __forceinline__ void LoadColScales(const Params& p, const TileSpan& span, int tid, TileScales<MT>& scales) {
  const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int in_tile = warp * 16 + (lane >> 2) + h * 8;
    scales.col[h] = (kFp8 && span.col + in_tile < p.n) ? p.scales[span.w_row + in_tile] : 1.0f;
  }
}

// Finishes tile `tile` (covering `span`) after the steps [seg_begin, seg_end) of it were
// accumulated into `acc` by the kThreads MMA threads of CTA `cta` (thread `tid` holding one
// float4 of each fragment), whose range starts at step `begin`. `s_last` is a shared flag;
// `scales` hold the tile's (LoadTokenScales, LoadColScales); `times`, where not null, adds what
// each part took.
template <int MT, bool kFp8, bool kX8, bool kF32Out>
__device__ __forceinline__ void FinishTile(const Params& p, float (&acc)[MT / 8][4], int64_t tile,
                                           const TileSpan& span, int64_t seg_begin,
                                           int64_t seg_end, int64_t begin, int64_t cta, int64_t grid, int tid,
                                           int* s_last, const TileScales<MT>& scales, FinishTimes* times = nullptr) {
  constexpr int kFragsM = MT / 8;
  const int lane = tid & 31, warp = tid >> 5;
  const int64_t tile_begin = tile * p.ks, tile_end = tile_begin + p.ks;
  int64_t stamp = times != nullptr ? GlobalTimerNs() : 0;
  auto lap = [&](int64_t& total) {
    const int64_t now = GlobalTimerNs();
    total += now - stamp;
    stamp = now;
  };
  if (seg_begin != tile_begin || seg_end != tile_end) {
    const int64_t slot = 2 * cta + (seg_begin == begin ? 0 : 1);
    float4* mine = reinterpret_cast<float4*>(p.partials) + slot * (kFragsM * kThreads);
#pragma unroll
    for (int b = 0; b < kFragsM; ++b)
      __stcg(mine + b * kThreads + tid, make_float4(acc[b][0], acc[b][1], acc[b][2], acc[b][3]));
    __threadfence();
    ConsumerSync();
    const int64_t first = StepOwner(tile_begin, p.total_steps, grid);
    const int64_t last = StepOwner(tile_end - 1, p.total_steps, grid);
    if (tid == 0) {
      const int arrived = atomicAdd(p.counters + tile, 1);
      *s_last = arrived == static_cast<int>(last - first);
      if (*s_last) p.counters[tile] = 0;  // every contributor has arrived: ready for the next call
    }
    ConsumerSync();
    if (times != nullptr) lap(times->arrive_ns);
    // Thread 0 sets s_last again only after the next tile's first barrier, which every
    // thread reaches after reading it here.
    if (!*s_last) return;
    if (times != nullptr) ++times->last_arrivals;
    __threadfence();
    // Everything summed in CTA order, whichever arrived last: the result does not depend
    // on arrival order.
#pragma unroll
    for (int b = 0; b < kFragsM; ++b)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[b][e] = 0.0f;
    // Each contributor's fragments are loaded while the previous one's are added: one L2
    // round trip per contributor would otherwise sit on the tile's critical path.
    auto part_of = [&](int64_t other) {
      const int64_t other_slot = 2 * other + (RangeBegin(other, p.total_steps, grid) >= tile_begin ? 0 : 1);
      return reinterpret_cast<const float4*>(p.partials) + other_slot * (kFragsM * kThreads) + tid;
    };
    float4 next[kFragsM];
    const float4* part = part_of(first);
#pragma unroll
    for (int b = 0; b < kFragsM; ++b) next[b] = __ldcg(part + b * kThreads);
    for (int64_t other = first; other <= last; ++other) {
      float4 v[kFragsM];
#pragma unroll
      for (int b = 0; b < kFragsM; ++b) v[b] = next[b];
      if (other < last) {
        part = part_of(other + 1);
#pragma unroll
        for (int b = 0; b < kFragsM; ++b) next[b] = __ldcg(part + b * kThreads);
      }
#pragma unroll
      for (int b = 0; b < kFragsM; ++b) {
        acc[b][0] += v[b].x;
        acc[b][1] += v[b].y;
        acc[b][2] += v[b].z;
        acc[b][3] += v[b].w;
      }
    }
    if (times != nullptr) lap(times->reduce_ns);
  } else if (times != nullptr) {
    ++times->whole_tiles;
  }
  // Accumulator element e of fragment b (wgmma m64nMT layout, warp w of the CTA holding
  // weight rows 16w..16w+15): weight row (output column) lane / 4 (+ 8 for e >= 2), token
  // 8b + 2 * (lane % 4) (+ 1 for odd e).
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t col = span.col + warp * 16 + (lane >> 2) + (e >> 1) * 8;
#pragma unroll
    for (int b = 0; b < kFragsM; ++b) {
      const int token = b * 8 + (lane & 3) * 2 + (e & 1);
      if (token < span.m && col < p.n) {
        const float scale = scales.col[e >> 1] * scales.token[b][e & 1];
        const int64_t at = (span.x_row + token) * p.n + col;
        if constexpr (kF32Out) {
          static_cast<float*>(p.out)[at] = acc[b][e] * scale;
        } else {
          static_cast<bf16*>(p.out)[at] = __float2bfloat16(acc[b][e] * scale);
        }
      }
    }
  }
  if (times != nullptr) lap(times->output_ns);
}

}  // namespace kvtier::cuda::skinny

#endif  // KVTIER_BACKEND_CUDA_SKINNY_GEMM_FINISH_CUH_
