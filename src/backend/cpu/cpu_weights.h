// CpuWeights: every tensor the Llama-family forward reads, widened to fp32 once. Immutable
// after LoadCpuWeights; thread-safe to read.
#ifndef KVTIER_BACKEND_CPU_CPU_WEIGHTS_H_
#define KVTIER_BACKEND_CPU_CPU_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/storage_dtype.h"
#include "common/progress.h"
#include "model/config.h"

namespace kvtier {

class Checkpoint;

// Matrices are HF Linear layout (out_features, in_features), row-major. Optional tensors
// are empty when the architecture has none.
struct CpuLayerWeights {
  std::vector<float> input_norm;               // (hidden)
  std::vector<float> q_proj;                   // (q_dim, hidden)
  std::vector<float> k_proj;                   // (kv_dim, hidden)
  std::vector<float> v_proj;                   // (kv_dim, hidden)
  std::vector<float> q_bias, k_bias, v_bias;   // (q_dim), (kv_dim), (kv_dim): attention_bias
  std::vector<float> q_norm, k_norm;           // (head_dim): qk_norm
  std::vector<float> o_proj;                   // (hidden, q_dim)
  std::vector<float> o_bias;  // (hidden): attention_bias on Llama/Qwen3, never on Qwen2
  std::vector<float> post_attention_norm;      // (hidden)
  std::vector<float> gate_proj;                // (intermediate, hidden)
  std::vector<float> up_proj;                  // (intermediate, hidden)
  std::vector<float> down_proj;                // (hidden, intermediate)
};

struct CpuWeights {
  std::vector<float> embed_tokens;  // (vocab, hidden)
  std::vector<CpuLayerWeights> layers;
  std::vector<float> final_norm;    // (hidden)
  std::vector<float> lm_head;       // (vocab, hidden); empty when tied to embed_tokens

  const float* LmHead() const { return lm_head.empty() ? embed_tokens.data() : lm_head.data(); }
  int64_t Bytes() const;
};

// InvalidArgument / NotFound naming the tensor when one is missing or has the wrong shape.
// progress (may be empty) hears the stage "weights" in checkpoint bytes converted; Cancelled
// when it asks to stop.
absl::StatusOr<CpuWeights> LoadCpuWeights(const Checkpoint& checkpoint, const ProgressFn& progress = {});

// Rounds the linear projections (q/k/v/o, gate/up/down) to the values `dtype` holds:
// bf16/fp16 element by element; fp8 by QuantizeRowsFp8 (one scale per output channel)
// then code x scale. Embeddings, lm_head, norms and biases keep fp32, as on the GPU.
// The CPU backend still computes in fp32: this reproduces the GPU's weight values.
void RoundProjections(const ModelConfig& config, StorageDType dtype, CpuWeights* weights);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_CPU_WEIGHTS_H_
