// The decode path's router (moe_decode.h); its gate|up is the per-route GEMV of
// moe_expert_gemv.cu, its down+combine in moe_down_combine.cu.
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/mbarrier.cuh"
#include "backend/cuda/moe_decode.h"
#include "backend/cuda/moe_routing.cuh"
#include "backend/cuda/pdl.h"
#include "backend/cuda/rms_norm_row.cuh"

namespace kvtier::cuda {
namespace {

// The router's CTAs (moe_routing.cu's grid, the first router pieces loaded before the PDL wait),
// then the last to arrive routes every row, one warp a row: the logits it reads were written by
// the others before their arrival (fence, then the counter), and it resets the counter for the
// next launch.
//
// J > 0: the AddRmsNorm before the MLP fused in. Every CTA norms the rows (J chunks of 8 per
// thread, AddRmsNorm's kernel's shape and reduction, so the same bits) into shared memory,
// rounded to T as AddRmsNorm stores them, and reads them from there; only the last CTA writes
// the residual sum and the normed rows back, once every CTA has read the old residual. This
// takes the norm kernel off the decode step's chain of dependent kernels.
constexpr size_t kNormSharedBytes = 40 << 10;  // the fused norm's rows: under 48 KB with the static

template <typename T, int J>
__global__ void __launch_bounds__(moe::kRouterWarps * 32) DecodeRouteKernel(MoeDecodeRouteParams<T> p) {
  static_assert(moe::kRouterWarps * 32 == kNormRowThreads, "the fused norm's reduction is AddRmsNorm's");
  constexpr int kAhead = 8;  // of a lane's router pieces (16 at hidden 2048) loaded before the wait
  extern __shared__ uint4 normed_rows[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int expert = blockIdx.x * moe::kRouterWarps + warp;
  const bool on = expert < p.num_experts;
  if (p.prefetch.base != nullptr && threadIdx.x == 0) {  // weights: no kernel of the step writes them
    PrefetchShareL2(p.prefetch.base, p.prefetch.bytes, blockIdx.y * gridDim.x + blockIdx.x,
                    static_cast<int64_t>(gridDim.x) * gridDim.y);
  }
  const int ahead = on ? moe::RouterAhead(kAhead, p.hidden) : 0;
  float4 pre[kAhead];
  if (on) moe::LoadRouterAhead(p.router, p.hidden, expert, lane, ahead, pre);
  T* xs = reinterpret_cast<T*>(normed_rows);
  if constexpr (J > 0) {
    for (int row = 0; row < p.rows; ++row) {  // PdlEnter inside: the wait, then the dependents
      float y[J][8];
      NormRowAt<T, false, J, kNormRowThreads, false>(row, p.residual, p.add, p.norm_weight, nullptr, p.hidden,
                                                     p.eps, y);
      uint4* out = reinterpret_cast<uint4*>(xs + static_cast<int64_t>(row) * p.hidden);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int c = threadIdx.x + j * kNormRowThreads;
        if (c < p.hidden / 8) out[c] = Pack8<T>(y[j]);
      }
    }
    __syncthreads();
  } else {
    PdlWait();
    PdlLaunchDependents();
  }
  if (on) {
    if constexpr (J > 0) {
      moe::RouterLogitsWarp<kAhead, T, true>(xs, p.router, p.rows, p.hidden, p.num_experts, expert, 0, lane, ahead,
                                             pre, p.logits);
    } else {
      moe::RouterLogitsWarp(p.x, p.router, p.rows, p.hidden, p.num_experts, expert, blockIdx.y * moe::kRouterRows,
                            lane, ahead, pre, p.logits);
    }
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
  if constexpr (J > 0) {
    const int chunks = p.rows * p.hidden / 8;
    uint4* normed = reinterpret_cast<uint4*>(p.normed);
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) normed[c] = normed_rows[c];
    for (int row = 0; row < p.rows; ++row) AddResidualRow(row, p.residual, p.add, p.hidden);
  }
}

}  // namespace

template <typename T>
cudaError_t MoeDecodeRoute(const MoeDecodeRouteParams<T>& p, cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (p.rows < 1 || p.hidden % 4 != 0 || p.num_experts < 1 || p.num_experts > kMoeMaxExperts || p.top_k < 1 ||
      p.top_k > p.num_experts || p.top_k > kMoeMaxTopK || p.arrivals == nullptr ||
      reinterpret_cast<uintptr_t>(p.x) % 16 != 0 || reinterpret_cast<uintptr_t>(p.router) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid = moe::RouterGrid(p.rows, p.num_experts);
  if (!L2PrefetchValid(p.prefetch, static_cast<int64_t>(grid.x) * grid.y)) return cudaErrorInvalidValue;
  auto kernel = DecodeRouteKernel<T, 0>;
  size_t shared = 0;
  if (p.norm_weight != nullptr) {
    if (!MoeDecodeRouteNormFits(p.rows, p.hidden, sizeof(T)) || p.residual == nullptr || p.add == nullptr ||
        p.normed == nullptr || reinterpret_cast<uintptr_t>(p.residual) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(p.add) % 16 != 0 || reinterpret_cast<uintptr_t>(p.norm_weight) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(p.normed) % 16 != 0) {
      return cudaErrorInvalidValue;
    }
    const int chunks_per_thread = (p.hidden / 8 + kNormRowThreads - 1) / kNormRowThreads;
    kernel = chunks_per_thread <= 1   ? DecodeRouteKernel<T, 1>
             : chunks_per_thread <= 2 ? DecodeRouteKernel<T, 2>
                                      : DecodeRouteKernel<T, 4>;
    shared = static_cast<size_t>(p.rows) * p.hidden * sizeof(T);
  }
  const cudaError_t err = LaunchPdl(launch, kernel, grid, dim3(moe::kRouterWarps * 32), shared, stream, p);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

bool MoeDecodeRouteNormFits(int rows, int hidden, size_t elem_bytes) {
  return rows >= 1 && rows <= moe::kRouterRows && hidden % 8 == 0 && hidden <= kNormRowThreads * 8 * 4 &&
         static_cast<size_t>(rows) * hidden * elem_bytes <= kNormSharedBytes;
}

#define KVTIER_INSTANTIATE(T)                                                                                  \
  template cudaError_t MoeDecodeRoute<T>(const MoeDecodeRouteParams<T>&, cudaStream_t, const CudaLaunchOptions&);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
