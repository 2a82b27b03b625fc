// Device helpers for the fp8 (E4M3) KV format of kv_layout.h as the CUDA kernels read and
// write it: per block, the codes at the usual element offsets ([layer][k|v][kv_head][token]
// [head_dim], one byte each), then one fp32 scale per (layer, k|v, kv_head, token) row in the
// same order. Row r's codes start at byte r * head_dim of the block and its scale at byte
// elements_per_block + 4 r, so the row index is the element offset / head_dim.
//
// The KV-write kernel quantizes with the CPU backend's rule (cpu_ops.cc: scale = amax / 448,
// 1 for an all-zero row; code = FloatToFp8E4M3(x / scale), both divisions correctly rounded:
// nvcc's default -prec-div; the code by the hardware conversion, which gives common/fp8_e4m3.h's
// codes: fp8_codes.cuh Float2ToFp8x2), so the device, host and disk tiers hold the same bytes
// as a CPU run on the same row values.
// Attention kernels dequantize in registers (fp8_codes.cuh): code -> half (exact, one cvt per
// pair on sm_89+), times the row's scale in fp32, rounded to the compute type T the tensor
// cores multiply.
#ifndef KVTIER_BACKEND_CUDA_KV_FP8_CUH_
#define KVTIER_BACKEND_CUDA_KV_FP8_CUH_

#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/fp8_codes.cuh"
#include "backend/cuda/kernels.h"
#include "common/fp8_e4m3.h"

namespace kvtier::cuda {

// First byte of block `block` of an fp8 pool.
template <typename T>
__device__ __forceinline__ uint8_t* Fp8BlockBase(const PagedKv<T>& kv, int64_t block) {
  return reinterpret_cast<uint8_t*>(kv.pool) + block * kv.block_bytes;
}

// The codes and row scales of layer `layer` of table entry `entry` (PagedKv::indices): a pool
// block (the layer's codes at its element offset, its scales after every layer's codes) or,
// for entry e < 0, staged slot -1 - e, which holds the layer's codes then its scales
// (host_kv_streamer.h). The code of element offset r within the layer is codes[r], its row's
// scale scales[r / D].
struct Fp8Layer {
  const uint8_t* codes;
  const float* scales;
};

template <int D, typename T>
__device__ __forceinline__ Fp8Layer Fp8LayerOf(const PagedKv<T>& kv, int32_t entry, int32_t layer) {
  const int64_t layer_elements = 2 * static_cast<int64_t>(kv.num_kv_heads) * kv.block_tokens * D;
  Fp8Layer out;
  if (entry < 0) {
    const int64_t slot_bytes = layer_elements + layer_elements / D * static_cast<int64_t>(sizeof(float));
    const uint8_t* slot = reinterpret_cast<const uint8_t*>(kv.staged) + static_cast<int64_t>(-1 - entry) * slot_bytes;
    out.codes = slot;
    out.scales = reinterpret_cast<const float*>(slot + layer_elements);
  } else {
    const uint8_t* base = reinterpret_cast<const uint8_t*>(kv.pool) + static_cast<int64_t>(entry) * kv.block_bytes;
    out.codes = base + static_cast<int64_t>(layer) * layer_elements;
    out.scales = reinterpret_cast<const float*>(base + kv.block_elements) + static_cast<int64_t>(layer) * (layer_elements / D);
  }
  return out;
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_KV_FP8_CUH_
