// MoeTile::kGemv's launcher, internal to the grouped expert product (moe_expert_gemm.cu calls
// it for that tile): MoeExpertGemm's semantics and requirements, the grouping's slot_expert
// filled. Stateless; thread-safe for distinct buffers.
#ifndef KVTIER_BACKEND_CUDA_MOE_EXPERT_GEMV_H_
#define KVTIER_BACKEND_CUDA_MOE_EXPERT_GEMV_H_

#include <cuda_runtime.h>

#include "backend/cuda/moe_kernels.h"

namespace kvtier::cuda {

template <typename T>
cudaError_t MoeExpertGemv(const MoeGemmParams<T>& params, cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_MOE_EXPERT_GEMV_H_
