// ExpectedTensors (checkpoint.h): the HF tensor names and shapes a decoder forward reads,
// derived from the config alone. Pure function; thread-safe.
#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"

namespace kvtier {

namespace {

// A sparse layer's router and experts, as the Hub checkpoints name them: Mixtral's
// block_sparse_moe with w1 (gate), w3 (up), w2 (down); Qwen3-MoE's mlp with gate/up/down_proj.
void AddExperts(const ModelConfig& c, const std::string& layer, std::vector<ExpectedTensor>* out) {
  const int64_t h = c.hidden_size;
  const int64_t inter = c.moe.expert_intermediate_size;
  const ExpertTensorNames names = ExpertNames(c.architecture);
  out->push_back({layer + names.router, {c.moe.num_experts, h}});
  for (int64_t e = 0; e < c.moe.num_experts; ++e) {
    const std::string p = absl::StrCat(layer, names.experts, e, ".");
    out->push_back({p + names.gate, {inter, h}});
    out->push_back({p + names.up, {inter, h}});
    out->push_back({p + names.down, {h, inter}});
  }
}

}  // namespace

ExpertTensorNames ExpertNames(Architecture arch) {
  if (arch == Architecture::kMixtral) {
    return {"block_sparse_moe.gate.weight", "block_sparse_moe.experts.", "w1.weight", "w3.weight", "w2.weight"};
  }
  return {"mlp.gate.weight", "mlp.experts.", "gate_proj.weight", "up_proj.weight", "down_proj.weight"};
}

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    out.push_back({p + "input_layernorm.weight", {h}});
    if (c.fused_projections) {  // Phi-3: rows q, then k, then v
      out.push_back({p + "self_attn.qkv_proj.weight", {c.q_dim() + 2 * c.kv_dim(), h}});
    } else {
      out.push_back({p + "self_attn.q_proj.weight", {c.q_dim(), h}});
      out.push_back({p + "self_attn.k_proj.weight", {c.kv_dim(), h}});
      out.push_back({p + "self_attn.v_proj.weight", {c.kv_dim(), h}});
    }
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
    if (c.gemma.sandwich_norms) {
      out.push_back({p + "pre_feedforward_layernorm.weight", {h}});
      out.push_back({p + "post_feedforward_layernorm.weight", {h}});
    }
    if (c.IsMoeLayer(i)) {
      AddExperts(c, p, &out);
      continue;
    }
    if (c.fused_projections) {  // Phi-3: rows gate, then up
      out.push_back({p + "mlp.gate_up_proj.weight", {2 * c.intermediate_size, h}});
    } else {
      out.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, h}});
      out.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, h}});
    }
    out.push_back({p + "mlp.down_proj.weight", {h, c.intermediate_size}});
  }
  out.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
  return out;
}

}  // namespace kvtier
