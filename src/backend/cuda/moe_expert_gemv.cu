// MoeTile::kGemv of the grouped expert product (moe_kernels.h): for steps of a row or two,
// every route's product with its own expert's weights on gemv_kernel.cuh's decode GEMV (one warp
// per output column, weight rows streamed in 16-byte pieces, software-pipelined; 16-bit weights
// or fp8 codes through the same Format types). Grid (column blocks, routes): the CTA of slot s
// reads slot_expert[s]'s rows only, so the step streams the chosen experts' weights and nothing
// else. The expert comes from the grouping kernel just before, so no weight can be loaded
// before the previous kernel ends: launched plainly (no PDL), nothing loaded ahead.
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/moe_expert_gemv.h"

namespace kvtier::cuda {
namespace {

// out[slot, col] (W = 1) or silu(gate) * up (W = 2) of slot blockIdx.y.
template <typename Format, typename T, int W>
__global__ void __launch_bounds__(gemv::kWarps * 32)
    ExpertGemvKernel(const T* __restrict__ a, const int32_t* __restrict__ a_row_of_slot,
                     const int32_t* __restrict__ slot_expert, const typename Format::Element* __restrict__ weights,
                     const float* __restrict__ scales, int k, int n, T* __restrict__ out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = blockIdx.x * gemv::kWarps + warp;
  if (col >= n) return;
  const int slot = blockIdx.y;
  const int64_t expert = slot_expert[slot];
  const int64_t a_row = a_row_of_slot != nullptr ? a_row_of_slot[slot] : slot;
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
cudaError_t Launch(const MoeGemmParams<T>& p, const typename Format::Element* weights, cudaStream_t stream) {
  const dim3 grid((p.n + gemv::kWarps - 1) / gemv::kWarps, static_cast<unsigned>(p.routes));
  ExpertGemvKernel<Format, T, W><<<grid, gemv::kWarps * 32, 0, stream>>>(
      p.a, p.a_row_of_slot, p.grouping->slot_expert, weights, p.scales, p.k, p.n, p.out);
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t MoeExpertGemv(const MoeGemmParams<T>& p, cudaStream_t stream) {
  if (p.grouping->slot_expert == nullptr || p.routes > 65535) return cudaErrorInvalidValue;
  if (p.fp8) {
    const auto* codes = static_cast<const uint8_t*>(p.weights);
    return p.gated ? Launch<gemv::WeightsFp8<T>, T, 2>(p, codes, stream)
                   : Launch<gemv::WeightsFp8<T>, T, 1>(p, codes, stream);
  }
  const auto* w = static_cast<const T*>(p.weights);
  return p.gated ? Launch<gemv::Weights16<T>, T, 2>(p, w, stream) : Launch<gemv::Weights16<T>, T, 1>(p, w, stream);
}

template cudaError_t MoeExpertGemv<bf16>(const MoeGemmParams<bf16>&, cudaStream_t);
template cudaError_t MoeExpertGemv<f16>(const MoeGemmParams<f16>&, cudaStream_t);

}  // namespace kvtier::cuda
