// The decode path's router and down+combine kernels (moe_decode.h); its gate|up is the
// per-route GEMV of moe_expert_gemv.cu.
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/moe_decode.h"
#include "backend/cuda/moe_routing.cuh"
#include "backend/cuda/pdl.h"

namespace kvtier::cuda {
namespace {

// The router's CTAs (moe_routing.cu's grid, the first router pieces loaded before the PDL wait),
// then the last to arrive routes every row, one warp a row: the logits it reads were written by
// the others before their arrival (fence, then the counter), and it resets the counter for the
// next launch.
template <typename T>
__global__ void __launch_bounds__(moe::kRouterWarps * 32) DecodeRouteKernel(MoeDecodeRouteParams<T> p) {
  constexpr int kAhead = 8;  // of a lane's router pieces (16 at hidden 2048) loaded before the wait
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int expert = blockIdx.x * moe::kRouterWarps + warp;
  const bool on = expert < p.num_experts;
  const int ahead = on ? moe::RouterAhead(kAhead, p.hidden) : 0;
  float4 pre[kAhead];
  if (on) moe::LoadRouterAhead(p.router, p.hidden, expert, lane, ahead, pre);
  PdlWait();
  PdlLaunchDependents();
  if (on) {
    moe::RouterLogitsWarp(p.x, p.router, p.rows, p.hidden, p.num_experts, expert, blockIdx.y * moe::kRouterRows, lane,
                          ahead, pre, p.logits);
  }
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) {
    const uint32_t ctas = gridDim.x * gridDim.y;
    last = atomicAdd(p.arrivals, 1u) == ctas - 1;
    if (last) atomicExch(p.arrivals, 0u);  // every other CTA has arrived: none adds after this
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int row = warp; row < p.rows; row += moe::kRouterWarps) {
    const int64_t first = static_cast<int64_t>(row) * p.top_k;
    moe::RouteTopKRow(p.logits + static_cast<int64_t>(row) * p.num_experts, p.num_experts, p.top_k, p.renormalize,
                      lane, p.chosen + first, p.weights + first);
  }
}

// One warp per (row blockIdx.y, output column): the row's routes in ascending expert order, G at
// a time, their down rows streamed side by side (pieces of every route in flight at once). Each
// route's dot is the per-route GEMV's (ExpertGemvKernel, W = 1): the same lane-to-piece split
// and per-lane order (gemv::Stream keeps it whatever the batching), the same butterfly, the
// scale, the rounding to T; then the combine's fma in CombineKernel's order. The first kPre
// pieces of the first G rows are loaded before the PDL wait: the routing is known by then
// (moe_decode.h), only the activations are not.
template <typename Format, typename T, int G>
__global__ void __launch_bounds__(gemv::kWarps * 32)
    DownCombineKernel(const T* __restrict__ act, const int32_t* __restrict__ chosen,
                      const float* __restrict__ route_weights, const typename Format::Element* __restrict__ down,
                      const float* __restrict__ scales, int top_k, int k, int n, T* __restrict__ out) {
  constexpr int kPre = 8 / G;           // 16-byte pieces per lane and row ahead of the wait
  constexpr int kUnroll = G <= 2 ? 2 : 1;  // more rows side by side, fewer batches in flight
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = blockIdx.x * gemv::kWarps + warp;
  const int row = blockIdx.y;
  const bool on = col < n;
  const int64_t c = on ? col : 0;
  const int64_t first = static_cast<int64_t>(row) * top_k;
  int expert[kMoeMaxTopK], route[kMoeMaxTopK];
  moe::RoutesByExpert(chosen + first, top_k, expert, route);
  const int pieces = k / Format::kPerPiece;
  // The G rows of the group starting at sorted route g0 (past top_k: the group's first again,
  // streamed but not added).
  auto group_rows = [&](int g0, const uint4* (&rows)[G]) {
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const int at = g0 + j < top_k ? g0 + j : g0;
      rows[j] = reinterpret_cast<const uint4*>(down + (static_cast<int64_t>(expert[at]) * n + c) * k);
    }
  };
  const uint4* wrow[G];
  group_rows(0, wrow);
  const int ahead = on ? min(kPre, pieces / 32) : 0;  // whole 32-lane groups only
  uint4 pre[kPre][G];
  gemv::LoadAhead<G, kPre>(wrow, lane, ahead, pre);
  PdlWait();
  PdlLaunchDependents();
  if (!on) return;
  float acc = 0.0f;
  for (int g0 = 0; g0 < top_k; g0 += G) {
    if (g0 > 0) group_rows(g0, wrow);
    const T* x[G];
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const int at = g0 + j < top_k ? g0 + j : g0;
      x[j] = act + (first + route[at]) * k;
    }
    float dot[G][1] = {};
    gemv::Stream<G, kPre, kUnroll>(wrow, lane, g0 == 0 ? ahead : 0, pieces, pre, [&](const uint4(&v)[G], int piece) {
#pragma unroll
      for (int j = 0; j < G; ++j) Format::template Accumulate<1>(v[j], x[j], k, piece, dot[j]);
    });
#pragma unroll
    for (int j = 0; j < G; ++j) {
      if (g0 + j >= top_k) break;
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) dot[j][0] += __shfl_xor_sync(0xffffffffu, dot[j][0], offset);
      float v = dot[j][0];
      if constexpr (Format::kScaled) v *= __ldg(scales + static_cast<int64_t>(expert[g0 + j]) * n + c);
      const float rounded = ToFloat(FromFloat<T>(v));
      acc = moe::CombineStep(acc, rounded, __ldcg(route_weights + first + route[g0 + j]));
    }
  }
  if (lane == 0) out[static_cast<int64_t>(row) * n + col] = FromFloat<T>(acc);
}

template <typename Format, typename T, int G>
cudaError_t LaunchDownCombine(const MoeDownCombineParams<T>& p, cudaStream_t stream,
                              const CudaLaunchOptions& launch) {
  const dim3 grid((p.n + gemv::kWarps - 1) / gemv::kWarps, static_cast<unsigned>(p.rows));
  const auto* down = static_cast<const typename Format::Element*>(p.down);
  const cudaError_t err = LaunchPdl(launch, DownCombineKernel<Format, T, G>, grid, dim3(gemv::kWarps * 32), 0,
                                    stream, p.act, p.chosen, p.weights, down, p.scales, p.top_k, p.k, p.n, p.out);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

template <typename Format, typename T>
cudaError_t LaunchDownCombineForTopK(const MoeDownCombineParams<T>& p, cudaStream_t stream,
                                     const CudaLaunchOptions& launch) {
  if (p.top_k >= 8) return LaunchDownCombine<Format, T, 8>(p, stream, launch);
  if (p.top_k >= 4) return LaunchDownCombine<Format, T, 4>(p, stream, launch);
  return LaunchDownCombine<Format, T, 2>(p, stream, launch);
}

}  // namespace

template <typename T>
cudaError_t MoeDecodeRoute(const MoeDecodeRouteParams<T>& p, cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (p.rows < 1 || p.hidden % 4 != 0 || p.num_experts < 1 || p.num_experts > kMoeMaxExperts || p.top_k < 1 ||
      p.top_k > p.num_experts || p.top_k > kMoeMaxTopK || p.arrivals == nullptr ||
      reinterpret_cast<uintptr_t>(p.x) % 16 != 0 || reinterpret_cast<uintptr_t>(p.router) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const cudaError_t err = LaunchPdl(launch, DecodeRouteKernel<T>, moe::RouterGrid(p.rows, p.num_experts),
                                    dim3(moe::kRouterWarps * 32), 0, stream, p);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

template <typename T>
cudaError_t MoeDecodeDownCombine(const MoeDownCombineParams<T>& p, cudaStream_t stream,
                                 const CudaLaunchOptions& launch) {
  const int k_multiple = p.fp8 ? 16 : 8;
  if (p.act == nullptr || p.chosen == nullptr || p.weights == nullptr || p.down == nullptr || p.out == nullptr ||
      (p.fp8 && p.scales == nullptr) || p.rows < 1 || p.rows > 65535 || p.top_k < 1 || p.top_k > kMoeMaxTopK ||
      p.k < k_multiple || p.k % k_multiple != 0 || p.n < 1 || reinterpret_cast<uintptr_t>(p.act) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.down) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  return p.fp8 ? LaunchDownCombineForTopK<gemv::WeightsFp8<T>>(p, stream, launch)
               : LaunchDownCombineForTopK<gemv::Weights16<T>>(p, stream, launch);
}

#define KVTIER_INSTANTIATE(T)                                                                                  \
  template cudaError_t MoeDecodeRoute<T>(const MoeDecodeRouteParams<T>&, cudaStream_t, const CudaLaunchOptions&); \
  template cudaError_t MoeDecodeDownCombine<T>(const MoeDownCombineParams<T>&, cudaStream_t,                     \
                                               const CudaLaunchOptions&);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
