// The MoE experts on the grouped skinny kernel (see moe_skinny.h).
#include "backend/cuda/moe_skinny.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_library.h"
#include "backend/cuda/skinny_gemm.h"
#include "common/status_macros.h"

namespace kvtier::cuda {

std::vector<int4> MoeSkinnyProblems(const std::vector<int32_t>& offsets, int tile_rows) {
  std::vector<int4> problems;
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    for (int32_t first = offsets[e]; first < offsets[e + 1]; first += tile_rows) {
      problems.push_back(make_int4(static_cast<int>(e), first, std::min(tile_rows, offsets[e + 1] - first), 0));
    }
  }
  return problems;
}

int MoeSkinnyTileRows(const std::vector<int32_t>& offsets) {
  int32_t most = 0;
  for (size_t e = 0; e + 1 < offsets.size(); ++e) most = std::max(most, offsets[e + 1] - offsets[e]);
  for (int rows : {16, 32, 64}) {
    if (most <= rows) return rows;
  }
  return kSkinnyGemmMaxRows;
}

int64_t MoeSkinnyMaxProblems(int64_t routes, int64_t num_experts) { return routes / 16 + num_experts; }

bool MoeSkinnyPathAvailable(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& buffers,
                            cudaStream_t stream) {
  if (run.skinny_workspace == nullptr || run.sm_count < 1 || buffers.wide == nullptr || buffers.problems == nullptr) {
    return false;
  }
  // The kernel's k is a multiple of 16 and its n of 8: hidden and the experts' width, both ways.
  if (run.hidden % 16 != 0 || run.expert_inter % 16 != 0) return false;
  const bool fp8 = experts.gate_up == nullptr;
  if (fp8 ? (experts.gate_up_codes == nullptr || experts.down_codes == nullptr) : experts.down == nullptr) {
    return false;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture == cudaStreamCaptureStatusNone;
}

namespace {

// One projection over every problem: x (slot order, k) times each problem's expert's (n, k)
// matrix^T into out (slot order, n), in as few launches as the kernel's tile counters allow.
absl::Status GroupedProjection(const MoeRun& run, const bf16* x, const void* w, const float* scales,
                               const int4* problems, int count, int tile_rows, int k, int n, bf16* out,
                               cudaStream_t stream) {
  const int per_launch = SkinnyGroupedMaxProblems(n);
  if (per_launch < 1) return absl::InvalidArgumentError(absl::StrCat("moe skinny: ", n, " columns"));
  CudaLaunchOptions plain;
  plain.pdl = false;  // after the gather and GatedMul, which do not trigger early
  for (int done = 0; done < count; done += per_launch) {
    const int now = std::min(per_launch, count - done);
    const cudaError_t err =
        scales == nullptr
            ? SkinnyGemmGrouped(x, static_cast<const bf16*>(w), problems + done, now, tile_rows, k, n, out,
                                run.skinny_workspace, run.sm_count, run.skinny_pipeline, stream, plain)
            : SkinnyGemmGroupedFp8(x, static_cast<const uint8_t*>(w), scales, problems + done, now, tile_rows, k, n,
                                   out, run.skinny_workspace, run.sm_count, run.skinny_pipeline, stream, plain);
    CUDA_RETURN_IF_ERROR(err);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EnqueueMoeExpertsOnSkinny(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& b,
                                       const bf16* x, int rows, cudaStream_t stream) {
  const int routes = rows * run.top_k, h = run.hidden, inter = run.expert_inter;
  ASSIGN_OR_RETURN(const std::vector<int32_t> offsets, MoeExpertOffsetsOnHost(run, b, stream));
  const int tile_rows = MoeSkinnyTileRows(offsets);
  const std::vector<int4> problems = MoeSkinnyProblems(offsets, tile_rows);
  if (problems.empty()) return absl::OkStatus();
  const int count = static_cast<int>(problems.size());
  if (count > MoeSkinnyMaxProblems(b.max_tokens * run.top_k, run.num_experts)) {
    return absl::InternalError(absl::StrCat("moe skinny: ", count, " problems"));
  }
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(b.problems, problems.data(), problems.size() * sizeof(int4), cudaMemcpyHostToDevice, stream));
  bf16* gathered = reinterpret_cast<bf16*>(b.expert_out);  // free until the down products
  CUDA_RETURN_IF_ERROR(
      MoeGatherSlotRows(x, b.grouping.slot_token, routes, static_cast<int64_t>(h) * sizeof(bf16), gathered, stream));
  const bool fp8 = experts.gate_up == nullptr;
  bf16* wide = reinterpret_cast<bf16*>(b.wide);
  bf16* act = reinterpret_cast<bf16*>(b.act);
  RETURN_IF_ERROR(GroupedProjection(
      run, gathered, fp8 ? static_cast<const void*>(experts.gate_up_codes) : experts.gate_up,
      fp8 ? experts.gate_up_scales : nullptr, b.problems, count, tile_rows, h, 2 * inter, wide, stream));
  CUDA_RETURN_IF_ERROR(
      GatedMul(static_cast<const bf16*>(wide), routes, inter, GateActivation::kSilu, act, stream, run.launch));
  return GroupedProjection(run, act, fp8 ? static_cast<const void*>(experts.down_codes) : experts.down,
                           fp8 ? experts.down_scales : nullptr, b.problems, count, tile_rows, inter, h,
                           reinterpret_cast<bf16*>(b.expert_out), stream);
}

}  // namespace kvtier::cuda
