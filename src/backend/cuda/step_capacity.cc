// StepCapacity (see step_capacity.h).
#include "backend/cuda/step_capacity.h"

#include <algorithm>

#include "backend/cuda/kernels.h"

namespace kvtier::cuda {

StepCapacity StepCapacity::For(const ModelConfig& config, const BackendOptions& options) {
  StepCapacity c;
  c.max_tokens = std::max<int64_t>(1, options.max_tokens_per_step);
  c.max_chunks = std::clamp<int64_t>(options.max_sequences, 1, c.max_tokens);
  c.partial_slots = std::max<int64_t>(c.max_tokens, 16 * c.max_chunks);
  c.max_context = std::clamp<int64_t>(config.max_position_embeddings, 4096, int64_t{1} << 18);
  c.max_table_entries = c.max_chunks * ((c.max_context + options.block_tokens - 1) / options.block_tokens);
  // A streamed long sequence's table holds its whole context (host entries included).
  c.max_table_entries +=
      (std::max<int64_t>(0, options.cuda.host_kv_stream_tokens) + options.block_tokens - 1) / options.block_tokens;
  c.plan_options.num_heads = static_cast<int32_t>(config.num_heads);
  c.plan_options.num_kv_heads = static_cast<int32_t>(config.num_kv_heads);
  c.plan_options.max_rows = AttentionMaxRows(static_cast<int>(config.head_dim));
  c.plan_options.partial_slots = c.partial_slots;
  const int64_t group = config.num_heads / std::max<int64_t>(1, config.num_kv_heads);
  const int64_t subgroups = (group + c.plan_options.max_rows - 1) / c.plan_options.max_rows;
  c.max_items = subgroups * (c.max_tokens + c.partial_slots);
  return c;
}

}  // namespace kvtier::cuda
