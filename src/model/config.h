// ModelConfig: the architecture-independent description of a decoder-only checkpoint
// (Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3, Mixtral, Qwen3-MoE), parsed from HF
// config.json. Immutable value type; thread-safe to share.
#ifndef KVTIER_MODEL_CONFIG_H_
#define KVTIER_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier {

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3, kGemma2, kGemma3, kPhi3, kMixtral, kQwen3Moe };

// "LlamaForCausalLM", ... — the HF class name.
std::string_view ArchitectureName(Architecture arch);

// rope_scaling {"rope_type": "llama3", ...}. Only llama3 is supported; other types are
// rejected at parse time as Unimplemented (-> KVT_ERR_UNSUPPORTED).
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// The MLP's gate activation: SiLU, or GELU with the tanh approximation (HF
// "gelu_pytorch_tanh", Gemma's GeGLU).
enum class Activation { kSilu, kGeluTanh };

// rope_scaling {"type": "longrope" | "su", ...} (Phi-3 long variants): per-frequency
// divisors, short_factor for positions below original_max_position_embeddings and
// long_factor from there on, and cos/sin scaled by attention_factor. The choice is made per
// position, so a block's keys depend only on its tokens and positions (as HF's cached
// generation does; HF's uncached forward of a prompt longer than the original context
// rotates every position with long_factor).
struct LongRopeScaling {
  std::vector<double> short_factor;  // (head_dim / 2)
  std::vector<double> long_factor;   // (head_dim / 2)
  int64_t original_max_position_embeddings = 0;
  double attention_factor = 1.0;  // given, or sqrt(1 + ln(max / original) / ln(original))
};

// Gemma 3's two RoPE tables.
struct Gemma3Rope {
  std::optional<double> local_theta;  // the RoPE base of the sliding layers
  // rope_scaling {"rope_type": "linear"} (4B and larger): the full-attention layers'
  // frequencies divided by this factor; 1 without.
  double linear_factor = 1.0;
};

// Gemma's layer layout.
struct GemmaLayout {
  bool norm_plus_one = false;     // RMSNorm: x_normed * (1 + w)
  bool sandwich_norms = false;    // norm after attention and around the MLP
  bool scale_embeddings = false;  // embeddings times sqrt(hidden_size)
};

// Mixture of experts (Mixtral, Qwen3-MoE): a sparse layer's MLP is num_experts SwiGLU
// experts and a router (Linear hidden -> num_experts). Each token goes to the top_k experts
// by router probability (softmax over all experts in fp32; ties to the lower index), their
// outputs summed weighted by those probabilities, renormalized to sum 1 when
// norm_topk_prob (Mixtral always: its softmax over the chosen logits is the same).
struct MoeConfig {
  int64_t num_experts = 0;  // 0: a dense model
  int64_t top_k = 0;        // num_experts_per_tok
  int64_t expert_intermediate_size = 0;  // Mixtral: intermediate_size; Qwen3: moe_intermediate_size
  bool norm_topk_prob = true;
  // (num_layers): the layers whose MLP is the experts; the others (Qwen3-MoE's
  // mlp_only_layers, decoder_sparse_step) a dense MLP of intermediate_size.
  std::vector<bool> sparse_layers;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;           // num_hidden_layers
  int64_t num_heads = 0;            // num_attention_heads
  int64_t num_kv_heads = 0;         // num_key_value_heads (defaults to num_heads)
  int64_t head_dim = 0;             // head_dim, or hidden_size / num_heads
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<Llama3RopeScaling> rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;      // q/k/v projections carry a bias (Qwen2: always true)
  bool qk_norm = false;             // per-head RMSNorm on q and k (Qwen3)
  // Llama/Mistral/Qwen: parsed, not applied. Gemma/Phi-3: the window of the layers that
  // sliding_layers marks (a query at p reads keys in (p - window, p]).
  std::optional<int64_t> sliding_window;
  std::vector<bool> sliding_layers;  // (num_layers) or empty: no layer has a window
  // Gemma 2/3 and Phi-3 (model/config_families.cc).
  Activation activation = Activation::kSilu;
  GemmaLayout gemma;
  bool fused_projections = false;  // Phi-3: qkv_proj and gate_up_proj in the checkpoint
  std::optional<double> query_pre_attn_scalar;  // attention scale scalar^-0.5 (else head_dim)
  std::optional<double> attn_logit_softcap;     // scores = cap * tanh(scores / cap)
  std::optional<double> final_logit_softcap;    // logits = cap * tanh(logits / cap)
  Gemma3Rope gemma3_rope;
  std::optional<LongRopeScaling> long_rope;     // Phi-3 long variants
  MoeConfig moe;                                // Mixtral, Qwen3-MoE (model/config_moe.cc)
  std::string torch_dtype;          // "bfloat16", "float16", "float32" (informational)
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // eos_token_id may be an int or a list

  int64_t q_dim() const { return num_heads * head_dim; }
  // The window layer `layer` attends within, or nullopt for full attention.
  std::optional<int64_t> LayerWindow(int64_t layer) const;
  // The factor q.k is multiplied by: query_pre_attn_scalar^-0.5, else head_dim^-0.5.
  double AttentionScale() const;
  // The RoPE base of layer `layer` (Gemma 3's sliding layers use gemma3_rope.local_theta).
  double LayerRopeTheta(int64_t layer) const;
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  // True when layer `layer`'s MLP is moe's experts.
  bool IsMoeLayer(int64_t layer) const;
  // Parameter count of every tensor the forward reads (lm_head counted once if tied).
  int64_t NumParameters() const;
};

// Parses and validates config.json text. InvalidArgument for malformed JSON or missing /
// non-positive / inconsistent fields (names the field); Unimplemented for an unsupported
// architecture or rope_scaling type (names it).
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text);

// Serialises a config as HF-compatible config.json text (used by mkmodel).
std::string ModelConfigToJson(const ModelConfig& config);

}  // namespace kvtier

#endif  // KVTIER_MODEL_CONFIG_H_
