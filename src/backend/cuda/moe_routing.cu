// The routing kernels of the mixture-of-experts MLP (moe_kernels.h): router logits, top-k,
// the grouping of routes by expert, and the weighted combine.
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/moe_routing.cuh"

namespace kvtier::cuda {
namespace {

constexpr int kGroupThreads = 1024;

template <typename T>
__global__ void __launch_bounds__(moe::kRouterWarps * 32)
    RouterLogitsKernel(const T* __restrict__ x, const float* __restrict__ router, int rows, int hidden,
                       int num_experts, float* __restrict__ logits) {
  const int expert = blockIdx.x * moe::kRouterWarps + (threadIdx.x >> 5);
  if (expert >= num_experts) return;
  const float4 none[1] = {};
  moe::RouterLogitsWarp(x, router, rows, hidden, num_experts, expert, blockIdx.y * moe::kRouterRows,
                        threadIdx.x & 31, /*ahead=*/0, none, logits);
}

// One warp per row.
__global__ void RouteTopKKernel(const float* __restrict__ logits, int rows, int num_experts, int top_k,
                                bool renormalize, int32_t* __restrict__ chosen, float* __restrict__ weights) {
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int64_t first = static_cast<int64_t>(row) * top_k;
  moe::RouteTopKRow(logits + static_cast<int64_t>(row) * num_experts, num_experts, top_k, renormalize,
                    threadIdx.x & 31, chosen + first, weights + first);
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

// One CTA per row: its routes sorted by expert, then each thread sums its columns over them in
// that order.
template <typename T>
__global__ void CombineKernel(const T* __restrict__ expert_out, const int32_t* __restrict__ chosen,
                              const float* __restrict__ weights, const int32_t* __restrict__ route_slot, int top_k,
                              int hidden, T* __restrict__ out) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * top_k;
  int expert[kMoeMaxTopK], route[kMoeMaxTopK];
  moe::RoutesByExpert(chosen + first, top_k, expert, route);
  int64_t slot[kMoeMaxTopK];
  float weight[kMoeMaxTopK];
  for (int j = 0; j < top_k; ++j) {
    slot[j] = route_slot[first + route[j]];
    weight[j] = weights[first + route[j]];
  }
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < top_k; ++j) acc = moe::CombineStep(acc, ToFloat(expert_out[slot[j] * hidden + d]), weight[j]);
    out[static_cast<int64_t>(blockIdx.x) * hidden + d] = FromFloat<T>(acc);
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
  RouterLogitsKernel<T><<<moe::RouterGrid(rows, num_experts), moe::kRouterWarps * 32, 0, stream>>>(x, router, rows, hidden, num_experts, logits);
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
