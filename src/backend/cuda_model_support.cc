// The CUDA forward's model features (cuda_model_support.h). Stateless; thread-safe.
#include "backend/cuda_model_support.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kvtier {
namespace {

// The routing kernels' limits (backend/cuda/moe_kernels.h kMoeMaxExperts, kMoeMaxTopK) and the
// grouped GEMMs' 16-byte rows (16 codes with fp8 experts).
constexpr int64_t kMaxExperts = 256;
constexpr int64_t kMaxTopK = 16;
constexpr int64_t kRowMultiple = 16;

absl::Status CudaMoeSupports(const ModelConfig& c) {
  const std::string arch(ArchitectureName(c.architecture));
  if (c.moe.num_experts > kMaxExperts || c.moe.top_k > kMaxTopK) {
    return absl::UnimplementedError(absl::StrCat("cuda backend: ", arch, " has ", c.moe.num_experts,
                                                 " experts and top ", c.moe.top_k, "; the CUDA router runs up to ",
                                                 kMaxExperts, " and top ", kMaxTopK, "; use --backend cpu"));
  }
  if (c.hidden_size % kRowMultiple != 0 || c.moe.expert_intermediate_size % kRowMultiple != 0) {
    return absl::UnimplementedError(absl::StrCat("cuda backend: ", arch, " hidden size ", c.hidden_size,
                                                 " and expert intermediate size ", c.moe.expert_intermediate_size,
                                                 " must be multiples of ", kRowMultiple, "; use --backend cpu"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaForwardSupports(const ModelConfig& c) {
  if (c.moe.num_experts == 0) return absl::OkStatus();
  return CudaMoeSupports(c);
}

}  // namespace kvtier
