// KvGather (see kv_gather.h): one thread per 8 elements of one output row.
#include "backend/cuda/kv_gather.h"

#include <algorithm>

#include "backend/cuda/fp8_codes.cuh"
#include "backend/cuda/kv_fp8.cuh"

namespace kvtier::cuda {
namespace {

template <int D>
__global__ void KvGatherKernel(KvGatherParams p, PagedKv<bf16> kv) {
  constexpr int kPieces = D / 8;  // 8 elements (16 output bytes) per thread
  const int64_t per_side = p.padded_positions * kv.num_kv_heads * kPieces;
  const int32_t* table = kv.indices + kv.indptr[p.chunk];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < 2 * per_side;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int side = i >= per_side ? 1 : 0;  // 0 K, 1 V
    const int64_t j = i - side * per_side;
    const int piece = static_cast<int>(j % kPieces);
    const int head = static_cast<int>(j / kPieces % kv.num_kv_heads);
    const int64_t pos = j / kPieces / kv.num_kv_heads;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (pos < p.num_positions) {
      const int32_t entry = table[pos / kv.block_tokens];
      const int token = static_cast<int>(pos % kv.block_tokens);
      // Element offset of the row within the layer: [k|v][kv_head][token][dim].
      const int64_t row = (static_cast<int64_t>(side) * kv.num_kv_heads + head) * kv.block_tokens + token;
      if (kv.fp8) {
        const Fp8Layer layer = Fp8LayerOf<D>(kv, entry, p.layer);
        const uint2 codes = *reinterpret_cast<const uint2*>(layer.codes + row * D + piece * 8);
        value = DequantFp8x8<bf16>(codes, layer.scales[row]);
      } else {
        value = *reinterpret_cast<const uint4*>(KvLayerBase(kv, entry, p.layer) + row * D + piece * 8);
      }
    }
    bf16* out = side == 0 ? p.k_out : p.v_out;
    *reinterpret_cast<uint4*>(out + (pos * kv.num_kv_heads + head) * D + piece * 8) = value;
  }
}

}  // namespace

cudaError_t KvGather(const KvGatherParams& params, const PagedKv<bf16>& kv, cudaStream_t stream) {
  if (params.k_out == nullptr || params.v_out == nullptr || params.num_positions < 0 ||
      params.padded_positions < params.num_positions || kv.num_kv_heads <= 0 || kv.block_tokens <= 0 ||
      (kv.head_dim != 64 && kv.head_dim != 128)) {
    return cudaErrorInvalidValue;
  }
  if (params.padded_positions == 0) return cudaSuccess;
  const int64_t threads_needed = 2 * params.padded_positions * kv.num_kv_heads * (kv.head_dim / 8);
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((threads_needed + threads - 1) / threads, int64_t{1} << 20);
  if (kv.head_dim == 64) {
    KvGatherKernel<64><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(params, kv);
  } else {
    KvGatherKernel<128><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(params, kv);
  }
  return cudaGetLastError();
}

__global__ void WriteChunkLengthsKernel(int32_t* dst, int32_t sq, int32_t skv) {
  dst[0] = sq;
  dst[1] = skv;
}

cudaError_t WriteChunkLengths(int32_t* dst, int32_t sq, int32_t skv, cudaStream_t stream) {
  if (dst == nullptr) return cudaErrorInvalidValue;
  WriteChunkLengthsKernel<<<1, 1, 0, stream>>>(dst, sq, skv);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda
