// The CUDA forward's model features (cuda_model_support.h). Stateless; thread-safe.
#include "backend/cuda_model_support.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kvtier {

absl::Status CudaForwardSupports(const ModelConfig& c) {
  if (c.moe.num_experts == 0) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat("cuda backend: ", std::string(ArchitectureName(c.architecture)),
                                               " needs mixture-of-experts layers (router and experts), which the "
                                               "CUDA forward does not run yet; use --backend cpu"));
}

}  // namespace kvtier
