// ShardedWeights: the CPU backend's projections split over tensor-parallel ranks
// (docs/TENSOR_PARALLEL.md). Immutable once built; thread-safe to read.
//
// Rank r of N holds, per layer: the rows of q/k/v_proj that compute its heads (query heads
// and KV heads each split evenly, contiguous) and of gate/up_proj (column-parallel), and the
// input columns of o_proj and down_proj those rows feed (row-parallel). The row-parallel
// matrices are held as kShardedChunks column chunks over the whole matrix (rank r owns the
// kShardedChunks / N consecutive ones of its columns), so that their partial products are
// the same products at every degree and a fixed-order sum (sharded_forward.h) gives the
// same bits at TP = 1, 2, 4 and 8. Embeddings, norms, o_proj's bias and lm_head are
// replicated: they stay in CpuWeights.
#ifndef KVTIER_BACKEND_CPU_SHARDED_WEIGHTS_H_
#define KVTIER_BACKEND_CPU_SHARDED_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/cpu/cpu_matrix.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/tensor_parallel.h"
#include "model/config.h"

namespace kvtier {

// Column chunks of every row-parallel product, whatever the degree.
inline constexpr int32_t kShardedChunks = kMaxTensorParallel;

struct RankLayerWeights {
  CpuMatrix q_proj;                           // (q_dim / N, hidden): the rank's query heads
  CpuMatrix k_proj;                           // (kv_dim / N, hidden): its KV heads
  CpuMatrix v_proj;                           // (kv_dim / N, hidden)
  std::vector<float> q_bias, k_bias, v_bias;  // the matching slices; empty without attention_bias
  CpuMatrix gate_proj;                        // (intermediate / N, hidden)
  CpuMatrix up_proj;                          // (intermediate / N, hidden)
  std::vector<CpuMatrix> o_chunks;     // kShardedChunks / N of (hidden, q_dim / kShardedChunks)
  std::vector<CpuMatrix> down_chunks;  // kShardedChunks / N of (hidden, intermediate / kShardedChunks)
};

struct ShardedWeights {
  int32_t degree = 1;
  std::vector<std::vector<RankLayerWeights>> ranks;  // [rank][layer]

  int64_t Bytes() const;
};

// Moves the projections of *weights into `degree` ranks' shards (the layers' q/k/v/o,
// gate/up/down matrices and q/k/v biases are left empty). InvalidArgument naming the
// number when the model does not split (ValidateTensorParallelModel), or when q_dim or
// intermediate_size is not kShardedChunks chunks of whole blocks of the matrix's format
// (Q8_0: 32 values, Q4_K: 256); Unimplemented for mixture-of-experts models.
absl::StatusOr<ShardedWeights> ShardCpuWeights(const ModelConfig& config, int32_t degree, CpuWeights* weights);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_SHARDED_WEIGHTS_H_
