// Activations quantized per token to E4M3 by the kernels that produce them, for the fp8 x fp8
// projections of prefill-sized steps (fp8_gemm.h): each row gets scale = max |value| / 448
// (1 for a zero row) and codes e4m3(value / scale), the rule of the weights' channels
// (fp8_kernels.h QuantizeRowsFp8, common/fp8_e4m3.h), so the row is one pass of the producer
// over memory instead of a 16-bit write and a quantizing pass. One CTA per row (the gated
// product: one or a cluster of CTAs per row). Stateless launchers; enqueue on `stream`.
#ifndef KVTIER_BACKEND_CUDA_FP8_ACTIVATIONS_H_
#define KVTIER_BACKEND_CUDA_FP8_ACTIVATIONS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gate_activation.h"
#include "backend/cuda_options.h"

namespace kvtier::cuda {

// AddRmsNorm (kernels.h) without a row map, its normalized rows quantized: residual (rows,
// dim) += add (when not null), then codes (rows, dim) / scales (rows) of
// weight * residual * rsqrt(mean(residual^2) + eps).
template <typename T>
cudaError_t AddRmsNormFp8(float* residual, const T* add, const float* weight, int rows, int dim, float eps,
                          uint8_t* codes, float* scales, cudaStream_t stream, const CudaLaunchOptions& launch);

// GatedMul (kernels.h), quantized: codes (rows, dim) / scales (rows) of act(gate) * up, with
// gate_up (rows, 2 * dim) gate then up.
template <typename T>
cudaError_t GatedMulFp8(const T* gate_up, int rows, int dim, GateActivation act, uint8_t* codes, float* scales,
                        cudaStream_t stream, const CudaLaunchOptions& launch);

// GatedMulFp8 with each row spread over `ctas_per_row` CTAs of one thread block cluster (2, 4 or
// 8, on sm_90+; dim % 8 == 0, 16-byte aligned rows, dim <= ctas_per_row * 8192), or over one CTA
// (1), or as many as GatedMulFp8 picks for `rows` on this GPU (0). The codes and scales are the
// same for every spread. cudaErrorInvalidValue for a spread the row does not fit.
template <typename T>
cudaError_t GatedMulFp8Spread(const T* gate_up, int rows, int dim, GateActivation act, int ctas_per_row,
                              uint8_t* codes, float* scales, cudaStream_t stream, const CudaLaunchOptions& launch);

// codes (rows, dim) / scales (rows) of the 16-bit rows x (the attention output).
template <typename T>
cudaError_t QuantizeActivationsFp8(const T* x, int rows, int dim, uint8_t* codes, float* scales, cudaStream_t stream,
                                   const CudaLaunchOptions& launch);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_FP8_ACTIVATIONS_H_
