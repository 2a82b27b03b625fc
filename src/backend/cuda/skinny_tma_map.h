// Tensor maps for the skinny projection's TMA pipeline (skinny_gemm_tma.cuh): a row-major
// (rows, k) matrix of bf16 or one-byte codes read in boxes of 128 bytes of k by `box_rows`
// rows, swizzled the 128-byte way wgmma's descriptors read, rows past the end read as zeros.
// The encoder is the driver's cuTensorMapEncodeTiled, reached through the runtime (the
// library does not link libcuda).
#ifndef KVTIER_BACKEND_CUDA_SKINNY_TMA_MAP_H_
#define KVTIER_BACKEND_CUDA_SKINNY_TMA_MAP_H_

#include <cuda.h>

#include <cstdint>

namespace kvtier::cuda {

// True when the driver has cuTensorMapEncodeTiled (CUDA 12 drivers and later).
bool SkinnyTmaAvailable();

// Encodes `map` for `base` (16-byte aligned, k a multiple of 16 elements); a base and shape
// seen before on this thread come from a per-thread cache. False when the driver refuses it
// or has no encoder.
// l2_promotion: 0, 128 or 256 bytes (anything else: 256).
bool EncodeSkinnyTmaMap(CUtensorMap* map, const void* base, bool two_byte_elements, int64_t rows, int64_t k,
                        int box_rows, int l2_promotion);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_SKINNY_TMA_MAP_H_
