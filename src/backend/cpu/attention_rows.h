// AVX-512 pieces of PagedAttention (cpu_ops.h) for fp32 KV: a query's scores against many
// keys, and the probability-weighted sum of many value rows. Each gives the bits of the
// scalar code it replaces: a score is cpu_ops.cc's Dot (eight lanes in column order,
// separate multiplies and adds, the fold_lanes.h fold) times the scale; the sum adds
// value row after value row, out[d] += p * v[d], as Axpy does. The speed comes from
// 16-lane registers (two keys' eight lanes in each, or one key's for two query heads of a
// GQA group, folded in registers) and from keeping the output row in registers across all
// the value rows.
// Pure functions; thread-safe.
#ifndef KVTIER_BACKEND_CPU_ATTENTION_ROWS_H_
#define KVTIER_BACKEND_CPU_ATTENTION_ROWS_H_

#include <cstdint>

namespace kvtier {

// True where the processor runs these functions and head_dim is one they take (64 or 128).
bool HasAttentionRows(int64_t head_dim);

// scores[j] = Dot(q, keys[j], head_dim) * scale for j < n.
void AttentionScores(const float* q, const float* const* keys, int64_t n, int64_t head_dim, float scale,
                     float* scores);

// Two queries against the same keys (two heads of one GQA group): each the bits
// AttentionScores gives it, with every key row loaded once for both.
void AttentionScoresPair(const float* q0, const float* q1, const float* const* keys, int64_t n, int64_t head_dim,
                         float scale, float* scores0, float* scores1);

// out[d] = sum over j < n, in order, of (probs[j] * inv_sum) * values[j][d], from zero.
void AttentionWeightedSum(const float* const* values, const float* probs, float inv_sum, int64_t n,
                          int64_t head_dim, float* out);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_ATTENTION_ROWS_H_
