// Loading of the CPU backend's weights (cpu_weights.h). Thread-compatible.
#include "backend/cpu/cpu_weights.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/progress.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"
#include "model/block_quants.h"
#include "model/fp8_weights.h"
#include "common/fp8_e4m3.h"

namespace kvtier {
namespace {

absl::StatusOr<TensorView> Shaped(const Checkpoint& checkpoint, const std::string& name,
                                  const std::vector<int64_t>& shape) {
  ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
  if (tensor.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has shape [",
                                                   absl::StrJoin(tensor.shape, ", "),
                                                   "], expected [", absl::StrJoin(shape, ", "),
                                                   "]"));
  }
  return tensor;
}

absl::Status Load(const Checkpoint& checkpoint, ProgressStage* stage, const std::string& name,
                  const std::vector<int64_t>& shape, std::vector<float>* out) {
  ASSIGN_OR_RETURN(TensorView tensor, Shaped(checkpoint, name, shape));
  RETURN_IF_ERROR(checkpoint.TensorAsFloat32(name, out));  // fp8: codes times scales
  return stage->Add(static_cast<int64_t>(tensor.nbytes()));
}

// A matrix, kept in the checkpoint's format when keep_format and CpuMatrix computes from
// it; fp8 checkpoints' codes need their scales, so they are always widened.
absl::Status LoadMatrix(const Checkpoint& checkpoint, ProgressStage* stage, const std::string& name,
                        int64_t rows, int64_t cols, bool keep_format, CpuMatrix* out) {
  ASSIGN_OR_RETURN(TensorView tensor, Shaped(checkpoint, name, {rows, cols}));
  out->rows = rows;
  out->cols = cols;
  if (keep_format && tensor.dtype != DType::kF32 && CpuMatrixKeeps(tensor.dtype) &&
      !checkpoint.quantization().quantized()) {
    out->dtype = tensor.dtype;
    out->packed.assign(tensor.data, tensor.data + tensor.nbytes());
  } else {
    out->dtype = DType::kF32;
    RETURN_IF_ERROR(checkpoint.TensorAsFloat32(name, &out->f32));
  }
  return stage->Add(static_cast<int64_t>(tensor.nbytes()));
}

// A fused projection [sum(rows), cols] split by rows into `parts`, in order, each held in
// fp32 (the fused checkpoints' parts are not kept in their own format).
absl::Status LoadSplit(const Checkpoint& checkpoint, ProgressStage* stage, const std::string& name, int64_t cols,
                       std::initializer_list<std::pair<int64_t, CpuMatrix*>> parts) {
  int64_t rows = 0;
  for (const auto& part : parts) rows += part.first;
  std::vector<float> fused;
  RETURN_IF_ERROR(Load(checkpoint, stage, name, {rows, cols}, &fused));
  auto from = fused.begin();
  for (const auto& [part_rows, out] : parts) {
    out->rows = part_rows;
    out->cols = cols;
    out->dtype = DType::kF32;
    out->f32.assign(from, from + part_rows * cols);
    from += part_rows * cols;
  }
  return absl::OkStatus();
}

// A norm vector; Gemma's (1 + w) is stored as its sum.
absl::Status LoadNorm(const Checkpoint& checkpoint, ProgressStage* stage, const std::string& name, int64_t dim,
                      std::vector<float>* out) {
  RETURN_IF_ERROR(Load(checkpoint, stage, name, {dim}, out));
  if (checkpoint.config().gemma.norm_plus_one) {
    for (float& w : *out) w = 1.0f + w;
  }
  return absl::OkStatus();
}

// A sparse layer's router (always fp32: the routing's choices hang on its logits) and
// experts, `p` the layer's prefix.
absl::Status LoadExperts(const Checkpoint& checkpoint, ProgressStage* stage, const std::string& p, bool keep_formats,
                         CpuMoeWeights* out) {
  const ModelConfig& c = checkpoint.config();
  const int64_t hidden = c.hidden_size;
  const int64_t inter = c.moe.expert_intermediate_size;
  const ExpertTensorNames names = ExpertNames(c.architecture);
  RETURN_IF_ERROR(LoadMatrix(checkpoint, stage, p + names.router, c.moe.num_experts, hidden, false, &out->router));
  out->experts.resize(static_cast<size_t>(c.moe.num_experts));
  for (int64_t e = 0; e < c.moe.num_experts; ++e) {
    CpuExpert& expert = out->experts[static_cast<size_t>(e)];
    const std::string ep = absl::StrCat(p, names.experts, e, ".");
    RETURN_IF_ERROR(LoadMatrix(checkpoint, stage, ep + names.gate, inter, hidden, keep_formats, &expert.gate));
    RETURN_IF_ERROR(LoadMatrix(checkpoint, stage, ep + names.up, inter, hidden, keep_formats, &expert.up));
    RETURN_IF_ERROR(LoadMatrix(checkpoint, stage, ep + names.down, hidden, inter, keep_formats, &expert.down));
  }
  return absl::OkStatus();
}

// Rounds one matrix held in fp32 in place, or narrows it to 16 bits (RoundProjections).
void RoundMatrix(StorageDType dtype, bool keep_16bit, CpuMatrix* matrix) {
  if (matrix->dtype != DType::kF32) return;
  if (keep_16bit && (dtype == StorageDType::kBf16 || dtype == StorageDType::kFp16) && !matrix->f32.empty()) {
    const bool bf16 = dtype == StorageDType::kBf16;
    matrix->dtype = bf16 ? DType::kBF16 : DType::kF16;
    matrix->packed.resize(matrix->f32.size() * sizeof(uint16_t));
    uint16_t* out = reinterpret_cast<uint16_t*>(matrix->packed.data());
    for (size_t i = 0; i < matrix->f32.size(); ++i) out[i] = bf16 ? FloatToBf16(matrix->f32[i]) : FloatToFp16(matrix->f32[i]);
    std::vector<float>().swap(matrix->f32);
    return;
  }
  const int64_t rows = matrix->rows;
  std::vector<float>* w = &matrix->f32;
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

// The type a matrix of `cols` columns is stored in as `dtype` (F16 when its rows are not
// whole blocks, as GGUF export stores it).
DType StoredBlockType(DType dtype, int64_t cols) {
  return cols % DTypeBlockElements(dtype) == 0 ? dtype : DType::kF16;
}

// values (rows, cols) encoded as `type` (a block type or F16) into `packed`.
void PackRows(DType type, const std::vector<float>& values, int64_t rows, int64_t cols, std::vector<uint8_t>* packed) {
  const size_t row_bytes = DTypeBytes(type, cols);
  packed->resize(row_bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* out = packed->data() + row_bytes * r;
    const float* row = values.data() + r * cols;
    if (type == DType::kF16) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t bits = FloatToFp16(row[c]);
        out[2 * c] = static_cast<uint8_t>(bits & 0xFF);
        out[2 * c + 1] = static_cast<uint8_t>(bits >> 8);
      }
    } else {
      QuantizeBlocks(type, row, cols, out);
    }
  }
}

// *values (rows, cols) replaced by what `type` holds of them.
void RoundThrough(DType type, int64_t rows, int64_t cols, std::vector<float>* values) {
  std::vector<uint8_t> packed;
  PackRows(type, *values, rows, cols, &packed);
  const size_t row_bytes = DTypeBytes(type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* in = packed.data() + row_bytes * r;
    float* out = values->data() + r * cols;
    if (type == DType::kF16) {
      for (int64_t c = 0; c < cols; ++c) out[c] = Fp16ToFloat(static_cast<uint16_t>(in[2 * c] | (in[2 * c + 1] << 8)));
    } else {
      DequantizeBlocks(type, in, cols, out);
    }
  }
}

// One fp32 matrix as `dtype` (QuantizeCpuWeights); matrices not in fp32 are left alone.
void QuantizeMatrix(DType dtype, bool keep_blocks, CpuMatrix* m) {
  if (m->empty() || m->dtype != DType::kF32) return;
  const DType type = StoredBlockType(dtype, m->cols);
  if (!keep_blocks) {
    RoundThrough(type, m->rows, m->cols, &m->f32);
    return;
  }
  PackRows(type, m->f32, m->rows, m->cols, &m->packed);
  m->dtype = type;
  std::vector<float>().swap(m->f32);
}

int64_t VectorBytes(const std::vector<float>& v) {
  return static_cast<int64_t>(v.size() * sizeof(float));
}

}  // namespace

int64_t CpuWeights::Bytes() const {
  int64_t bytes = VectorBytes(embed_tokens) + VectorBytes(final_norm) + lm_head.Bytes();
  for (const CpuLayerWeights& l : layers) {
    for (const std::vector<float>* v :
         {&l.input_norm, &l.q_bias, &l.k_bias, &l.v_bias, &l.q_norm, &l.k_norm, &l.o_bias,
          &l.post_attention_norm, &l.pre_feedforward_norm, &l.post_feedforward_norm}) {
      bytes += VectorBytes(*v);
    }
    for (const CpuMatrix* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
      bytes += m->Bytes();
    }
    bytes += l.moe.Bytes();
  }
  return bytes;
}

absl::StatusOr<CpuWeights> LoadCpuWeights(const Checkpoint& checkpoint, const ProgressFn& progress,
                                          bool keep_formats) {
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
    RETURN_IF_ERROR(LoadNorm(checkpoint, &stage, p + "input_layernorm.weight", hidden, &l.input_norm));
    if (c.fused_projections) {
      RETURN_IF_ERROR(LoadSplit(checkpoint, &stage, p + "self_attn.qkv_proj.weight", hidden,
                                {{c.q_dim(), &l.q_proj}, {c.kv_dim(), &l.k_proj}, {c.kv_dim(), &l.v_proj}}));
    } else {
      RETURN_IF_ERROR(LoadMatrix(checkpoint, &stage, p + "self_attn.q_proj.weight", c.q_dim(), hidden, keep_formats,
                                 &l.q_proj));
      RETURN_IF_ERROR(LoadMatrix(checkpoint, &stage, p + "self_attn.k_proj.weight", c.kv_dim(), hidden, keep_formats,
                                 &l.k_proj));
      RETURN_IF_ERROR(LoadMatrix(checkpoint, &stage, p + "self_attn.v_proj.weight", c.kv_dim(), hidden, keep_formats,
                                 &l.v_proj));
    }
    if (c.attention_bias) {
      RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.q_proj.bias", {c.q_dim()}, &l.q_bias));
      RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.k_proj.bias", {c.kv_dim()}, &l.k_bias));
      RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.v_proj.bias", {c.kv_dim()}, &l.v_bias));
    }
    if (c.qk_norm) {
      RETURN_IF_ERROR(LoadNorm(checkpoint, &stage, p + "self_attn.q_norm.weight", c.head_dim, &l.q_norm));
      RETURN_IF_ERROR(LoadNorm(checkpoint, &stage, p + "self_attn.k_norm.weight", c.head_dim, &l.k_norm));
    }
    RETURN_IF_ERROR(LoadMatrix(checkpoint, &stage, p + "self_attn.o_proj.weight", hidden, c.q_dim(),
                         keep_formats, &l.o_proj));
    if (c.attention_bias && c.architecture != Architecture::kQwen2) {
      RETURN_IF_ERROR(Load(checkpoint, &stage, p + "self_attn.o_proj.bias", {hidden}, &l.o_bias));
    }
    RETURN_IF_ERROR(
        LoadNorm(checkpoint, &stage, p + "post_attention_layernorm.weight", hidden, &l.post_attention_norm));
    if (c.gemma.sandwich_norms) {
      RETURN_IF_ERROR(
          LoadNorm(checkpoint, &stage, p + "pre_feedforward_layernorm.weight", hidden, &l.pre_feedforward_norm));
      RETURN_IF_ERROR(
          LoadNorm(checkpoint, &stage, p + "post_feedforward_layernorm.weight", hidden, &l.post_feedforward_norm));
    }
    if (c.IsMoeLayer(i)) {
      RETURN_IF_ERROR(LoadExperts(checkpoint, &stage, p, keep_formats, &l.moe));
      continue;
    }
    if (c.fused_projections) {
      RETURN_IF_ERROR(LoadSplit(checkpoint, &stage, p + "mlp.gate_up_proj.weight", hidden,
                                {{c.intermediate_size, &l.gate_proj}, {c.intermediate_size, &l.up_proj}}));
    } else {
      RETURN_IF_ERROR(LoadMatrix(checkpoint, &stage, p + "mlp.gate_proj.weight", c.intermediate_size, hidden,
                                 keep_formats, &l.gate_proj));
      RETURN_IF_ERROR(LoadMatrix(checkpoint, &stage, p + "mlp.up_proj.weight", c.intermediate_size, hidden,
                                 keep_formats, &l.up_proj));
    }
    RETURN_IF_ERROR(LoadMatrix(checkpoint, &stage, p + "mlp.down_proj.weight", hidden, c.intermediate_size,
                               keep_formats, &l.down_proj));
  }
  RETURN_IF_ERROR(LoadNorm(checkpoint, &stage, "model.norm.weight", hidden, &w.final_norm));
  if (!c.tie_word_embeddings) {
    RETURN_IF_ERROR(LoadMatrix(checkpoint, &stage, "lm_head.weight", c.vocab_size, hidden, keep_formats, &w.lm_head));
  } else if (keep_formats) {
    // Tied: the table's own format for the product, when it is kept (the fp32 copy above
    // serves the lookups); an fp32 table is multiplied from embed_tokens directly.
    ASSIGN_OR_RETURN(TensorView table, checkpoint.Tensor("model.embed_tokens.weight"));
    if (table.dtype != DType::kF32 && CpuMatrixKeeps(table.dtype) && !checkpoint.quantization().quantized()) {
      const ProgressFn no_progress;  // the table's bytes were counted once already
      ProgressStage uncounted(no_progress, "weights", 0);
      RETURN_IF_ERROR(LoadMatrix(checkpoint, &uncounted, "model.embed_tokens.weight", c.vocab_size, hidden, true,
                                 &w.lm_head));
    }
  }
  RETURN_IF_ERROR(stage.End());
  return w;
}

void RoundProjections(const ModelConfig& c, StorageDType dtype, bool keep_16bit, CpuWeights* weights) {
  for (CpuLayerWeights& l : weights->layers) {
    RoundMatrix(dtype, keep_16bit, &l.q_proj);
    RoundMatrix(dtype, keep_16bit, &l.k_proj);
    RoundMatrix(dtype, keep_16bit, &l.v_proj);
    RoundMatrix(dtype, keep_16bit, &l.o_proj);
    RoundMatrix(dtype, keep_16bit, &l.gate_proj);
    RoundMatrix(dtype, keep_16bit, &l.up_proj);
    RoundMatrix(dtype, keep_16bit, &l.down_proj);
    for (CpuExpert& e : l.moe.experts) {
      RoundMatrix(dtype, keep_16bit, &e.gate);
      RoundMatrix(dtype, keep_16bit, &e.up);
      RoundMatrix(dtype, keep_16bit, &e.down);
    }
  }
}

void UseDot16(const Dot16Kernels& kernels, CpuWeights* weights) {
  for (CpuLayerWeights& l : weights->layers) {
    for (CpuMatrix* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj,
                         &l.moe.router}) {
      m->dot16 = &kernels;
    }
    for (CpuExpert& e : l.moe.experts) {
      for (CpuMatrix* m : {&e.gate, &e.up, &e.down}) m->dot16 = &kernels;
    }
  }
  weights->lm_head.dot16 = &kernels;
}

void QuantizeCpuWeights(const ModelConfig& c, DType dtype, bool keep_blocks, CpuWeights* weights) {
  for (CpuLayerWeights& l : weights->layers) {
    for (CpuMatrix* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.gate_proj, &l.up_proj}) {
      QuantizeMatrix(dtype, keep_blocks && !c.fused_projections, m);
    }
    QuantizeMatrix(dtype, keep_blocks, &l.o_proj);
    QuantizeMatrix(dtype, keep_blocks, &l.down_proj);
  }
  const int64_t hidden = c.hidden_size;
  if (c.tie_word_embeddings && keep_blocks) {
    // The product reads the quantized table, as from a GGUF file's token_embd.
    weights->lm_head = {.dtype = DType::kF32, .rows = c.vocab_size, .cols = hidden, .f32 = weights->embed_tokens, .packed = {}};
  }
  QuantizeMatrix(dtype, keep_blocks, &weights->lm_head);
  RoundThrough(StoredBlockType(dtype, hidden), c.vocab_size, hidden, &weights->embed_tokens);
}

}  // namespace kvtier
