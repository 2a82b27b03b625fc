// KvLayout: the byte layout of one paged-KV block, identical in every tier so that moving a
// block between tiers is one contiguous copy. Plain value type.
//
// A block holds `block_tokens` consecutive positions of one sequence for ALL layers:
//   block bytes = [layer][k|v][kv_head][token][head_dim] elements of `dtype`,
// and for dtype kF8E4M3 (E4M3 codes) then the fp32 scales [layer][k|v][kv_head][token]:
// value = code x scale, scale = amax of that (token, head) row / 448.
//
// Why one scale per token and head (finer than per block and head): a block is filled a
// token at a time while decoding; a per-block scale would have to be fixed before the
// block's later tokens exist (clipping them) or rescale the earlier codes (a second
// rounding, and bytes that change after the block was copied to the host or disk tier).
// Per row, every token's bytes are final when written, outlier tokens cost no precision to
// the others, and the scales add 4 bytes per head_dim codes (3% at head_dim 128).
#ifndef KVTIER_BACKEND_KV_LAYOUT_H_
#define KVTIER_BACKEND_KV_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "model/tensor.h"

namespace kvtier {

struct KvLayout {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_tokens = 16;
  DType dtype = DType::kF32;

  int64_t ElementsPerBlock() const { return num_layers * 2 * num_kv_heads * block_tokens * head_dim; }
  bool has_scales() const { return dtype == DType::kF8E4M3; }
  int64_t ScalesPerBlock() const { return has_scales() ? num_layers * 2 * num_kv_heads * block_tokens : 0; }
  size_t BlockBytes() const {
    return static_cast<size_t>(ElementsPerBlock()) * DTypeSize(dtype) +
           static_cast<size_t>(ScalesPerBlock()) * sizeof(float);
  }
  size_t BytesPerToken() const { return BlockBytes() / static_cast<size_t>(block_tokens); }
  // Element offset, inside a block, of (layer, k=0|v=1, kv_head, token-in-block, dim 0).
  int64_t ElementOffset(int64_t layer, int64_t kv, int64_t kv_head, int64_t token) const {
    return (((layer * 2 + kv) * num_kv_heads + kv_head) * block_tokens + token) * head_dim;
  }
  // Byte offset, inside a block, of the fp32 scale of that row (has_scales() only).
  size_t ScaleByteOffset(int64_t layer, int64_t kv, int64_t kv_head, int64_t token) const {
    return static_cast<size_t>(ElementsPerBlock()) * DTypeSize(dtype) +
           static_cast<size_t>(((layer * 2 + kv) * num_kv_heads + kv_head) * block_tokens + token) * sizeof(float);
  }
};

}  // namespace kvtier

#endif  // KVTIER_BACKEND_KV_LAYOUT_H_
