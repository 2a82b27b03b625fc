// MoeTile::kGemv of the grouped expert product (moe_kernels.h), and the decode path's gate|up
// (moe_decode.h): for steps of a row or two, every route's product with its own expert's
// weights on gemv_kernel.cuh's decode GEMV (one warp per output column, weight rows streamed in
// 16-byte pieces, software-pipelined; 16-bit weights or fp8 codes through the same Format
// types). Grid (column blocks, slots): the CTA of slot s reads its expert's rows only, so the
// step streams the chosen experts' weights and nothing else. The expert comes from the kernel
// just before (the grouping, or the fused router), so no weight can be loaded before it ends:
// nothing loaded ahead of the PDL wait.
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/moe_decode.h"
#include "backend/cuda/moe_expert_gemv.h"
#include "backend/cuda/pdl.h"

namespace kvtier::cuda {
namespace {

// Where slot s's expert and activation row come from: the grouping (expert[s], and a_row[s] or
// s), or route order (expert = chosen[s], a_row null, row s / slots_per_row).
struct SlotSource {
  const int32_t* expert = nullptr;
  const int32_t* a_row = nullptr;
  int slots_per_row = 1;
};

// out[slot, col] (W = 1) or silu(gate) * up (W = 2) of slot blockIdx.y.
template <typename Format, typename T, int W>
__global__ void __launch_bounds__(gemv::kWarps * 32)
    ExpertGemvKernel(const T* __restrict__ a, SlotSource source, const typename Format::Element* __restrict__ weights,
                     const float* __restrict__ scales, int k, int n, T* __restrict__ out) {
  // Trigger only after the wait: the decode path's down+combine reads the routing before its
  // own wait (moe_decode.h), which is safe only once this kernel's predecessor has completed.
  PdlWait();
  PdlLaunchDependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = blockIdx.x * gemv::kWarps + warp;
  if (col >= n) return;
  const int slot = blockIdx.y;
  const int64_t expert = __ldcg(source.expert + slot);
  const int64_t a_row = source.a_row != nullptr ? __ldcg(source.a_row + slot) : slot / source.slots_per_row;
  const T* x = a + a_row * k;
  const int64_t matrix_rows = static_cast<int64_t>(W) * n;
  const uint4* wrow[W];
#pragma unroll
  for (int j = 0; j < W; ++j) {
    wrow[j] = reinterpret_cast<const uint4*>(weights + (expert * matrix_rows + col + j * static_cast<int64_t>(n)) * k);
  }
  float acc[W][1] = {};
  const uint4 none[1][W] = {};
  auto consume = [&](const uint4(&v)[W], int piece) {
#pragma unroll
    for (int j = 0; j < W; ++j) Format::template Accumulate<1>(v[j], x, k, piece, acc[j]);
  };
  gemv::Stream<W, 1, gemv::kUnroll>(wrow, lane, /*ahead=*/0, k / Format::kPerPiece, none, consume);
  float v[W];
#pragma unroll
  for (int j = 0; j < W; ++j) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) acc[j][0] += __shfl_xor_sync(0xffffffffu, acc[j][0], offset);
    v[j] = acc[j][0];
    if constexpr (Format::kScaled) v[j] *= __ldg(scales + expert * matrix_rows + col + j * static_cast<int64_t>(n));
  }
  if (lane != 0) return;
  float result = v[0];
  if constexpr (W == 2) result = GateTimes<GateActivation::kSilu>(v[0], v[1]);
  out[static_cast<int64_t>(slot) * n + col] = FromFloat<T>(result);
}

template <typename Format, typename T, int W>
cudaError_t Launch(const MoeGemmParams<T>& p, const typename Format::Element* weights, const SlotSource& source,
                   cudaStream_t stream, const CudaLaunchOptions& launch) {
  const dim3 grid((p.n + gemv::kWarps - 1) / gemv::kWarps, static_cast<unsigned>(p.routes));
  const cudaError_t err = LaunchPdl(launch, ExpertGemvKernel<Format, T, W>, grid, dim3(gemv::kWarps * 32), 0, stream,
                                    p.a, source, weights, p.scales, p.k, p.n, p.out);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchForFormat(const MoeGemmParams<T>& p, const SlotSource& source, cudaStream_t stream,
                            const CudaLaunchOptions& launch) {
  if (source.expert == nullptr || p.routes > 65535) return cudaErrorInvalidValue;
  if (p.fp8) {
    const auto* codes = static_cast<const uint8_t*>(p.weights);
    return p.gated ? Launch<gemv::WeightsFp8<T>, T, 2>(p, codes, source, stream, launch)
                   : Launch<gemv::WeightsFp8<T>, T, 1>(p, codes, source, stream, launch);
  }
  const auto* w = static_cast<const T*>(p.weights);
  return p.gated ? Launch<gemv::Weights16<T>, T, 2>(p, w, source, stream, launch)
                 : Launch<gemv::Weights16<T>, T, 1>(p, w, source, stream, launch);
}

}  // namespace

template <typename T>
cudaError_t MoeExpertGemv(const MoeGemmParams<T>& p, cudaStream_t stream) {
  SlotSource source;
  source.expert = p.grouping->slot_expert;
  source.a_row = p.a_row_of_slot;
  CudaLaunchOptions plain;  // after the grouping kernel, which does not trigger its dependents
  plain.pdl = false;
  return LaunchForFormat(p, source, stream, plain);
}

template <typename T>
cudaError_t MoeDecodeGateUp(const MoeGemmParams<T>& p, const int32_t* chosen, int top_k, cudaStream_t stream,
                            const CudaLaunchOptions& launch) {
  if (!MoeGemmOperandsValid(p) || !p.gated || top_k < 1 || p.a_row_of_slot != nullptr) return cudaErrorInvalidValue;
  SlotSource source;
  source.expert = chosen;
  source.slots_per_row = top_k;
  return LaunchForFormat(p, source, stream, launch);
}

#define KVTIER_INSTANTIATE(T)                                                                         \
  template cudaError_t MoeExpertGemv<T>(const MoeGemmParams<T>&, cudaStream_t);                       \
  template cudaError_t MoeDecodeGateUp<T>(const MoeGemmParams<T>&, const int32_t*, int, cudaStream_t, \
                                          const CudaLaunchOptions&);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
