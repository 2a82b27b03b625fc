// FP8 (E4M3) weight kernels of the CUDA backend: per-output-channel quantization at load,
// the decode GEMV over fp8 codes dequantized in registers (with the gate|up + SiLU fusion
// of the 16-bit path), and the dequantization of a matrix into 16-bit scratch for the
// prefill GEMMs (W8A16 through cuBLAS). The conversions are those of common/fp8_e4m3.h
// (the device's cvt.e4m3x2 gives the same values), so the device writes and reads the same
// bytes as the CPU reference (model/fp8_weights.h QuantizeRowsFp8). Stateless launchers;
// enqueue on `stream`.
#ifndef KVTIER_BACKEND_CUDA_FP8_KERNELS_H_
#define KVTIER_BACKEND_CUDA_FP8_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda_options.h"

namespace kvtier::cuda {

// weights: (rows, cols) T on the device. scales[r] = max_c |w(r, c)| / 448 (1 for a zero
// row); codes (rows, cols) = e4m3(w / scales[r]), saturating. One CTA per row.
template <typename T>
cudaError_t QuantizeRowsFp8(const T* weights, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                            cudaStream_t stream);

// The GEMV's limits: 1..kGemvFp8MaxRows activation rows, in_features a multiple of 16 (one
// 16-byte load is 16 codes), x and codes 16-byte aligned.
constexpr int kGemvFp8MaxRows = 8;
bool GemvFp8Supported(int num_rows, int64_t in_features, const void* x, const void* codes);

// out (num_rows, out_features) T = x (num_rows, in_features) T times the fp8 weight
// (out_features, in_features) codes with per-output-channel scales, fp32 accumulation:
// out[r, n] = scales[n] * sum_c x[r, c] * e4m3(codes[n, c]). One warp per output feature
// (two for one row: fp8_gemv_rows.cuh), software-pipelined 16-byte code loads, the first ones
// issued before the PDL wait (as the 16-bit GEMV, gemv.cu). cudaErrorInvalidValue outside
// GemvFp8Supported.
template <typename T>
cudaError_t GemvFp8(const T* x, int num_rows, const uint8_t* codes, const float* scales, int64_t out_features,
                    int64_t in_features, T* out, cudaStream_t stream,
                    const CudaLaunchOptions& launch = CudaLaunchOptions());

// The fused gate|up projection on fp8 codes of the (2 * inter, in_features) matrix (gate
// rows then up rows, each with its own scale): out (num_rows, inter) T =
// act(gate) * up. num_rows 1..2, otherwise as GemvFp8.
template <typename T>
cudaError_t GemvGatedMulFp8(const T* x, int num_rows, const uint8_t* codes, const float* scales, int64_t inter,
                            int64_t in_features, GateActivation act, T* out, cudaStream_t stream,
                            const CudaLaunchOptions& launch = CudaLaunchOptions());

// out (rows, cols) T = T(e4m3(codes[r, c]) * scales[r]): the weight as a 16-bit matrix for
// cuBLAS (prefill and larger decode batches). Plain launch (no PDL): it overwrites a
// scratch an earlier GEMM of the stream read.
template <typename T>
cudaError_t DequantizeRowsFp8(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, T* out,
                              cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_FP8_KERNELS_H_
