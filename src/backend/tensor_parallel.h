// Tensor parallelism: which degrees and models a context may split over ranks
// (docs/TENSOR_PARALLEL.md). Stateless; thread-safe.
#ifndef KVTIER_BACKEND_TENSOR_PARALLEL_H_
#define KVTIER_BACKEND_TENSOR_PARALLEL_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "model/config.h"

namespace kvtier {

// The largest degree, and the number of K-chunks every row-parallel product is summed over
// in the sharded plan, whatever the degree (so that all degrees sum in one order).
inline constexpr int32_t kMaxTensorParallel = 8;

// InvalidArgument unless degree is 1, 2, 4 or 8 and devices is empty or names `degree`
// distinct non-negative ordinals.
absl::Status ValidateTensorParallelOptions(int32_t degree, std::span<const int32_t> devices);

// InvalidArgument naming the number that does not split: num_attention_heads,
// num_key_value_heads or intermediate_size not divisible by `degree`; Unimplemented for a
// mixture-of-experts model at degree > 1 (experts are not sharded).
absl::Status ValidateTensorParallelModel(const ModelConfig& config, int32_t degree);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_TENSOR_PARALLEL_H_
