// FP8 (E4M3) weight kernels of the CUDA backend: per-output-channel quantization at load and
// the decode GEMV over fp8 codes, dequantized in registers. The conversions are those of
// common/fp8_e4m3.h, so the device writes the same bytes as the CPU reference
// (model/fp8_weights.h QuantizeRowsFp8). Stateless launchers; enqueue on `stream`.
#ifndef KVTIER_BACKEND_CUDA_FP8_KERNELS_H_
#define KVTIER_BACKEND_CUDA_FP8_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace kvtier::cuda {

// weights: (rows, cols) T on the device. scales[r] = max_c |w(r, c)| / 448 (1 for a zero
// row); codes (rows, cols) = e4m3(w / scales[r]), saturating. One CTA per row.
template <typename T>
cudaError_t QuantizeRowsFp8(const T* weights, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                            cudaStream_t stream);

// out (num_rows, out_features) T = x (num_rows, in_features) T times the fp8 weight
// (out_features, in_features) codes with per-output-channel scales, fp32 accumulation:
// out[r, n] = scales[n] * sum_c x[r, c] * e4m3(codes[n, c]). num_rows 1..8 (decode);
// in_features a multiple of 16 (16-byte code loads). One warp per output feature.
// cudaErrorInvalidValue for shapes outside that.
template <typename T>
cudaError_t GemvFp8(const T* x, int num_rows, const uint8_t* codes, const float* scales, int64_t out_features,
                    int64_t in_features, T* out, cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_FP8_KERNELS_H_
