// PagedWorld: the paged-KV setup the attention kernel tests share — chunks with shuffled
// (non-contiguous) block tables over one pool of 2 layers, with the flattened index arrays
// the kernels read and each step token's chunk and position. Host data only.
#ifndef KVTIER_TESTS_BACKEND_CUDA_PAGED_WORLD_H_
#define KVTIER_TESTS_BACKEND_CUDA_PAGED_WORLD_H_

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/kv_layout.h"

namespace kvtier::cuda_test {

using cuda::ChunkShape;

// A paged-KV world: chunks with shuffled block tables over one pool, both on the host
// (f32 reference) and on the device (bf16).
struct PagedWorld {
  KvLayout layout;
  int num_heads = 0;
  std::vector<ChunkShape> chunks;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> indptr, indices, token_chunk, token_pos;
  int64_t num_blocks = 0;
  int num_tokens = 0;

  PagedWorld(int heads, int kv_heads, int head_dim, int block_tokens,
             std::vector<ChunkShape> shapes, std::mt19937& rng)
      : num_heads(heads), chunks(std::move(shapes)) {
    layout.num_layers = 2;
    layout.num_kv_heads = kv_heads;
    layout.head_dim = head_dim;
    layout.block_tokens = block_tokens;
    layout.dtype = DType::kBF16;
    int64_t needed = 0;
    for (const ChunkShape& c : chunks) {
      needed += (c.start_position + c.num_tokens + block_tokens - 1) / block_tokens;
    }
    num_blocks = needed + 3;
    std::vector<int32_t> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    int64_t next = 0;
    indptr.push_back(0);
    for (size_t c = 0; c < chunks.size(); ++c) {
      const int64_t n =
          (chunks[c].start_position + chunks[c].num_tokens + block_tokens - 1) / block_tokens;
      tables.emplace_back(ids.begin() + next, ids.begin() + next + n);
      next += n;
      indices.insert(indices.end(), tables.back().begin(), tables.back().end());
      indptr.push_back(static_cast<int32_t>(indices.size()));
      for (int i = 0; i < chunks[c].num_tokens; ++i) {
        token_chunk.push_back(static_cast<int32_t>(c));
        token_pos.push_back(static_cast<int32_t>(chunks[c].start_position + i));
      }
      num_tokens += chunks[c].num_tokens;
    }
  }
  int64_t PoolElements() const { return num_blocks * layout.ElementsPerBlock(); }
  size_t QElements() const {
    return static_cast<size_t>(num_tokens) * num_heads * layout.head_dim;
  }
};

}  // namespace kvtier::cuda_test

#endif  // KVTIER_TESTS_BACKEND_CUDA_PAGED_WORLD_H_
