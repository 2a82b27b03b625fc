// ShardedForward: the CPU backend's tensor-parallel plan (docs/TENSOR_PARALLEL.md): N ranks
// in one process, each computing from its shard only (sharded_weights.h), with an
// all-reduce after o_proj and after down_proj. Thread-compatible: one thread drives it; the
// ranks run one after another, each splitting its kernels over the backend's ThreadPool.
//
// Why the sums have one order at every degree: a row-parallel product splits the sum over
// its input columns between the ranks, so a plain split would round differently at each
// degree. Here every row-parallel product is kShardedChunks chunk products (the same
// products at every degree), summed in one pairwise tree,
//   ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)):
// rank r of N sums its 8/N chunks as the subtree they form, and the all-reduce sums the
// ranks' partials as the tree's top levels. TP = 1, 2, 4 and 8 then give identical bits.
// The column-parallel products (q/k/v, gate/up) are per output row and need nothing:
// MatMul's outputs depend only on their own weight row (cpu_matrix.h).
#ifndef KVTIER_BACKEND_CPU_SHARDED_FORWARD_H_
#define KVTIER_BACKEND_CPU_SHARDED_FORWARD_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/sharded_weights.h"
#include "backend/kv_layout.h"
#include "model/config.h"

namespace kvtier {

class ThreadPool;

// buffers[0][i] = the pairwise tree sum of buffers[j][i] over j, for i < count: level s
// (s = 1, 2, 4, ...) adds buffers[j + s] into buffers[j] for j a multiple of 2s.
// buffers.size() is a power of two; the other buffers are overwritten. pool may be null.
void SumPairwiseTree(std::span<float* const> buffers, int64_t count, ThreadPool* pool);

// What one layer's sharded block reads and writes, replicated across ranks.
struct ShardedLayerIo {
  const ForwardBatch* batch = nullptr;
  int64_t num_tokens = 0;
  const float* normed = nullptr;  // (tokens, hidden): the block's input, every rank's
  float* out = nullptr;           // (tokens, hidden): the all-reduced output; may alias normed
  ThreadPool* pool = nullptr;
  std::vector<uint8_t>* activations = nullptr;  // MatMul's quantized rows
};

// Where attention finds the KV pool and how it rotates (the backend's RoPE tables).
struct ShardedAttentionIo {
  const KvLayout* layout = nullptr;
  void* kv_pool = nullptr;
  // RoPE of this layer on x (rows, heads, head_dim) at the batch's positions.
  std::function<void(float* x, int64_t rows, int64_t heads)> rope;
};

class ShardedForward {
 public:
  ShardedForward(const ModelConfig& config, ShardedWeights weights, int64_t reserve_tokens);

  int32_t degree() const { return weights_.degree; }
  // The attention block of `layer` (after its input norm): each rank projects its heads,
  // writes and reads only its KV heads of every block, and multiplies its o_proj chunks;
  // the all-reduce sums them into io.out (+ o_proj's bias, replicated in `shared`).
  void Attention(int64_t layer, const CpuLayerWeights& shared, const ShardedLayerIo& io,
                 const ShardedAttentionIo& attention_io);
  // The dense MLP of `layer`: each rank its gate/up rows and down_proj chunks; all-reduced.
  void Mlp(int64_t layer, const ShardedLayerIo& io);
  int64_t Bytes() const;

 private:
  // Per-rank activations; ranks run in turn, so one set serves them all.
  struct Scratch {
    int64_t capacity_tokens = 0;
    std::vector<float> q, k, v, attention;  // (tokens, local q_dim / kv_dim / kv_dim / q_dim)
    std::vector<float> gate, up;            // (tokens, local intermediate)
    std::vector<float> chunk_input;         // (tokens, widest chunk): one chunk's input columns
    std::vector<std::vector<float>> partials;  // kShardedChunks of (tokens, hidden)
  };

  void EnsureScratch(int64_t num_tokens);
  // The rank's chunk products of `chunks` over input (tokens, chunks * width), each into
  // its partial, then the rank's subtree: the rank's partial is its first chunk's buffer.
  void RankChunkProducts(int32_t rank, std::span<const CpuMatrix> chunks, const float* input,
                         const ShardedLayerIo& io);
  // The all-reduce: the ranks' partials summed in tree order into io.out.
  void AllReduce(const ShardedLayerIo& io);

  const ModelConfig config_;
  const ShardedWeights weights_;
  Scratch scratch_;
};

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_SHARDED_FORWARD_H_
