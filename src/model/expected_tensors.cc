// ExpectedTensors (checkpoint.h): the HF tensor names and shapes a Llama-family forward
// reads, derived from the config alone. Pure function; thread-safe.
#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"

namespace kvtier {

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    out.push_back({p + "input_layernorm.weight", {h}});
    out.push_back({p + "self_attn.q_proj.weight", {c.q_dim(), h}});
    out.push_back({p + "self_attn.k_proj.weight", {c.kv_dim(), h}});
    out.push_back({p + "self_attn.v_proj.weight", {c.kv_dim(), h}});
    if (c.attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {c.q_dim()}});
      out.push_back({p + "self_attn.k_proj.bias", {c.kv_dim()}});
      out.push_back({p + "self_attn.v_proj.bias", {c.kv_dim()}});
    }
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
    out.push_back({p + "self_attn.o_proj.weight", {h, c.q_dim()}});
    // Llama/Qwen3 attention_bias also puts a bias on o_proj; Qwen2's bias is q/k/v only.
    if (c.attention_bias && c.architecture != Architecture::kQwen2) {
      out.push_back({p + "self_attn.o_proj.bias", {h}});
    }
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    out.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, h}});
    out.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, h}});
    out.push_back({p + "mlp.down_proj.weight", {h, c.intermediate_size}});
  }
  out.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
  return out;
}

}  // namespace kvtier
