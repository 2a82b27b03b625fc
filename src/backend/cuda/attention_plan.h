// AttentionPlan: how one step's attention is cut into CTA work items (query tiles x head
// groups x split-K ranges) and where split partials go. Pure host code, so the policy is
// testable without a GPU. Plain value type; not thread-safe to share while planning.
#ifndef KVTIER_BACKEND_CUDA_ATTENTION_PLAN_H_
#define KVTIER_BACKEND_CUDA_ATTENTION_PLAN_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "backend/cuda/kernels.h"

namespace kvtier::cuda {

struct AttentionPlanOptions {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t max_rows = 16;        // query rows per CTA (AttentionMaxRows(head_dim))
  int32_t split_tokens = 256;   // KV positions per split before doubling
  int64_t partial_slots = 0;    // capacity of the split partial buffers, in token-splits
};

struct ChunkShape {
  int32_t num_tokens = 0;
  int64_t start_position = 0;
};

struct AttentionPlan {
  std::vector<AttentionItem> items;
  std::vector<int32_t> num_splits;    // (step tokens)
  std::vector<int32_t> partial_base;  // (step tokens)
  int32_t max_rows = 0;
  int32_t split_tokens = 0;  // the split length chosen
  int64_t slots_used = 0;
  bool any_split = false;
};

// Fills *plan (its vectors are reused). Tokens are numbered chunk after chunk. A tile's
// tokens all get the tile's number of splits (a token may own an empty split, which the
// merge ignores). The split length doubles until the partials fit partial_slots.
absl::Status PlanAttention(std::span<const ChunkShape> chunks, const AttentionPlanOptions& options,
                           AttentionPlan* plan);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_ATTENTION_PLAN_H_
