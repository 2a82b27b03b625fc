// PrefillWorld: a PagedWorld whose chunks are also described as the prefill attention sees
// them (PrefillChunk), and the host reference of causal GQA attention over its pool, shared
// by the prefill attention tests (kvtier's kernels and cuDNN's). Host only.
#ifndef KVTIER_TESTS_BACKEND_CUDA_PREFILL_WORLD_H_
#define KVTIER_TESTS_BACKEND_CUDA_PREFILL_WORLD_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cuda/kernels.h"
#include "backend/cuda/prefill_attention.h"
#include "paged_world.h"

namespace kvtier::cuda_test {

using cuda::AttentionScores;
using cuda::PrefillChunk;

// A PagedWorld whose chunks are also described as the prefill kernel's planner sees them.
struct PrefillWorld : PagedWorld {
  std::vector<PrefillChunk> prefill_chunks;

  // shapes: (num_tokens, start_position) per chunk.
  PrefillWorld(int heads, int kv_heads, int head_dim, int block_tokens,
               const std::vector<std::pair<int, int64_t>>& shapes, std::mt19937& rng)
      : PagedWorld(heads, kv_heads, head_dim, block_tokens, Shapes(shapes), rng) {
    int32_t token = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      prefill_chunks.push_back(PrefillChunk{static_cast<int32_t>(c), token,
                                            chunks[c].num_tokens, chunks[c].start_position});
      token += chunks[c].num_tokens;
    }
  }

  static std::vector<ChunkShape> Shapes(const std::vector<std::pair<int, int64_t>>& shapes) {
    std::vector<ChunkShape> out;
    for (const auto& [n, start] : shapes) out.push_back(ChunkShape{n, start});
    return out;
  }
};

// Causal GQA attention over the world's pool (16-bit values as f32): fp32 dot products,
// fp64 softmax and sums, scores as `scores` says (scale, then soft-cap; a window's keys
// only). One thread per query head.
inline std::vector<float> ReferenceAttention(const PrefillWorld& w, const std::vector<float>& pool,
                                             const std::vector<float>& q, int layer, AttentionScores scores = {}) {
  const int d = static_cast<int>(w.layout.head_dim), heads = w.num_heads;
  const int group = heads / static_cast<int>(w.layout.num_kv_heads);
  const int64_t bt = w.layout.block_tokens;
  const double scale = scores.scale > 0.0f ? scores.scale : 1.0 / std::sqrt(static_cast<double>(d));
  const double cap = scores.logit_softcap;
  std::vector<float> out(w.QElements());
  auto run_head = [&](int h) {
    std::vector<double> score;
    std::vector<double> acc(d);
    for (const PrefillChunk& c : w.prefill_chunks) {
      const std::vector<int32_t>& table = w.tables[c.chunk];
      for (int i = 0; i < c.num_tokens; ++i) {
        const int64_t t = c.token_begin + i, pos = c.start_position + i;
        const float* qr = q.data() + (t * heads + h) * d;
        score.assign(pos + 1, 0.0);
        double max_score = -INFINITY;
        const int64_t first = scores.window > 0 ? std::max<int64_t>(0, pos + 1 - scores.window) : 0;
        for (int64_t p = first; p <= pos; ++p) {
          const float* k = pool.data() + table[p / bt] * w.layout.ElementsPerBlock() +
                           w.layout.ElementOffset(layer, 0, h / group, p % bt);
          float dot = 0.0f;
          for (int e = 0; e < d; ++e) dot += qr[e] * k[e];
          score[p] = dot * scale;
          if (cap > 0) score[p] = cap * std::tanh(score[p] / cap);
          max_score = std::max(max_score, score[p]);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double sum = 0.0;
        for (int64_t p = first; p <= pos; ++p) {
          const double weight = std::exp(score[p] - max_score);
          sum += weight;
          const float* v = pool.data() + table[p / bt] * w.layout.ElementsPerBlock() +
                           w.layout.ElementOffset(layer, 1, h / group, p % bt);
          for (int e = 0; e < d; ++e) acc[e] += weight * v[e];
        }
        for (int e = 0; e < d; ++e) out[(t * heads + h) * d + e] = static_cast<float>(acc[e] / sum);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int h = 0; h < heads; ++h) threads.emplace_back(run_head, h);
  for (std::thread& th : threads) th.join();
  return out;
}

}  // namespace kvtier::cuda_test

#endif  // KVTIER_TESTS_BACKEND_CUDA_PREFILL_WORLD_H_
