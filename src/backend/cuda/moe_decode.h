// The decode path of the mixture-of-experts MLP (MoeTile::kGemvFused): a row or two, each
// route on an expert of its own, in three PDL-launched kernels instead of the six of the
// grouped path, in route order (route i = token i / top_k, expert chosen[i]) with no grouping:
//   1. MoeDecodeRoute: the router logits, then the last CTA to finish routes every row;
//   2. MoeDecodeGateUp: gate|up with SiLU, one GEMV per route;
//   3. MoeDecodeDownCombine: each row's down products and their weighted sum, in one kernel.
// The same bits as the grouped path's kernels on the same inputs (same fp32 operations in the
// same order, each route's down output rounded to T before the combine). Launched in this order
// on one stream: kernel 3 reads the routing before its PDL wait (to load its first weights
// early), which is safe because kernel 2 triggers its dependents only after its own wait, that
// is after kernel 1 completed. Capturable: grids sized by the row count, no host sync, the
// arrival counter left at zero by every launch. Stateless; thread-safe for distinct buffers.
#ifndef KVTIER_BACKEND_CUDA_MOE_DECODE_H_
#define KVTIER_BACKEND_CUDA_MOE_DECODE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/moe_kernels.h"
#include "backend/cuda_options.h"

namespace kvtier::cuda {

// Whether MoeDecodeRoute can fuse the norm for `rows` rows of `hidden` elements of elem_bytes
// (the rows are held in shared memory).
bool MoeDecodeRouteNormFits(int rows, int hidden, size_t elem_bytes);

// Kernel 1: MoeRouterLogits then MoeRouteTopK, fused. `arrivals` is one counter, zero before the
// launch (zeroed once at allocation) and zero again after it. With norm_weight set, the
// AddRmsNorm (kernels.h) that makes the MLP's input is fused in front, with the same bits:
// residual += add, normed = norm_weight * residual / rms, and the router reads normed (x is
// unused); MoeDecodeRouteNormFits says which shapes may. residual, add, norm_weight and normed
// 16-byte aligned. add may be the buffer kernel 3 writes the MLP's output to: kernel 3 writes
// only after its PDL wait, after this kernel completed.
template <typename T>
struct MoeDecodeRouteParams {
  const T* x = nullptr;          // (rows, hidden), the MLP's input when no norm is fused
  const float* router = nullptr;  // (num_experts, hidden) fp32
  int rows = 0;
  int hidden = 0;
  int num_experts = 0;
  int top_k = 0;
  bool renormalize = true;
  float* logits = nullptr;       // (rows, num_experts)
  uint32_t* arrivals = nullptr;  // (1)
  int32_t* chosen = nullptr;     // (rows, top_k)
  float* weights = nullptr;      // (rows, top_k)
  float* residual = nullptr;          // (rows, hidden) fp32, += add
  const T* add = nullptr;             // (rows, hidden)
  const float* norm_weight = nullptr;  // (hidden); null: no norm fused
  float eps = 0.0f;
  T* normed = nullptr;  // (rows, hidden): the MLP's input, for the kernels after this one
  L2Prefetch prefetch;  // weights fetched into L2 as the kernel starts (kernels.h)
};
template <typename T>
cudaError_t MoeDecodeRoute(const MoeDecodeRouteParams<T>& params, cudaStream_t stream,
                           const CudaLaunchOptions& launch);

// Kernel 2: MoeExpertGemm's gated product for route i of expert chosen[i] on row i / top_k of
// params.a, out in route order; params.grouping and a_row_of_slot unused (null).
template <typename T>
cudaError_t MoeDecodeGateUp(const MoeGemmParams<T>& params, const int32_t* chosen, int top_k, cudaStream_t stream,
                            const CudaLaunchOptions& launch);

// Kernel 3: out[row] = sum over the row's routes in ascending expert order of weight times the
// route's down product (rounded to T, as the grouped path stores it), in fp32.
template <typename T>
struct MoeDownCombineParams {
  const T* act = nullptr;         // (rows * top_k, k) silu(gate) * up in route order
  const int32_t* chosen = nullptr;  // (rows, top_k)
  const float* weights = nullptr;   // (rows, top_k)
  const void* down = nullptr;       // (num_experts, n, k) T or E4M3 codes
  const float* scales = nullptr;    // fp8: (num_experts, n)
  bool fp8 = false;
  int rows = 0;
  int top_k = 0;
  int k = 0;  // expert intermediate; a multiple of 8 (16 with fp8)
  int n = 0;  // hidden
  T* out = nullptr;  // (rows, n)
  // The weights through the copy engine into shared memory where a CTA's rows fit (rows of up
  // to 4 pieces a lane: Qwen3-MoE's), else through registers; the same bits either way.
  bool bulk = true;
};
template <typename T>
cudaError_t MoeDecodeDownCombine(const MoeDownCombineParams<T>& params, cudaStream_t stream,
                                 const CudaLaunchOptions& launch);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_MOE_DECODE_H_
