// The MoE experts on cuBLAS (see moe_library.h).
#include "backend/cuda/moe_library.h"

#include <vector>

#include "backend/cuda/cublas_type.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace kvtier::cuda {

bool MoeLibraryPathAvailable(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& buffers,
                             cudaStream_t stream) {
  if (run.cublas == nullptr || buffers.wide == nullptr || experts.gate_up == nullptr || experts.down == nullptr) {
    return false;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture == cudaStreamCaptureStatusNone;
}

template <typename T>
absl::Status EnqueueMoeExpertsOnLibrary(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& b, const T* x,
                                        int rows, cudaStream_t stream) {
  const int routes = rows * run.top_k, h = run.hidden, inter = run.expert_inter;
  // Each expert's first slot, known to the host only after the grouping ran.
  std::vector<int32_t> offsets(static_cast<size_t>(run.num_experts) + 1);
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(offsets.data(), b.grouping.expert_offsets, offsets.size() * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, stream));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  T* gathered = reinterpret_cast<T*>(b.expert_out);  // free until the down products
  CUDA_RETURN_IF_ERROR(MoeGatherSlots(x, b.grouping.slot_token, routes, h, gathered, stream));
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(run.cublas, stream));
  constexpr cudaDataType_t type = CublasType<T>();
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major out (count, n) = a (count, k) times w (n, k)^T, as Projections::Gemm.
  auto gemm = [&](const uint16_t* w, const T* a, int count, int k, int n, T* out) {
    return cublasGemmEx(run.cublas, CUBLAS_OP_T, CUBLAS_OP_N, n, count, k, &alpha, w, type, k, a, type, k, &beta, out,
                        type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  T* wide = reinterpret_cast<T*>(b.wide);
  T* act = reinterpret_cast<T*>(b.act);
  for (int e = 0; e < run.num_experts; ++e) {
    const int first = offsets[static_cast<size_t>(e)], count = offsets[static_cast<size_t>(e) + 1] - first;
    if (count == 0) continue;
    CUBLAS_RETURN_IF_ERROR(gemm(experts.gate_up + static_cast<int64_t>(e) * 2 * inter * h,
                                gathered + static_cast<int64_t>(first) * h, count, h, 2 * inter,
                                wide + static_cast<int64_t>(first) * 2 * inter));
  }
  CUDA_RETURN_IF_ERROR(GatedMul(static_cast<const T*>(wide), routes, inter, GateActivation::kSilu, act, stream,
                                run.launch));
  T* expert_out = reinterpret_cast<T*>(b.expert_out);
  for (int e = 0; e < run.num_experts; ++e) {
    const int first = offsets[static_cast<size_t>(e)], count = offsets[static_cast<size_t>(e) + 1] - first;
    if (count == 0) continue;
    CUBLAS_RETURN_IF_ERROR(gemm(experts.down + static_cast<int64_t>(e) * h * inter,
                                act + static_cast<int64_t>(first) * inter, count, inter, h,
                                expert_out + static_cast<int64_t>(first) * h));
  }
  return absl::OkStatus();
}

template absl::Status EnqueueMoeExpertsOnLibrary<bf16>(const MoeRun&, const MoeExperts&, const MoeBuffers&,
                                                       const bf16*, int, cudaStream_t);
template absl::Status EnqueueMoeExpertsOnLibrary<f16>(const MoeRun&, const MoeExperts&, const MoeBuffers&, const f16*,
                                                      int, cudaStream_t);

}  // namespace kvtier::cuda
