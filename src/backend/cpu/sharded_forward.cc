// ShardedForward: the ranks of the CPU tensor-parallel plan, in turn (sharded_forward.h).
#include "backend/cpu/sharded_forward.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "backend/cpu/cpu_matrix.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kv_block_view.h"
#include "common/thread_pool.h"

namespace kvtier {

void SumPairwiseTree(std::span<float* const> buffers, int64_t count, ThreadPool* pool) {
  const int64_t n = static_cast<int64_t>(buffers.size());
  if (n < 2) return;
  const auto sum = [&](int64_t begin, int64_t end) {
    for (int64_t stride = 1; stride < n; stride *= 2) {
      for (int64_t j = 0; j + stride < n; j += 2 * stride) {
        float* into = buffers[j];
        const float* add = buffers[j + stride];
        for (int64_t i = begin; i < end; ++i) into[i] += add[i];
      }
    }
  };
  if (pool == nullptr) {
    sum(0, count);
  } else {
    pool->ParallelFor(count, sum);
  }
}

ShardedForward::ShardedForward(const ModelConfig& config, ShardedWeights weights, int64_t reserve_tokens)
    : config_(config), weights_(std::move(weights)) {
  EnsureScratch(reserve_tokens);
}

void ShardedForward::EnsureScratch(int64_t num_tokens) {
  if (num_tokens <= scratch_.capacity_tokens) return;
  const int64_t n = weights_.degree;
  const auto size = [num_tokens](int64_t width) { return static_cast<size_t>(num_tokens * width); };
  scratch_.q.resize(size(config_.q_dim() / n));
  scratch_.attention.resize(size(config_.q_dim() / n));
  scratch_.k.resize(size(config_.kv_dim() / n));
  scratch_.v.resize(size(config_.kv_dim() / n));
  scratch_.gate.resize(size(config_.intermediate_size / n));
  scratch_.up.resize(size(config_.intermediate_size / n));
  scratch_.chunk_input.resize(size(std::max(config_.q_dim(), config_.intermediate_size) / kShardedChunks));
  scratch_.partials.resize(kShardedChunks);
  for (std::vector<float>& partial : scratch_.partials) partial.resize(size(config_.hidden_size));
  scratch_.capacity_tokens = num_tokens;
}

int64_t ShardedForward::Bytes() const {
  int64_t floats = 0;
  for (const std::vector<float>* v : {&scratch_.q, &scratch_.k, &scratch_.v, &scratch_.attention, &scratch_.gate,
                                      &scratch_.up, &scratch_.chunk_input}) {
    floats += static_cast<int64_t>(v->size());
  }
  for (const std::vector<float>& partial : scratch_.partials) floats += static_cast<int64_t>(partial.size());
  return weights_.Bytes() + floats * static_cast<int64_t>(sizeof(float));
}

void ShardedForward::RankChunkProducts(int32_t rank, std::span<const CpuMatrix> chunks, const float* input,
                                       const ShardedLayerIo& io) {
  const int64_t tokens = io.num_tokens;
  const int64_t count = static_cast<int64_t>(chunks.size());
  const int64_t width = chunks.front().cols;
  const int64_t input_width = count * width;
  std::vector<float*> mine;
  for (int64_t c = 0; c < count; ++c) {
    float* chunk_input = scratch_.chunk_input.data();
    for (int64_t t = 0; t < tokens; ++t) {
      std::memcpy(chunk_input + t * width, input + t * input_width + c * width, width * sizeof(float));
    }
    float* partial = scratch_.partials[rank * count + c].data();
    MatMul(chunks[c], chunk_input, nullptr, tokens, partial, io.pool, io.activations);
    mine.push_back(partial);
  }
  SumPairwiseTree(mine, tokens * config_.hidden_size, io.pool);
}

void ShardedForward::AllReduce(const ShardedLayerIo& io) {
  const int64_t per_rank = kShardedChunks / weights_.degree;
  std::vector<float*> rank_partials;
  for (int32_t rank = 0; rank < weights_.degree; ++rank) rank_partials.push_back(scratch_.partials[rank * per_rank].data());
  const int64_t count = io.num_tokens * config_.hidden_size;
  SumPairwiseTree(rank_partials, count, io.pool);
  std::memcpy(io.out, rank_partials.front(), count * sizeof(float));
}

void ShardedForward::Attention(int64_t layer, const CpuLayerWeights& shared, const ShardedLayerIo& io,
                               const ShardedAttentionIo& attention_io) {
  EnsureScratch(io.num_tokens);
  const int64_t tokens = io.num_tokens;
  const int64_t heads = config_.num_heads / weights_.degree;
  const int64_t kv_heads = config_.num_kv_heads / weights_.degree;
  const int64_t q_width = heads * config_.head_dim, kv_width = kv_heads * config_.head_dim;
  const double eps = config_.rms_norm_eps;
  auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
  AttentionOptions options;
  options.scale = static_cast<float>(config_.AttentionScale());
  if (config_.attn_logit_softcap) options.logit_softcap = static_cast<float>(*config_.attn_logit_softcap);
  options.window = config_.LayerWindow(layer);
  float *q = scratch_.q.data(), *k = scratch_.k.data(), *v = scratch_.v.data();
  for (int32_t rank = 0; rank < weights_.degree; ++rank) {
    const RankLayerWeights& w = weights_.ranks[rank][layer];
    MatMul(w.q_proj, io.normed, bias(w.q_bias), tokens, q, io.pool, io.activations);
    MatMul(w.k_proj, io.normed, bias(w.k_bias), tokens, k, io.pool, io.activations);
    MatMul(w.v_proj, io.normed, bias(w.v_bias), tokens, v, io.pool, io.activations);
    if (config_.qk_norm) {
      RmsNorm(q, shared.q_norm.data(), tokens * heads, config_.head_dim, eps, q, io.pool);
      RmsNorm(k, shared.k_norm.data(), tokens * kv_heads, config_.head_dim, eps, k, io.pool);
    }
    attention_io.rope(q, tokens, heads);
    attention_io.rope(k, tokens, kv_heads);
    int64_t row = 0;
    for (const SequenceChunk& chunk : io.batch->chunks) {
      const int64_t len = static_cast<int64_t>(chunk.tokens.size());
      const KvBlockView kv{attention_io.layout, attention_io.kv_pool, chunk.block_table, chunk.host_kv,
                          KvHeadRange{rank * kv_heads, kv_heads}};
      WriteKv(kv, layer, chunk.start_position, len, k + row * kv_width, v + row * kv_width);
      PagedAttention(kv, layer, chunk.start_position, len, heads, q + row * q_width,
                     scratch_.attention.data() + row * q_width, io.pool, options);
      row += len;
    }
    RankChunkProducts(rank, w.o_chunks, scratch_.attention.data(), io);
  }
  AllReduce(io);
  if (!shared.o_bias.empty()) {  // replicated: added once, after the sum
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t n = 0; n < config_.hidden_size; ++n) io.out[t * config_.hidden_size + n] += shared.o_bias[n];
    }
  }
}

void ShardedForward::Mlp(int64_t layer, const ShardedLayerIo& io) {
  EnsureScratch(io.num_tokens);
  const int64_t tokens = io.num_tokens;
  const int64_t count = tokens * (config_.intermediate_size / weights_.degree);
  float *gate = scratch_.gate.data(), *up = scratch_.up.data();
  for (int32_t rank = 0; rank < weights_.degree; ++rank) {
    const RankLayerWeights& w = weights_.ranks[rank][layer];
    MatMul(w.gate_proj, io.normed, nullptr, tokens, gate, io.pool, io.activations);
    MatMul(w.up_proj, io.normed, nullptr, tokens, up, io.pool, io.activations);
    if (config_.activation == Activation::kGeluTanh) {
      GeluTanhMul(gate, up, count, gate);
    } else {
      SiluMul(gate, up, count, gate);
    }
    RankChunkProducts(rank, w.down_chunks, gate, io);
  }
  AllReduce(io);
}

}  // namespace kvtier
