// ModelConfig: the architecture-independent description of a Llama-family checkpoint,
// parsed from HF config.json. Immutable value type; thread-safe to share.
#ifndef KVTIER_MODEL_CONFIG_H_
#define KVTIER_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier {

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3 };

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
  std::optional<int64_t> sliding_window;  // parsed; only "none or >= context" is supported
  std::string torch_dtype;          // "bfloat16", "float16", "float32" (informational)
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // eos_token_id may be an int or a list

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
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
