// StepCapacity: the most one sub-step of the CUDA backend holds (tokens, chunks, attention
// work, block-table entries), fixed from the options when the backend is created. The
// workspace and the step metadata are sized from it, and a batch past it is split
// (split_batch.h). Plain value.
#ifndef KVTIER_BACKEND_CUDA_STEP_CAPACITY_H_
#define KVTIER_BACKEND_CUDA_STEP_CAPACITY_H_

#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/attention_plan.h"
#include "model/config.h"

namespace kvtier::cuda {

struct StepCapacity {
  int64_t max_tokens = 0;  // tokens per sub-step
  int64_t max_chunks = 0;  // chunks (and logit rows) per sub-step
  int64_t partial_slots = 0;
  int64_t max_table_entries = 0;
  int64_t max_items = 0;  // generic attention work items
  int64_t max_context = 0;  // KV positions one sequence attends to, at most (device tier)
  AttentionPlanOptions plan_options;

  // options.block_tokens must be positive.
  static StepCapacity For(const ModelConfig& config, const BackendOptions& options);
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_STEP_CAPACITY_H_
