// MoeTile::kGemv's launcher, internal to the grouped expert product (moe_expert_gemm.cu calls
// it for that tile): MoeExpertGemm's semantics and requirements, the grouping's slot_expert
// filled. moe_expert_gemv.cu also holds the decode path's gate|up (moe_decode.h) on the same
// kernel. Stateless; thread-safe for distinct buffers.
#ifndef KVTIER_BACKEND_CUDA_MOE_EXPERT_GEMV_H_
#define KVTIER_BACKEND_CUDA_MOE_EXPERT_GEMV_H_

#include <cuda_runtime.h>

#include "backend/cuda/moe_kernels.h"

namespace kvtier::cuda {

template <typename T>
cudaError_t MoeExpertGemv(const MoeGemmParams<T>& params, cudaStream_t stream);

// MoeExpertGemm's requirements on the operands and shape (not the grouping), for the decode
// path's gate|up (moe_decode.h) too.
template <typename T>
bool MoeGemmOperandsValid(const MoeGemmParams<T>& params);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_MOE_EXPERT_GEMV_H_
