// Loading of the fp32 weight copy (cpu_weights.h). Thread-compatible.
#include "backend/cpu/cpu_weights.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/progress.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"
#include "model/fp8_weights.h"
#include "common/fp8_e4m3.h"

namespace kvtier {
namespace {

absl::Status Load(const Checkpoint& checkpoint, ProgressStage* stage, const std::string& name,
                  const std::vector<int64_t>& shape, std::vector<float>* out) {
  ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
  if (tensor.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has shape [",
                                                   absl::StrJoin(tensor.shape, ", "),
                                                   "], expected [", absl::StrJoin(shape, ", "),
                                                   "]"));
  }
  RETURN_IF_ERROR(checkpoint.TensorAsFloat32(name, out));  // fp8: codes times scales
  return stage->Add(static_cast<int64_t>(tensor.nbytes()));
}

// Rounds one [rows, cols] matrix in place (RoundProjections).
void RoundMatrix(StorageDType dtype, int64_t rows, std::vector<float>* w) {
  if (w->empty() || dtype == StorageDType::kAuto) return;
  if (dtype == StorageDType::kFp8) {
    const int64_t cols = static_cast<int64_t>(w->size()) / rows;
    std::vector<uint8_t> codes(w->size());
    std::vector<float> scales(static_cast<size_t>(rows));
    QuantizeRowsFp8(w->data(), rows, cols, codes.data(), scales.data());
    for (size_t i = 0; i < w->size(); ++i) (*w)[i] = Fp8E4M3ToFloat(codes[i]) * scales[i / cols];
    return;
  }
  for (float& v : *w) v = dtype == StorageDType::kBf16 ? Bf16ToFloat(FloatToBf16(v)) : Fp16ToFloat(FloatToFp16(v));
}

int64_t VectorBytes(const std::vector<float>& v) {
  return static_cast<int64_t>(v.size() * sizeof(float));
}

}  // namespace

int64_t CpuWeights::Bytes() const {
  int64_t bytes = VectorBytes(embed_tokens) + VectorBytes(final_norm) + VectorBytes(lm_head);
  for (const CpuLayerWeights& l : layers) {
    for (const std::vector<float>* v :
         {&l.input_norm, &l.q_proj, &l.k_proj, &l.v_proj, &l.q_bias, &l.k_bias, &l.v_bias,
          &l.q_norm, &l.k_norm, &l.o_proj, &l.o_bias, &l.post_attention_norm, &l.gate_proj,
          &l.up_proj, &l.down_proj}) {
      bytes += VectorBytes(*v);
    }
  }
  return bytes;
}

absl::StatusOr<CpuWeights> LoadCpuWeights(const Checkpoint& checkpoint, const ProgressFn& progress) {
  const ModelConfig& c = checkpoint.config();
  const int64_t hidden = c.hidden_size;
  CpuWeights w;
  ProgressStage stage(progress, "weights", checkpoint.TotalTensorBytes());
  RETURN_IF_ERROR(stage.Begin());
  RETURN_IF_ERROR(Load(checkpoint, &stage, "model.embed_tokens.weight", {c.vocab_size, hidden},
                       &w.embed_tokens));
  w.layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    CpuLayerWeights& l = w.layers[i];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    RETURN_IF_ERROR(Load(checkpoint, &stage, p + "input_layernorm.weight", {hidden}, &l.input_norm));
    RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.q_proj.weight", {c.q_dim(), hidden},
                         &l.q_proj));
    RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.k_proj.weight", {c.kv_dim(), hidden},
                         &l.k_proj));
    RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.v_proj.weight", {c.kv_dim(), hidden},
                         &l.v_proj));
    if (c.attention_bias) {
      RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.q_proj.bias", {c.q_dim()}, &l.q_bias));
      RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.k_proj.bias", {c.kv_dim()}, &l.k_bias));
      RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.v_proj.bias", {c.kv_dim()}, &l.v_bias));
    }
    if (c.qk_norm) {
      RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.q_norm.weight", {c.head_dim}, &l.q_norm));
      RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.k_norm.weight", {c.head_dim}, &l.k_norm));
    }
    RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.o_proj.weight", {hidden, c.q_dim()},
                         &l.o_proj));
    if (c.attention_bias && c.architecture != Architecture::kQwen2) {
      RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.o_proj.bias", {hidden}, &l.o_bias));
    }
    RETURN_IF_ERROR(Load(checkpoint, &stage, p + "post_attention_layernorm.weight", {hidden},
                         &l.post_attention_norm));
    RETURN_IF_ERROR(Load(checkpoint, &stage, p + "mlp.gate_proj.weight", {c.intermediate_size, hidden},
                         &l.gate_proj));
    RETURN_IF_ERROR(Load(checkpoint, &stage, p + "mlp.up_proj.weight", {c.intermediate_size, hidden},
                         &l.up_proj));
    RETURN_IF_ERROR(Load(checkpoint, &stage, p + "mlp.down_proj.weight", {hidden, c.intermediate_size},
                         &l.down_proj));
  }
  RETURN_IF_ERROR(Load(checkpoint, &stage, "model.norm.weight", {hidden}, &w.final_norm));
  if (!c.tie_word_embeddings) {
    RETURN_IF_ERROR(Load(checkpoint, &stage, "lm_head.weight", {c.vocab_size, hidden}, &w.lm_head));
  }
  RETURN_IF_ERROR(stage.End());
  return w;
}

void RoundProjections(const ModelConfig& c, StorageDType dtype, CpuWeights* weights) {
  for (CpuLayerWeights& l : weights->layers) {
    RoundMatrix(dtype, c.q_dim(), &l.q_proj);
    RoundMatrix(dtype, c.kv_dim(), &l.k_proj);
    RoundMatrix(dtype, c.kv_dim(), &l.v_proj);
    RoundMatrix(dtype, c.hidden_size, &l.o_proj);
    RoundMatrix(dtype, c.intermediate_size, &l.gate_proj);
    RoundMatrix(dtype, c.intermediate_size, &l.up_proj);
    RoundMatrix(dtype, c.hidden_size, &l.down_proj);
  }
}

}  // namespace kvtier
