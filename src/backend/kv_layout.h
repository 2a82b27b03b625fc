// KvLayout: the byte layout of one paged-KV block, identical in every tier so that moving a
// block between tiers is one contiguous copy. Plain value type.
//
// A block holds `block_tokens` consecutive positions of one sequence for ALL layers:
//   block bytes = [layer][k|v][kv_head][token][head_dim] elements of `dtype`.
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
  size_t BlockBytes() const { return static_cast<size_t>(ElementsPerBlock()) * DTypeSize(dtype); }
  size_t BytesPerToken() const { return BlockBytes() / static_cast<size_t>(block_tokens); }
  // Element offset, inside a block, of (layer, k=0|v=1, kv_head, token-in-block, dim 0).
  int64_t ElementOffset(int64_t layer, int64_t kv, int64_t kv_head, int64_t token) const {
    return (((layer * 2 + kv) * num_kv_heads + kv_head) * block_tokens + token) * head_dim;
  }
};

}  // namespace kvtier

#endif  // KVTIER_BACKEND_KV_LAYOUT_H_
