// The routing kernels of the mixture-of-experts MLP (moe_kernels.h): router logits, top-k,
// the grouping of routes by expert, and the weighted combine.
#include <cfloat>
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/moe_kernels.h"

namespace kvtier::cuda {
namespace {

constexpr int kRouterWarps = 8;    // experts per CTA
constexpr int kRouterRows = 4;     // token rows per warp
constexpr int kExpertsPerLane = kMoeMaxExperts / 32;
constexpr int kGroupThreads = 1024;

// One warp per (expert, kRouterRows rows): fp32 dot products over hidden in 4-element steps.
template <typename T>
__global__ void __launch_bounds__(kRouterWarps * 32)
    RouterLogitsKernel(const T* __restrict__ x, const float* __restrict__ router, int rows, int hidden,
                       int num_experts, float* __restrict__ logits) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int expert = blockIdx.x * kRouterWarps + warp;
  const int row0 = blockIdx.y * kRouterRows;
  if (expert >= num_experts) return;
  const float4* w = reinterpret_cast<const float4*>(router + static_cast<int64_t>(expert) * hidden);
  float acc[kRouterRows] = {};
  for (int i = lane; i < hidden / 4; i += 32) {
    const float4 wv = __ldg(w + i);
#pragma unroll
    for (int r = 0; r < kRouterRows; ++r) {
      if (row0 + r < rows) {
        const uint2 xv = __ldg(reinterpret_cast<const uint2*>(x + static_cast<int64_t>(row0 + r) * hidden) + i);
        const float2 lo = UnpackFloat2<T>(xv.x), hi = UnpackFloat2<T>(xv.y);
        acc[r] = fmaf(wv.x, lo.x, acc[r]);
        acc[r] = fmaf(wv.y, lo.y, acc[r]);
        acc[r] = fmaf(wv.z, hi.x, acc[r]);
        acc[r] = fmaf(wv.w, hi.y, acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRouterRows; ++r) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
    if (lane == 0 && row0 + r < rows) logits[static_cast<int64_t>(row0 + r) * num_experts + expert] = acc[r];
  }
}

// One warp per row; lane l holds experts l, l + 32, ... Taken and absent experts read -1, below
// every probability, so they are never chosen again.
__global__ void RouteTopKKernel(const float* __restrict__ logits, int rows, int num_experts, int top_k,
                                bool renormalize, int32_t* __restrict__ chosen, float* __restrict__ weights) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const float* l = logits + static_cast<int64_t>(row) * num_experts;
  float p[kExpertsPerLane];
  float max = -FLT_MAX;
#pragma unroll
  for (int i = 0; i < kExpertsPerLane; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < num_experts ? l[e] : -FLT_MAX;
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
  float total = 0.0f;
  float mine = 0.0f;  // lane j < top_k keeps the j-th weight
  for (int j = 0; j < top_k; ++j) {
    // This lane's best (strict >: the lower index wins a tie), then the warp's.
    float best = -2.0f;
    int best_e = num_experts;
#pragma unroll
    for (int i = 0; i < kExpertsPerLane; ++i) {
      if (p[i] > best) {
        best = p[i];
        best_e = lane + 32 * i;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other_e = __shfl_xor_sync(0xffffffffu, best_e, offset);
      if (other > best || (other == best && other_e < best_e)) {
        best = other;
        best_e = other_e;
      }
    }
#pragma unroll
    for (int i = 0; i < kExpertsPerLane; ++i) {
      if (lane + 32 * i == best_e) p[i] = -1.0f;
    }
    total += best;
    if (lane == j) mine = best;
    if (lane == 0) chosen[static_cast<int64_t>(row) * top_k + j] = best_e;
  }
  if (lane < top_k) weights[static_cast<int64_t>(row) * top_k + lane] = renormalize ? mine / total : mine;
}

// One CTA: counts per expert (shared atomics), offsets and tiles (thread 0, in expert order),
// then every route's slot.
__global__ void __launch_bounds__(kGroupThreads)
    GroupRoutesKernel(const int32_t* __restrict__ chosen, int routes, int top_k, int num_experts, int tile_rows,
                      MoeGrouping g) {
  __shared__ int counts[kMoeMaxExperts];
  __shared__ int cursor[kMoeMaxExperts];
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < routes; i += blockDim.x) atomicAdd(&counts[chosen[i]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int offset = 0, tiles = 0;
    for (int e = 0; e < num_experts; ++e) {
      g.expert_offsets[e] = offset;
      cursor[e] = offset;
      for (int m = 0; m < counts[e]; m += tile_rows) g.tiles[tiles++] = make_int2(e, m);
      offset += counts[e];
    }
    g.expert_offsets[num_experts] = offset;
    *g.num_tiles = tiles;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < routes; i += blockDim.x) {
    const int slot = atomicAdd(&cursor[chosen[i]], 1);
    g.route_slot[i] = slot;
    g.slot_token[slot] = i / top_k;
    g.slot_expert[slot] = chosen[i];
  }
}

// One CTA per row: its routes sorted by expert (insertion sort of top_k <= kMoeMaxTopK), then
// each thread sums its columns over them in that order.
template <typename T>
__global__ void CombineKernel(const T* __restrict__ expert_out, const int32_t* __restrict__ chosen,
                              const float* __restrict__ weights, const int32_t* __restrict__ route_slot, int top_k,
                              int hidden, T* __restrict__ out) {
  const int row = blockIdx.x;
  int expert[kMoeMaxTopK], slot[kMoeMaxTopK];
  float weight[kMoeMaxTopK];
  int n = 0;
  for (int j = 0; j < top_k; ++j) {
    const int64_t route = static_cast<int64_t>(row) * top_k + j;
    const int e = chosen[route];
    int at = n++;
    while (at > 0 && expert[at - 1] > e) {
      expert[at] = expert[at - 1];
      slot[at] = slot[at - 1];
      weight[at] = weight[at - 1];
      --at;
    }
    expert[at] = e;
    slot[at] = route_slot[route];
    weight[at] = weights[route];
  }
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < n; ++j) {
      acc += ToFloat(expert_out[static_cast<int64_t>(slot[j]) * hidden + d]) * weight[j];
    }
    out[static_cast<int64_t>(row) * hidden + d] = FromFloat<T>(acc);
  }
}

}  // namespace

template <typename T>
cudaError_t MoeRouterLogits(const T* x, const float* router, int rows, int hidden, int num_experts, float* logits,
                            cudaStream_t stream) {
  if (rows < 1 || hidden % 4 != 0 || num_experts < 1 || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(router) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid((num_experts + kRouterWarps - 1) / kRouterWarps, (rows + kRouterRows - 1) / kRouterRows);
  RouterLogitsKernel<T><<<grid, kRouterWarps * 32, 0, stream>>>(x, router, rows, hidden, num_experts, logits);
  return cudaGetLastError();
}

cudaError_t MoeRouteTopK(const float* logits, int rows, int num_experts, int top_k, bool renormalize,
                         int32_t* chosen, float* weights, cudaStream_t stream) {
  if (rows < 1 || num_experts < 1 || num_experts > kMoeMaxExperts || top_k < 1 || top_k > num_experts ||
      top_k > kMoeMaxTopK) {
    return cudaErrorInvalidValue;
  }
  constexpr int kWarps = 4;
  RouteTopKKernel<<<(rows + kWarps - 1) / kWarps, kWarps * 32, 0, stream>>>(logits, rows, num_experts, top_k,
                                                                            renormalize, chosen, weights);
  return cudaGetLastError();
}

cudaError_t MoeGroupRoutes(const int32_t* chosen, int rows, int top_k, int num_experts, int tile_rows,
                           const MoeGrouping& grouping, cudaStream_t stream) {
  if (rows < 1 || top_k < 1 || num_experts < 1 || num_experts > kMoeMaxExperts || tile_rows < 1) {
    return cudaErrorInvalidValue;
  }
  GroupRoutesKernel<<<1, kGroupThreads, 0, stream>>>(chosen, rows * top_k, top_k, num_experts, tile_rows, grouping);
  return cudaGetLastError();
}

template <typename T>
cudaError_t MoeCombine(const T* expert_out, const int32_t* chosen, const float* weights, const int32_t* route_slot,
                       int rows, int top_k, int hidden, T* out, cudaStream_t stream) {
  if (rows < 1 || top_k < 1 || top_k > kMoeMaxTopK || hidden < 1) return cudaErrorInvalidValue;
  CombineKernel<T><<<rows, 256, 0, stream>>>(expert_out, chosen, weights, route_slot, top_k, hidden, out);
  return cudaGetLastError();
}

#define KVTIER_INSTANTIATE(T)                                                                                   \
  template cudaError_t MoeRouterLogits<T>(const T*, const float*, int, int, int, float*, cudaStream_t);        \
  template cudaError_t MoeCombine<T>(const T*, const int32_t*, const float*, const int32_t*, int, int, int, T*, \
                                     cudaStream_t);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
