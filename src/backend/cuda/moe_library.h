// The experts of a mixture-of-experts MLP on cuBLAS (MoeTile::kLibrary), for prefill-sized
// steps: each expert gets tens to hundreds of routes there, and a library GEMM per expert runs
// those rows near the tensor cores' rate, which the grouped tiles (moe_kernels.h) do not. After
// the routing and grouping (MoeGroupRoutes), the experts' slot offsets are read back to the host
// (one copy and a stream synchronization per layer), so the path is not capturable: EnqueueMoeMlp
// takes it only on a stream that is not capturing, with 16-bit experts and the buffers'
// `wide` allocated; otherwise the grouped tiles run. Steps:
//   1. the routes' rows gathered in slot order into buffers.expert_out (MoeGatherSlots);
//   2. per expert with routes: gate|up = rows times its (2 * inter, hidden) matrix^T
//      (cublasGemmEx, fp32 accumulation) into buffers.wide, in slot order;
//   3. GatedMul (SiLU) into buffers.act;
//   4. per expert: down into buffers.expert_out, in slot order;
// then MoeCombine as on the grouped path. The products are cuBLAS's, rounded to T between the
// steps as the dense MLP's are; the tests hold them to the CPU within the 16-bit bounds.
#ifndef KVTIER_BACKEND_CUDA_MOE_LIBRARY_H_
#define KVTIER_BACKEND_CUDA_MOE_LIBRARY_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "backend/cuda/moe_layer.h"

namespace kvtier::cuda {

// out (routes, k) = rows[slot_token[s]] for every slot s; k a multiple of 8, rows and out
// 16-byte aligned.
template <typename T>
cudaError_t MoeGatherSlots(const T* rows, const int32_t* slot_token, int routes, int k, T* out, cudaStream_t stream);

// Whether `run` can take the library path for these experts and buffers on `stream` now.
bool MoeLibraryPathAvailable(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& buffers,
                             cudaStream_t stream);

// Steps 1-4 above for `rows` rows of x, after MoeGroupRoutes filled buffers.grouping; leaves
// each route's expert output in buffers.expert_out (slot order) for MoeCombine.
template <typename T>
absl::Status EnqueueMoeExpertsOnLibrary(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& buffers,
                                        const T* x, int rows, cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_MOE_LIBRARY_H_
