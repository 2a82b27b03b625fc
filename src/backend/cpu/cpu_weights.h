// CpuWeights: every tensor the decoder forward reads: norms, biases and the embedding table
// widened to fp32 once; the matrices as CpuMatrix, in fp32 or, when loaded to keep them, in
// the checkpoint's own format (fused projections are split at load and held in fp32).
// Immutable after LoadCpuWeights; thread-safe to read.
#ifndef KVTIER_BACKEND_CPU_CPU_WEIGHTS_H_
#define KVTIER_BACKEND_CPU_CPU_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/cpu/cpu_matrix.h"
#include "backend/cpu/cpu_moe.h"
#include "backend/storage_dtype.h"
#include "common/progress.h"
#include "model/config.h"

namespace kvtier {

class Checkpoint;

// Matrices are HF Linear layout (out_features, in_features), row-major. Optional tensors
// are empty when the architecture has none. Phi-3's fused qkv_proj and gate_up_proj are
// split into their parts at load. Gemma's norms scale by (1 + w): their vectors hold 1 + w,
// so every norm is applied alike.
struct CpuLayerWeights {
  std::vector<float> input_norm;               // (hidden)
  CpuMatrix q_proj;                   // (q_dim, hidden)
  CpuMatrix k_proj;                   // (kv_dim, hidden)
  CpuMatrix v_proj;                   // (kv_dim, hidden)
  std::vector<float> q_bias, k_bias, v_bias;   // (q_dim), (kv_dim), (kv_dim): attention_bias
  std::vector<float> q_norm, k_norm;           // (head_dim): qk_norm
  CpuMatrix o_proj;                   // (hidden, q_dim)
  std::vector<float> o_bias;  // (hidden): attention_bias on Llama/Qwen3, never on Qwen2
  std::vector<float> post_attention_norm;      // (hidden): Gemma's follows attention
  std::vector<float> pre_feedforward_norm;     // (hidden): gemma.sandwich_norms
  std::vector<float> post_feedforward_norm;    // (hidden): gemma.sandwich_norms
  CpuMatrix gate_proj;                // (intermediate, hidden)
  CpuMatrix up_proj;                  // (intermediate, hidden)
  CpuMatrix down_proj;                // (hidden, intermediate)
  CpuMoeWeights moe;  // a mixture-of-experts layer (IsMoeLayer): in place of gate/up/down_proj
};

struct CpuWeights {
  std::vector<float> embed_tokens;  // (vocab, hidden)
  std::vector<CpuLayerWeights> layers;
  std::vector<float> final_norm;    // (hidden)
  // (vocab, hidden); empty when tied to embed_tokens and held in fp32: the forward then
  // multiplies by embed_tokens.
  CpuMatrix lm_head;

  int64_t Bytes() const;
};

// InvalidArgument / NotFound naming the tensor when one is missing or has the wrong shape.
// progress (may be empty) hears the stage "weights" in checkpoint bytes converted; Cancelled
// when it asks to stop. keep_formats: the matrices (projections and lm_head) stay in the
// checkpoint's format where CpuMatrixKeeps it (16-bit floats, GGUF blocks); otherwise, and
// for every other format, they are widened to fp32.
absl::StatusOr<CpuWeights> LoadCpuWeights(const Checkpoint& checkpoint, const ProgressFn& progress = {},
                                          bool keep_formats = false);

// Rounds the linear projections (q/k/v/o, gate/up/down, the experts') to the values `dtype` holds:
// bf16/fp16 element by element; fp8 by QuantizeRowsFp8 (one scale per output channel)
// then code x scale. Embeddings, lm_head, norms and biases keep fp32, as on the GPU.
// The CPU backend still computes in fp32: this reproduces the GPU's weight values.
// keep_16bit (the fast kernels): bf16/fp16 matrices are held in 16 bits instead (CpuMatrix
// kBF16 / kF16: the same values, the same products, half the bytes to read).
// Matrices not held in fp32 are left as they are.
void RoundProjections(const ModelConfig& config, StorageDType dtype, bool keep_16bit, CpuWeights* weights);

// weight_dtype q8_0 / q4_k (`dtype` kQ8_0 or kQ4_K): every matrix held in fp32 becomes
// that GGUF block type, quantized row by row as model/block_quants.h does (llama.cpp's
// reference quantizer), so that the bytes equal those of a GGUF file of that type written
// from the same checkpoint (model/gguf_export.h), and the backend computes as it does on
// that file: the projections and lm_head as blocks (a tied lm_head from the quantized
// table), the embedding table's lookups from the blocks' values; a matrix whose rows are
// not whole blocks is held in F16, as the GGUF file stores it. Fused projections, which
// are held in fp32, get the blocks' values. keep_blocks false: every matrix gets the
// values in fp32 instead (the reference kernels).
void QuantizeCpuWeights(const ModelConfig& config, DType dtype, bool keep_blocks, CpuWeights* weights);

// Every matrix (the experts' too) computes its 16-bit products with `kernels` (dot16.h).
void UseDot16(const Dot16Kernels& kernels, CpuWeights* weights);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_CPU_WEIGHTS_H_
