// The fp8 projection for decode batches of 3..64 rows (W8A16 on the tensor cores): the
// per-row GEMV is compute-bound there and dequantizing the whole matrix for cuBLAS moves
// five bytes per weight instead of one. Each CTA streams the codes of 128 weight rows and
// the activation rows through a shared-memory ring (cp.async), turns codes into 16-bit
// values in registers (exact: every E4M3 value is a bf16 and an f16 value) and runs
// mma.m16n8k16 with fp32 accumulation; K is split over CTAs so small projections still
// fill the GPU, each split writing fp32 partials that a second kernel sums in split order
// (deterministic), scales per output channel and rounds (or applies act(gate) * up).
#ifndef KVTIER_BACKEND_CUDA_FP8_SKINNY_H_
#define KVTIER_BACKEND_CUDA_FP8_SKINNY_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "backend/cuda/kernels.h"
#include "backend/cuda_options.h"

namespace kvtier::cuda {

constexpr int kSkinnyFp8MaxRows = 64;

// Opts the kernels into more than 48 KiB of shared memory; once per process before any
// SkinnyFp8 (not while a stream is being captured).
cudaError_t SkinnyFp8Init();

// 1 <= rows <= kSkinnyFp8MaxRows, in_features a multiple of 64, x and codes 16-byte aligned.
bool SkinnyFp8Supported(int rows, int64_t in_features, const void* x, const void* codes);
// K splits for an (out_features, in_features) matrix on `sm_count` SMs.
int SkinnyFp8Splits(int64_t out_features, int64_t in_features, int sm_count);
// fp32 partials SkinnyFp8 needs (its `partial` argument).
size_t SkinnyFp8PartialFloats(int rows, int64_t out_features, int splits);

// out (rows, out_features) T = x (rows, in_features) times the fp8 weight (codes, one scale
// per output row). With a gate activation the weight is gate|up (out_features = 2 * inter
// rows) and out (rows, inter) = gate(gate rows) * up; nullopt: the plain projection. `splits` from SkinnyFp8Splits; `partial` holds
// SkinnyFp8PartialFloats floats. PDL launches (reads of x and partial after the wait).
template <typename T>
cudaError_t SkinnyFp8(const T* x, int rows, const uint8_t* codes, const float* scales, int64_t out_features,
                      int64_t in_features, int splits, float* partial, std::optional<GateActivation> gate, T* out,
                      cudaStream_t stream, const CudaLaunchOptions& launch = CudaLaunchOptions());

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_FP8_SKINNY_H_
