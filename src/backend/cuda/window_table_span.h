// The part of a windowed layer group's block table the CUDA kernels can read, per chunk
// (docs/CUDA_BACKEND.md, "Layer groups"). A query at position p of a window W reads keys
// (p - W, p]; the attention kernels start a windowed query at a tile boundary at or below its
// first key and mask the positions before it:
//   - DecodeAttention: the 16-position tile holding the first key;
//   - PrefillAttention (mma.sync): the 64-position KV tile (kPrefillTileRows);
//   - PrefillAttentionWgmma: its 64- or 128-position KV tile (variants 0, 3, 4: 128);
//   - PagedAttention (generic): the first key itself.
// QkvPost writes only the chunk's own positions. So a chunk starting at `start` reads no
// table entry before WindowTableFirst: the block of its first query's first key, less the
// blocks the widest tile (wgmma's 128) reaches before it. StepPlanner writes a windowed
// group's entries from there on only. Pure functions; thread-safe.
#ifndef KVTIER_BACKEND_CUDA_WINDOW_TABLE_SPAN_H_
#define KVTIER_BACKEND_CUDA_WINDOW_TABLE_SPAN_H_

#include <algorithm>
#include <cstdint>

#include "backend/cuda/prefill_attention.h"

namespace kvtier::cuda {

// The widest KV tile an attention kernel aligns a window's start to (wgmma prefill's).
inline constexpr int64_t kWidestWindowTile = 128;
static_assert(kPrefillTileRows <= kWidestWindowTile, "the mma.sync prefill KV tile");

// Blocks before the block of a window's first key that a kernel may read: its tile starts
// up to kWidestWindowTile - 1 positions before the key, crossing at most that many
// positions' block boundaries.
constexpr int64_t WindowSlackBlocks(int64_t block_tokens) {
  return (kWidestWindowTile - 1 + block_tokens - 1) / block_tokens;
}

// The first logical block of a window-`window` table that a chunk starting at `start` may
// read (no later query of the chunk reads further back).
constexpr int64_t WindowTableFirst(int64_t window, int64_t start, int64_t block_tokens) {
  const int64_t first_key = std::max<int64_t>(0, start - window + 1);
  return std::max<int64_t>(0, first_key / block_tokens - WindowSlackBlocks(block_tokens));
}

// The most entries [WindowTableFirst, end of the chunk's blocks) of a chunk of num_tokens
// (>= 1) tokens: keys from the first query's first key to the last query span W - 1 +
// num_tokens positions, over at most floor((W + num_tokens - 3) / B) + 2 blocks (an unaligned
// start adds one), plus the slack.
constexpr int64_t WindowTableEntries(int64_t window, int64_t num_tokens, int64_t block_tokens) {
  return (window + num_tokens + block_tokens - 3) / block_tokens + 1 + WindowSlackBlocks(block_tokens);
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_WINDOW_TABLE_SPAN_H_
