// Validation of the tensor-parallel options against each other and against a model.
#include "backend/tensor_parallel.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvtier {

absl::Status ValidateTensorParallelOptions(int32_t degree, std::span<const int32_t> devices) {
  if (degree != 1 && degree != 2 && degree != 4 && degree != 8) {
    return absl::InvalidArgumentError(absl::StrCat("tensor_parallel must be 1, 2, 4 or 8, got ", degree));
  }
  if (devices.empty()) return absl::OkStatus();
  if (static_cast<int64_t>(devices.size()) != degree) {
    return absl::InvalidArgumentError(absl::StrCat("devices names ", devices.size(),
                                                   " GPUs, tensor_parallel is ", degree, ": give one per rank"));
  }
  std::vector<int32_t> sorted(devices.begin(), devices.end());
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() < 0) return absl::InvalidArgumentError(absl::StrCat("devices: negative GPU ordinal ", sorted.front()));
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return absl::InvalidArgumentError("devices names one GPU twice");
  }
  return absl::OkStatus();
}

absl::Status ValidateTensorParallelModel(const ModelConfig& config, int32_t degree) {
  if (degree == 1) return absl::OkStatus();
  const struct {
    const char* name;
    int64_t value;
  } splits[] = {{"num_attention_heads", config.num_heads},
                {"num_key_value_heads", config.num_kv_heads},
                {"intermediate_size", config.intermediate_size}};
  for (const auto& split : splits) {
    if (split.value % degree != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor_parallel ", degree, ": ", split.name, " (", split.value,
                                                     ") is not divisible by it"));
    }
  }
  if (config.moe.num_experts > 0) {
    return absl::UnimplementedError(absl::StrCat("tensor_parallel ", degree,
                                                 ": mixture-of-experts models are not sharded (", config.moe.num_experts,
                                                 " experts); use tensor_parallel 1"));
  }
  return absl::OkStatus();
}

}  // namespace kvtier
