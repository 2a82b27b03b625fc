// The MoE experts on cuBLAS (see moe_library.h).
#include "backend/cuda/moe_library.h"

#include <vector>

#include "backend/cuda/cublas_type.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_activations.h"
#include "backend/cuda/kernels.h"
#include "common/status_macros.h"

namespace kvtier::cuda {

absl::StatusOr<std::vector<int32_t>> MoeExpertOffsetsOnHost(const MoeRun& run, const MoeBuffers& b,
                                                            cudaStream_t stream) {
  std::vector<int32_t> offsets(static_cast<size_t>(run.num_experts) + 1);
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(offsets.data(), b.grouping.expert_offsets, offsets.size() * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, stream));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return offsets;
}

namespace {

// One grouped GEMM's problems: out (slot order, n) = rows (slot order, k) times each expert's
// (n, k) matrix^T, a group per expert with routes, in cublasGemmGroupedBatchedEx's host arrays;
// its device pointer arrays at `pointers` (3 * num_experts), filled by the host.
struct GroupedProblems {
  std::vector<int> m, n, k, lda, ldb, ldc, sizes;
  std::vector<cublasOperation_t> ta, tb;
  std::vector<float> alpha, beta;
  const void* const* pointers = nullptr;

  GroupedProblems(const std::vector<int32_t>& offsets, const uint16_t* weights, int out_cols, int depth,
                  const void* rows, void* out, const void** device_pointers, const void** host_pointers) {
    const int experts = static_cast<int>(offsets.size()) - 1;
    pointers = device_pointers;
    for (int e = 0; e < experts; ++e) {
      const int first = offsets[static_cast<size_t>(e)], count = offsets[static_cast<size_t>(e) + 1] - first;
      if (count == 0) continue;
      const size_t g = sizes.size();
      host_pointers[g] = weights + static_cast<int64_t>(e) * out_cols * depth;
      host_pointers[experts + g] = static_cast<const uint16_t*>(rows) + static_cast<int64_t>(first) * depth;
      host_pointers[2 * experts + g] = static_cast<uint16_t*>(out) + static_cast<int64_t>(first) * out_cols;
      m.push_back(out_cols), n.push_back(count), k.push_back(depth);
      lda.push_back(depth), ldb.push_back(depth), ldc.push_back(out_cols), sizes.push_back(1);
      ta.push_back(CUBLAS_OP_T), tb.push_back(CUBLAS_OP_N), alpha.push_back(1.0f), beta.push_back(0.0f);
    }
  }

  absl::Status Run(cublasHandle_t cublas, int experts, cudaDataType_t type) const {
    if (sizes.empty()) return absl::OkStatus();
    CUBLAS_RETURN_IF_ERROR(cublasGemmGroupedBatchedEx(
        cublas, ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(), pointers, type, lda.data(),
        pointers + experts, type, ldb.data(), beta.data(), const_cast<void* const*>(pointers + 2 * experts), type,
        ldc.data(), static_cast<int>(sizes.size()), sizes.data(), CUBLAS_COMPUTE_32F));
    return absl::OkStatus();
  }
};

}  // namespace

bool MoeLibraryPathAvailable(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& buffers,
                             cudaStream_t stream) {
  if (run.cublas == nullptr || buffers.wide == nullptr) return false;
  if (experts.gate_up == nullptr) {  // fp8 experts: W8A8 on Fp8Gemm
    if (run.fp8_gemm == nullptr || buffers.x8 == nullptr || experts.gate_up_codes == nullptr ||
        experts.down_codes == nullptr || run.hidden % 16 != 0 || run.expert_inter % 16 != 0) {
      return false;
    }
  } else if (experts.down == nullptr) {
    return false;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture == cudaStreamCaptureStatusNone;
}

template <typename T>
absl::Status EnqueueMoeExpertsOnLibrary(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& b, const T* x,
                                        int rows, cudaStream_t stream) {
  const int routes = rows * run.top_k, h = run.hidden, inter = run.expert_inter;
  ASSIGN_OR_RETURN(const std::vector<int32_t> offsets, MoeExpertOffsetsOnHost(run, b, stream));
  T* gathered = reinterpret_cast<T*>(b.expert_out);  // free until the down products
  CUDA_RETURN_IF_ERROR(
      MoeGatherSlotRows(x, b.grouping.slot_token, routes, static_cast<int64_t>(h) * sizeof(T), gathered, stream));
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
  if (run.library_grouped) {
    // Both GEMMs' pointers in one upload: a pageable copy waits for the stream to drain.
    const int count = run.num_experts;
    std::vector<const void*> host(static_cast<size_t>(6 * count));
    const GroupedProblems gate_up(offsets, experts.gate_up, 2 * inter, h, gathered, wide, b.gemm_pointers, host.data());
    const GroupedProblems down(offsets, experts.down, h, inter, act, b.expert_out, b.gemm_pointers + 3 * count,
                               host.data() + 3 * count);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.gemm_pointers, host.data(), host.size() * sizeof(void*),
                                         cudaMemcpyHostToDevice, stream));
    RETURN_IF_ERROR(gate_up.Run(run.cublas, count, type));
    CUDA_RETURN_IF_ERROR(GatedMul(static_cast<const T*>(wide), routes, inter, GateActivation::kSilu, act, stream,
                                  run.launch));
    return down.Run(run.cublas, count, type);
  }
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

absl::Status EnqueueMoeFp8ExpertsOnLibrary(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& b,
                                           const bf16* x, int rows, cudaStream_t stream) {
  using T = bf16;
  const int routes = rows * run.top_k, h = run.hidden, inter = run.expert_inter;
  CUDA_RETURN_IF_ERROR(QuantizeActivationsFp8(x, rows, h, b.x8, b.x8_scales, stream, run.launch));
  ASSIGN_OR_RETURN(const std::vector<int32_t> offsets, MoeExpertOffsetsOnHost(run, b, stream));
  uint8_t* gathered = reinterpret_cast<uint8_t*>(b.expert_out);  // free until the down products
  CUDA_RETURN_IF_ERROR(MoeGatherSlotRows(b.x8, b.grouping.slot_token, routes, h, gathered, stream));
  CUDA_RETURN_IF_ERROR(MoeSlotScales(b.x8_scales, b.grouping.slot_token, b.grouping.slot_expert,
                                     b.grouping.expert_offsets, routes, b.slot_scales, stream));
  constexpr cudaDataType_t type = CublasType<T>();
  T* wide = reinterpret_cast<T*>(b.wide);
  for (int e = 0; e < run.num_experts; ++e) {
    const int first = offsets[static_cast<size_t>(e)], count = offsets[static_cast<size_t>(e) + 1] - first;
    if (count == 0) continue;
    RETURN_IF_ERROR(run.fp8_gemm->RunVaryingRows(
        gathered + static_cast<int64_t>(first) * h, b.slot_scales + MoeScaleSlot(first, e),
        experts.gate_up_codes + static_cast<int64_t>(e) * 2 * inter * h,
        experts.gate_up_scales + static_cast<int64_t>(e) * 2 * inter, count, h, 2 * inter,
        wide + static_cast<int64_t>(first) * 2 * inter, type, stream));
  }
  uint8_t* act = reinterpret_cast<uint8_t*>(b.act);
  CUDA_RETURN_IF_ERROR(GatedMulFp8(static_cast<const T*>(wide), routes, inter, GateActivation::kSilu, act,
                                   b.act_scales, stream, run.launch));
  CUDA_RETURN_IF_ERROR(MoeSlotScales(b.act_scales, nullptr, b.grouping.slot_expert, b.grouping.expert_offsets, routes,
                                     b.slot_scales, stream));
  T* expert_out = reinterpret_cast<T*>(b.expert_out);
  for (int e = 0; e < run.num_experts; ++e) {
    const int first = offsets[static_cast<size_t>(e)], count = offsets[static_cast<size_t>(e) + 1] - first;
    if (count == 0) continue;
    RETURN_IF_ERROR(run.fp8_gemm->RunVaryingRows(
        act + static_cast<int64_t>(first) * inter, b.slot_scales + MoeScaleSlot(first, e),
        experts.down_codes + static_cast<int64_t>(e) * h * inter, experts.down_scales + static_cast<int64_t>(e) * h,
        count, inter, h, expert_out + static_cast<int64_t>(first) * h, type, stream));
  }
  return absl::OkStatus();
}

template absl::Status EnqueueMoeExpertsOnLibrary<bf16>(const MoeRun&, const MoeExperts&, const MoeBuffers&,
                                                       const bf16*, int, cudaStream_t);
template absl::Status EnqueueMoeExpertsOnLibrary<f16>(const MoeRun&, const MoeExperts&, const MoeBuffers&, const f16*,
                                                      int, cudaStream_t);

}  // namespace kvtier::cuda
