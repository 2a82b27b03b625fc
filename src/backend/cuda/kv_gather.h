// KvGather: one sequence's K and V of one layer, read through its block table from the paged
// pool (bf16, or fp8 E4M3 codes dequantized with their row scales in the same pass; staged
// host-resident blocks too) into contiguous bf16 rows, the layout a library's attention
// takes (CudnnAttention); and WriteChunkLengths, the chunk's lengths where that attention's
// graph reads them. Stateless launchers; thread-safe on distinct outputs.
#ifndef KVTIER_BACKEND_CUDA_KV_GATHER_H_
#define KVTIER_BACKEND_CUDA_KV_GATHER_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace kvtier::cuda {

// One sequence's K and V of one layer gathered into contiguous rows of `Out`: bf16 values
// (KvGather) or E4M3 codes at one scale per side (attention_fp8_inputs.h KvGatherFp8).
template <typename Out>
struct KvGatherInto {
  int32_t chunk = 0;  // whose block table: kv.indices[kv.indptr[chunk] ..)
  int32_t layer = 0;
  int64_t num_positions = 0;     // positions 0 .. num_positions - 1 are gathered
  int64_t padded_positions = 0;  // rows num_positions .. padded_positions - 1 are zeroed
  Out* k_out = nullptr;          // (padded_positions, num_kv_heads, head_dim)
  Out* v_out = nullptr;          // (padded_positions, num_kv_heads, head_dim)
};
using KvGatherParams = KvGatherInto<bf16>;

// head_dim 64 or 128 (the pool's layouts the fast attention kernels read); else, or with
// padded_positions < num_positions or a null output, cudaErrorInvalidValue.
cudaError_t KvGather(const KvGatherParams& params, const PagedKv<bf16>& kv, cudaStream_t stream);

// dst[0] = sq, dst[1] = skv (device), in stream order: a kernel taking them by value, so no
// host buffer outlives the call and the stream is not synchronized.
cudaError_t WriteChunkLengths(int32_t* dst, int32_t sq, int32_t skv, cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_KV_GATHER_H_
