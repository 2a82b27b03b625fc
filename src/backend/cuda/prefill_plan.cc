// Host-side planning of the tensor-core prefill attention: tile size per GQA group and the
// tile list of a step (see prefill_attention.h). Pure host code.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/prefill_attention.h"

namespace kvtier::cuda {

int32_t PrefillTileTokens(int32_t /*head_dim*/, int32_t group, PrefillKernel kernel) {
  const int32_t rows = kernel == PrefillKernel::kWgmma ? kPrefillWgmmaTileRows : kPrefillTileRows;
  if (group <= 0 || group > rows) return 0;
  return rows / group;
}

bool PrefillWgmmaSupported(bool bf16_compute, int32_t head_dim, int32_t num_heads, int32_t num_kv_heads) {
  if (!bf16_compute || head_dim != 128 || num_heads <= 0 || num_kv_heads <= 0) return false;
  if (num_heads % num_kv_heads != 0) return false;
  return num_heads / num_kv_heads <= kPrefillWgmmaTileRows;
}

void PlanPrefillTiles(std::span<const PrefillChunk> chunks, int32_t tile_tokens,
                      std::vector<PrefillTile>* tiles) {
  const size_t first = tiles->size();
  const int32_t step = std::max<int32_t>(1, tile_tokens);
  for (const PrefillChunk& c : chunks) {
    for (int32_t i = 0; i < c.num_tokens; i += step) {
      PrefillTile t;
      t.chunk = c.chunk;
      t.token_begin = c.token_begin + i;
      t.num_tokens = std::min(step, c.num_tokens - i);
      t.first_pos = static_cast<int32_t>(c.start_position + i);
      tiles->push_back(t);
    }
  }
  // Longest context (= work) first so that the short tiles fill the tail of the grid; ties
  // in step order so the plan is deterministic. std::sort: no temporary allocation.
  std::sort(tiles->begin() + static_cast<std::ptrdiff_t>(first), tiles->end(),
            [](const PrefillTile& a, const PrefillTile& b) {
              const int32_t ea = a.first_pos + a.num_tokens, eb = b.first_pos + b.num_tokens;
              if (ea != eb) return ea > eb;
              return a.token_begin < b.token_begin;
            });
}

}  // namespace kvtier::cuda
