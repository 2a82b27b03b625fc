// Host-side attention work planning (see attention_plan.h). Stateless.
#include "backend/cuda/attention_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvtier::cuda {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::Status PlanAttention(std::span<const ChunkShape> chunks, const AttentionPlanOptions& options,
                           AttentionPlan* plan) {
  if (options.num_kv_heads <= 0 || options.num_heads % options.num_kv_heads != 0 ||
      options.max_rows <= 0 || options.split_tokens <= 0) {
    return absl::InvalidArgumentError("PlanAttention: bad options");
  }
  const int32_t group = options.num_heads / options.num_kv_heads;
  const int32_t group_count = std::min(group, options.max_rows);
  const int32_t num_subgroups = static_cast<int32_t>(CeilDiv(group, group_count));
  const int32_t tile_tokens = std::max(1, options.max_rows / group_count);

  int64_t total_tokens = 0;
  for (const ChunkShape& c : chunks) total_tokens += c.num_tokens;

  // Choose the split length: partial slots are needed only by tiles with > 1 split.
  int64_t split = options.split_tokens;
  for (;;) {
    int64_t slots = 0, max_splits = 1;
    for (const ChunkShape& c : chunks) {
      for (int32_t t0 = 0; t0 < c.num_tokens; t0 += tile_tokens) {
        const int32_t n = std::min(tile_tokens, c.num_tokens - t0);
        const int64_t splits = CeilDiv(c.start_position + t0 + n, split);
        if (splits > 1) slots += splits * n;
        max_splits = std::max(max_splits, splits);
      }
    }
    if (slots <= options.partial_slots && max_splits <= INT16_MAX) break;
    if (split > (int64_t{1} << 31)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("PlanAttention: ", slots, " partial slots needed, ",
                       options.partial_slots, " available"));
    }
    split *= 2;
  }

  plan->items.clear();
  plan->num_splits.assign(total_tokens, 1);
  plan->partial_base.assign(total_tokens, 0);
  plan->max_rows = 0;
  plan->split_tokens = static_cast<int32_t>(std::min<int64_t>(split, INT32_MAX));
  plan->slots_used = 0;
  plan->any_split = false;

  int64_t token_base = 0;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const ChunkShape& c = chunks[ci];
    for (int32_t t0 = 0; t0 < c.num_tokens; t0 += tile_tokens) {
      const int32_t n = std::min(tile_tokens, c.num_tokens - t0);
      const int64_t context = c.start_position + t0 + n;  // KV positions the tile reads
      const int64_t splits = CeilDiv(context, split);
      if (splits > 1) {
        plan->any_split = true;
        for (int32_t i = 0; i < n; ++i) {
          plan->num_splits[token_base + t0 + i] = static_cast<int32_t>(splits);
          plan->partial_base[token_base + t0 + i] = static_cast<int32_t>(plan->slots_used);
          plan->slots_used += splits;
        }
      }
      for (int32_t sg = 0; sg < num_subgroups; ++sg) {
        const int32_t g0 = sg * group_count;
        const int32_t gn = std::min(group_count, group - g0);
        plan->max_rows = std::max(plan->max_rows, n * gn);
        for (int64_t s = 0; s < splits; ++s) {
          AttentionItem item;
          item.chunk = static_cast<int32_t>(ci);
          item.token_begin = static_cast<int32_t>(token_base + t0);
          item.kv_begin = static_cast<int32_t>(s * split);
          item.kv_end = static_cast<int32_t>(std::min(context, (s + 1) * split));
          item.num_tokens = static_cast<int16_t>(n);
          item.group_begin = static_cast<int16_t>(g0);
          item.group_count = static_cast<int16_t>(gn);
          item.split = static_cast<int16_t>(s);
          plan->items.push_back(item);
        }
      }
    }
    token_base += c.num_tokens;
  }
  return absl::OkStatus();
}

}  // namespace kvtier::cuda
