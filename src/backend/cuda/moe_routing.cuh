// The per-warp and per-row pieces of the MoE routing kernels, shared by the unfused kernels
// (moe_routing.cu) and the decode path's fused ones (moe_decode.cu) so that both compute the
// same bits: the same fp32 operations in the same order, the same tie rule.
#ifndef KVTIER_BACKEND_CUDA_MOE_ROUTING_CUH_
#define KVTIER_BACKEND_CUDA_MOE_ROUTING_CUH_

#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/moe_kernels.h"

namespace kvtier::cuda::moe {

constexpr int kRouterWarps = 8;  // experts per router CTA
constexpr int kRouterRows = 4;   // token rows per router warp
constexpr int kRouterBatch = 8;  // a lane's router pieces in flight at once
constexpr int kExpertsPerLane = kMoeMaxExperts / 32;

// The router CTAs' grid: (expert blocks, row blocks).
inline dim3 RouterGrid(int rows, int num_experts) {
  return dim3((num_experts + kRouterWarps - 1) / kRouterWarps, (rows + kRouterRows - 1) / kRouterRows);
}

// The router weights of `expert` a lane reads first: float4 pieces lane, lane + 32, ..., the
// first `ahead` (<= P) of them, loaded before the PDL wait where a kernel has one (the router
// is a weight: no earlier kernel writes it).
template <int P>
__device__ __forceinline__ void LoadRouterAhead(const float* __restrict__ router, int hidden, int expert, int lane,
                                                int ahead, float4 (&pre)[P]) {
  const float4* w = reinterpret_cast<const float4*>(router + static_cast<int64_t>(expert) * hidden);
#pragma unroll
  for (int u = 0; u < P; ++u) {
    if (u < ahead) pre[u] = __ldg(w + lane + 32 * u);
  }
}

// How many of a lane's pieces LoadRouterAhead may load: whole 32-lane rounds only.
__device__ __forceinline__ int RouterAhead(int p, int hidden) { return min(p, hidden / 4 / 32); }

// The logits of `expert` (< num_experts) for rows row0 .. row0 + kRouterRows - 1 (those < rows):
// one warp, fp32 dot products over hidden in 4-element steps, each lane's pieces in ascending
// order (the first `ahead` from LoadRouterAhead), whatever was loaded ahead. kSharedX: x is in
// shared memory (the decode router's own norm), read by plain loads instead of __ldg.
template <int P, typename T, bool kSharedX = false>
__device__ __forceinline__ void RouterLogitsWarp(const T* __restrict__ x, const float* __restrict__ router, int rows,
                                                 int hidden, int num_experts, int expert, int row0, int lane,
                                                 int ahead, const float4 (&pre)[P], float* __restrict__ logits) {
  const float4* w = reinterpret_cast<const float4*>(router + static_cast<int64_t>(expert) * hidden);
  const int pieces = hidden / 4;
  float acc[kRouterRows] = {};
  // Every load of a batch is issued before its first fma: a warp holds one router row, so its
  // pieces' round trips overlap only if they are in flight together.
  uint2 xv[kRouterBatch][kRouterRows];
  auto load_x = [&](int u, int i) {
#pragma unroll
    for (int r = 0; r < kRouterRows; ++r) {
      if (row0 + r < rows) {
        const uint2* row = reinterpret_cast<const uint2*>(x + static_cast<int64_t>(row0 + r) * hidden);
        xv[u][r] = kSharedX ? row[i] : __ldg(row + i);
      }
    }
  };
  auto add = [&](const float4& wv, int u) {
#pragma unroll
    for (int r = 0; r < kRouterRows; ++r) {
      if (row0 + r < rows) {
        const float2 lo = UnpackFloat2<T>(xv[u][r].x), hi = UnpackFloat2<T>(xv[u][r].y);
        acc[r] = fmaf(wv.x, lo.x, acc[r]);
        acc[r] = fmaf(wv.y, lo.y, acc[r]);
        acc[r] = fmaf(wv.z, hi.x, acc[r]);
        acc[r] = fmaf(wv.w, hi.y, acc[r]);
      }
    }
  };
  static_assert(P <= kRouterBatch, "the pieces loaded ahead are one batch");
#pragma unroll
  for (int u = 0; u < P; ++u) {
    if (u < ahead) load_x(u, lane + 32 * u);
  }
#pragma unroll
  for (int u = 0; u < P; ++u) {
    if (u < ahead) add(pre[u], u);
  }
  for (int i0 = lane + 32 * ahead; i0 < pieces; i0 += 32 * kRouterBatch) {
    float4 wv[kRouterBatch];
#pragma unroll
    for (int u = 0; u < kRouterBatch; ++u) {
      const int i = i0 + 32 * u;
      if (i < pieces) {
        wv[u] = __ldg(w + i);
        load_x(u, i);
      }
    }
#pragma unroll
    for (int u = 0; u < kRouterBatch; ++u) {
      if (i0 + 32 * u < pieces) add(wv[u], u);
    }
  }
#pragma unroll
  for (int r = 0; r < kRouterRows; ++r) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
    if (lane == 0 && row0 + r < rows) logits[static_cast<int64_t>(row0 + r) * num_experts + expert] = acc[r];
  }
}

// A float's bits as an unsigned key in the floats' order (negative values flipped whole, the
// sign bit set on the others), for the warp's integer reductions, and back.
__device__ __forceinline__ uint32_t OrderedKey(float v) {
  const uint32_t bits = __float_as_uint(v);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}
__device__ __forceinline__ float FloatOfOrderedKey(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) != 0 ? key & 0x7fffffffu : ~key);
}

// One row's routing by one warp (cpu_moe.h RouteTopK): lane l holds experts l, l + 32, ...
// Taken and absent experts read -1, below every probability, so they are never chosen again.
// The logits are read through L2 (__ldcg): in the fused router, other CTAs wrote them.
__device__ __forceinline__ void RouteTopKRow(const float* l, int num_experts, int top_k, bool renormalize, int lane,
                                             int32_t* __restrict__ chosen, float* __restrict__ weights) {
  float p[kExpertsPerLane];
  float max = -FLT_MAX;
#pragma unroll
  for (int i = 0; i < kExpertsPerLane; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < num_experts ? __ldcg(l + e) : -FLT_MAX;
    max = fmaxf(max, p[i]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, offset));
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kExpertsPerLane; ++i) {
    p[i] = lane + 32 * i < num_experts ? expf(p[i] - max) : 0.0f;
    sum += p[i];
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
#pragma unroll
  for (int i = 0; i < kExpertsPerLane; ++i) p[i] = lane + 32 * i < num_experts ? p[i] / sum : -1.0f;
  // A row whose logits hold a NaN or an infinity (or are all -infinity) has no probabilities:
  // every present expert's p is NaN (sum NaN or 0). RouteTopK then takes the lowest experts not
  // yet taken, with NaN weights; here NaN compares as 0, so ties go to the lower index alike and
  // every chosen expert is a real one (an index past the experts would be read out of bounds).
  const bool no_probabilities = !(sum > 0.0f);
  float total = 0.0f;
  float mine = 0.0f;  // lane j < top_k keeps the j-th weight
  for (int j = 0; j < top_k; ++j) {
    // This lane's best (strict >: the lower index wins a tie), then the warp's.
    float best = -2.0f;
    int best_e = num_experts;
#pragma unroll
    for (int i = 0; i < kExpertsPerLane; ++i) {
      const float v = isnan(p[i]) ? 0.0f : p[i];
      if (v > best) {
        best = v;
        best_e = lane + 32 * i;
      }
    }
    // The warp's best, ties to the lower index: the largest key, then the least expert of the
    // lanes holding it (one warp reduction each; equal keys are equal values).
    const uint32_t key = OrderedKey(best);
    const uint32_t top = __reduce_max_sync(0xffffffffu, key);
    best_e = static_cast<int>(__reduce_min_sync(0xffffffffu, key == top ? static_cast<uint32_t>(best_e) : UINT32_MAX));
    best = no_probabilities ? __int_as_float(0x7fffffff) : FloatOfOrderedKey(top);
#pragma unroll
    for (int i = 0; i < kExpertsPerLane; ++i) {
      if (lane + 32 * i == best_e) p[i] = -1.0f;
    }
    total += best;
    if (lane == j) mine = best;
    if (lane == 0) chosen[j] = best_e;
  }
  if (lane < top_k) weights[lane] = renormalize ? mine / total : mine;
}

// A row's routes (its top_k entries of `chosen`) in ascending expert order, cpu_moe.cc's order
// of the combine: insertion sort of top_k <= kMoeMaxTopK. route[j] is the index within the row.
__device__ __forceinline__ void RoutesByExpert(const int32_t* chosen_row, int top_k, int (&expert)[kMoeMaxTopK],
                                               int (&route)[kMoeMaxTopK]) {
  for (int j = 0; j < top_k; ++j) {
    const int e = __ldcg(chosen_row + j);
    int at = j;
    while (at > 0 && expert[at - 1] > e) {
      expert[at] = expert[at - 1];
      route[at] = route[at - 1];
      --at;
    }
    expert[at] = e;
    route[at] = j;
  }
}

// One step of the combine: acc + expert output (rounded to the compute dtype) times its
// routing weight, as one explicit fma so every kernel that combines rounds alike.
__device__ __forceinline__ float CombineStep(float acc, float expert_out, float weight) {
  return fmaf(expert_out, weight, acc);
}

}  // namespace kvtier::cuda::moe

#endif  // KVTIER_BACKEND_CUDA_MOE_ROUTING_CUH_
