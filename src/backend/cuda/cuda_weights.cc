// CudaWeights (see cuda_weights.h): sizing, and the load that allocates and fills them.
#include "backend/cuda/cuda_weights.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_skinny.h"
#include "common/status_macros.h"

namespace kvtier::cuda {
namespace {

std::string LayerName(int64_t layer, const char* suffix) { return absl::StrCat("model.layers.", layer, ".", suffix); }

}  // namespace

int64_t CudaWeights::MaxProjectionElements(const ModelConfig& config) {
  const int64_t h = config.hidden_size, inter = config.intermediate_size;
  const int64_t qkv = config.q_dim() + 2 * config.kv_dim();
  return std::max({qkv * h, h * config.q_dim(), 2 * inter * h, h * inter, MoeMaxExpertMatrixElements(config)});
}

int64_t CudaWeights::Fp8PartialFloats(const ModelConfig& config, int64_t max_tokens, int32_t sm_count) {
  const int64_t h = config.hidden_size, inter = config.intermediate_size;
  const int64_t qkv = config.q_dim() + 2 * config.kv_dim();
  const int rows = static_cast<int>(std::min<int64_t>(kSkinnyFp8MaxRows, max_tokens));
  int64_t floats = 0;
  for (auto [n, k] : {std::pair{qkv, h}, std::pair{h, config.q_dim()}, std::pair{2 * inter, h}, std::pair{h, inter}}) {
    floats = std::max<int64_t>(floats,
                               static_cast<int64_t>(SkinnyFp8PartialFloats(rows, n, SkinnyFp8Splits(n, k, sm_count))));
  }
  return floats;
}

int64_t CudaWeights::Bytes(const ModelConfig& config, bool fp8, int64_t fp8_partial_floats) {
  const int64_t h = config.hidden_size, inter = config.intermediate_size;
  const int64_t qkv = config.q_dim() + 2 * config.kv_dim();
  const int64_t attention_elements = qkv * h + h * config.q_dim(), mlp_elements = 2 * inter * h + h * inter;
  auto projection_bytes = [&](int64_t elements, int64_t rows) { return fp8 ? elements + 4 * rows : 2 * elements; };
  const int64_t per_layer = projection_bytes(attention_elements, qkv + h) +
                            4 * ((config.gemma.sandwich_norms ? 4 : 2) * h + 2 * config.head_dim + qkv);
  int64_t total = 2 * config.vocab_size * h + 4 * h;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const bool moe = config.IsMoeLayer(layer);
    total += per_layer + (moe ? MoeLayerBytes(config, fp8) : projection_bytes(mlp_elements, 2 * inter + h));
  }
  if (fp8) total += 2 * MaxProjectionElements(config) + 4 * fp8_partial_floats;
  if (!config.tie_word_embeddings) total += 2 * config.vocab_size * h;
  total += 4 * (config.head_dim / 2) * (config.long_rope || config.gemma3_rope.local_theta ? 2 : 1);  // RoPE tables
  return total;
}

absl::StatusOr<CudaWeights> CudaWeights::Load(const ModelConfig& config, DType dtype, bool fp8,
                                              int64_t fp8_partial_floats, const WeightLoader& loader,
                                              const Fp8WeightLoader* fp8_loader, DeviceMemoryAccount& memory) {
  CudaWeights weights;
  weights.fp8 = fp8;
  const int64_t h = config.hidden_size, inter = config.intermediate_size;
  const int64_t q_dim = config.q_dim(), kv_dim = config.kv_dim();
  const int64_t qkv = q_dim + 2 * kv_dim;
  auto alloc_16 = [&](int64_t n, const char* what) -> absl::StatusOr<Raw16*> {
    ASSIGN_OR_RETURN(void* p, memory.Allocate(n * sizeof(Raw16), what));
    return static_cast<Raw16*>(p);
  };
  const DType w16 = dtype;
  constexpr DType f32 = DType::kF32;
  auto alloc_f32 = [&](int64_t n, const char* what) -> absl::StatusOr<float*> {
    ASSIGN_OR_RETURN(void* p, memory.Allocate(n * sizeof(float), what));
    return static_cast<float*>(p);
  };

  // A projection of `rows` x `cols` made of `parts` (checkpoint tensor, rows) stacked in
  // order: 16-bit, or fp8 codes + per-row scales (each part quantized by rows, which is
  // the quantization of the stacked matrix).
  struct Part {
    std::string name;
    int64_t rows;
  };
  const Fp8WeightLoader default_fp8_loader = [&](const std::string& name, int64_t rows, int64_t cols, uint8_t* codes,
                                                 float* scales, void* staging) {
    RETURN_IF_ERROR(loader(name, rows * cols, staging, w16));
    return QuantizeOnDevice(staging, w16, rows, cols, codes, scales);
  };
  const Fp8WeightLoader& load_fp8 = fp8_loader != nullptr ? *fp8_loader : default_fp8_loader;
  auto load_projection = [&](int64_t rows, int64_t cols, const std::vector<Part>& parts, const char* what, Raw16** w,
                             Fp8Matrix* w8) -> absl::Status {
    if (!fp8) {
      ASSIGN_OR_RETURN(*w, alloc_16(rows * cols, what));
      int64_t row = 0;
      for (const Part& part : parts) {
        RETURN_IF_ERROR(loader(part.name, part.rows * cols, *w + row * cols, w16));
        row += part.rows;
      }
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(void* codes, memory.Allocate(rows * cols, what));
    w8->codes = static_cast<uint8_t*>(codes);
    ASSIGN_OR_RETURN(w8->scales, alloc_f32(rows, what));
    int64_t row = 0;
    for (const Part& part : parts) {
      RETURN_IF_ERROR(
          load_fp8(part.name, part.rows, cols, w8->codes + row * cols, w8->scales + row, weights.fp8_scratch));
      row += part.rows;
    }
    return absl::OkStatus();
  };

  if (fp8) {
    ASSIGN_OR_RETURN(weights.fp8_scratch, alloc_16(MaxProjectionElements(config), "fp8 dequantization scratch"));
    ASSIGN_OR_RETURN(weights.fp8_partial, alloc_f32(fp8_partial_floats, "fp8 projection partials"));
    CUDA_RETURN_IF_ERROR(SkinnyFp8Init());
  }
  ASSIGN_OR_RETURN(weights.embed, alloc_16(config.vocab_size * h, "embeddings"));
  RETURN_IF_ERROR(loader("model.embed_tokens.weight", config.vocab_size * h, weights.embed, w16));
  if (config.tie_word_embeddings) {
    weights.lm_head = weights.embed;
  } else {
    ASSIGN_OR_RETURN(weights.lm_head, alloc_16(config.vocab_size * h, "lm_head"));
    RETURN_IF_ERROR(loader("lm_head.weight", config.vocab_size * h, weights.lm_head, w16));
  }
  // A norm vector; Gemma's (1 + w) folded in here (as the CPU backend does), so the norm
  // kernels stay the same. The norms are the only readers of these vectors.
  auto load_norm = [&](const std::string& name, int64_t n, const char* what, float** out) -> absl::Status {
    ASSIGN_OR_RETURN(*out, alloc_f32(n, what));
    RETURN_IF_ERROR(loader(name, n, *out, f32));
    if (!config.gemma.norm_plus_one) return absl::OkStatus();
    std::vector<float> host(static_cast<size_t>(n));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), *out, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (float& w : host) w = 1.0f + w;
    CUDA_RETURN_IF_ERROR(cudaMemcpy(*out, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(load_norm("model.norm.weight", h, "final norm", &weights.final_norm));
  weights.layers.resize(config.num_layers);
  for (int64_t i = 0; i < config.num_layers; ++i) {
    Layer& w = weights.layers[i];
    // Phi-3's checkpoints hold q|k|v and gate|up already stacked, in the order these are.
    const std::vector<Part> qkv_parts =
        config.fused_projections ? std::vector<Part>{{LayerName(i, "self_attn.qkv_proj.weight"), qkv}}
                                 : std::vector<Part>{{LayerName(i, "self_attn.q_proj.weight"), q_dim},
                                                     {LayerName(i, "self_attn.k_proj.weight"), kv_dim},
                                                     {LayerName(i, "self_attn.v_proj.weight"), kv_dim}};
    RETURN_IF_ERROR(load_projection(qkv, h, qkv_parts, "qkv weights", &w.qkv, &w.qkv8));
    if (config.attention_bias) {
      ASSIGN_OR_RETURN(w.qkv_bias, alloc_f32(qkv, "qkv bias"));
      RETURN_IF_ERROR(loader(LayerName(i, "self_attn.q_proj.bias"), q_dim, w.qkv_bias, f32));
      RETURN_IF_ERROR(loader(LayerName(i, "self_attn.k_proj.bias"), kv_dim, w.qkv_bias + q_dim, f32));
      RETURN_IF_ERROR(loader(LayerName(i, "self_attn.v_proj.bias"), kv_dim, w.qkv_bias + q_dim + kv_dim, f32));
    }
    if (config.qk_norm) {
      RETURN_IF_ERROR(load_norm(LayerName(i, "self_attn.q_norm.weight"), config.head_dim, "q norm", &w.q_norm));
      RETURN_IF_ERROR(load_norm(LayerName(i, "self_attn.k_norm.weight"), config.head_dim, "k norm", &w.k_norm));
    }
    RETURN_IF_ERROR(
        load_projection(h, q_dim, {{LayerName(i, "self_attn.o_proj.weight"), h}}, "o weights", &w.o, &w.o8));
    RETURN_IF_ERROR(load_norm(LayerName(i, "input_layernorm.weight"), h, "input norm", &w.input_norm));
    RETURN_IF_ERROR(load_norm(LayerName(i, "post_attention_layernorm.weight"), h, "post-attention norm", &w.post_norm));
    if (config.gemma.sandwich_norms) {
      RETURN_IF_ERROR(
          load_norm(LayerName(i, "pre_feedforward_layernorm.weight"), h, "pre-feed-forward norm", &w.pre_ffn_norm));
      RETURN_IF_ERROR(
          load_norm(LayerName(i, "post_feedforward_layernorm.weight"), h, "post-feed-forward norm", &w.post_ffn_norm));
    }
    if (config.IsMoeLayer(i)) {
      RETURN_IF_ERROR(LoadMoeExperts(config, i, w16, fp8, loader, load_fp8, weights.fp8_scratch, memory, &w.moe));
      continue;
    }
    const std::vector<Part> gate_up_parts =
        config.fused_projections
            ? std::vector<Part>{{LayerName(i, "mlp.gate_up_proj.weight"), 2 * inter}}
            : std::vector<Part>{{LayerName(i, "mlp.gate_proj.weight"), inter}, {LayerName(i, "mlp.up_proj.weight"), inter}};
    RETURN_IF_ERROR(load_projection(2 * inter, h, gate_up_parts, "gate/up weights", &w.gate_up, &w.gate_up8));
    RETURN_IF_ERROR(
        load_projection(h, inter, {{LayerName(i, "mlp.down_proj.weight"), h}}, "down weights", &w.down, &w.down8));
  }
  // The tables the CPU backend computes (cpu_ops.h), so both rotate with the same floats.
  const int64_t half = config.head_dim / 2;
  auto upload_table = [&](const std::vector<float>& table, float** out) -> absl::Status {
    ASSIGN_OR_RETURN(*out, alloc_f32(half, "rope"));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(*out, table.data(), half * sizeof(float), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  };
  std::vector<float> inv_freq(half);
  if (config.long_rope) {
    const LongRopeScaling& rope = *config.long_rope;
    LongRopeInverseFrequencies(config.head_dim, config.rope_theta, rope.short_factor, inv_freq.data());
    std::vector<float> long_inv_freq(half);
    LongRopeInverseFrequencies(config.head_dim, config.rope_theta, rope.long_factor, long_inv_freq.data());
    RETURN_IF_ERROR(upload_table(long_inv_freq, &weights.long_inv_freq));
    weights.long_from_position = static_cast<int32_t>(
        std::min<int64_t>(rope.original_max_position_embeddings, std::numeric_limits<int32_t>::max()));
    weights.rope_scale = static_cast<float>(rope.attention_factor);
  } else {
    RopeInverseFrequencies(config.head_dim, config.rope_theta, config.rope_scaling, inv_freq.data());
    // Gemma 3's linear rope_scaling: HF's inv_freq / factor in fp32 (cpu_backend.cc likewise).
    const float linear = static_cast<float>(config.gemma3_rope.linear_factor);
    if (linear != 1.0f) {
      for (float& f : inv_freq) f /= linear;
    }
  }
  RETURN_IF_ERROR(upload_table(inv_freq, &weights.inv_freq));
  if (config.gemma3_rope.local_theta) {  // the global layers' scaling does not reach these
    std::vector<float> local_inv_freq(half);
    RopeInverseFrequencies(config.head_dim, *config.gemma3_rope.local_theta, std::nullopt, local_inv_freq.data());
    RETURN_IF_ERROR(upload_table(local_inv_freq, &weights.local_inv_freq));
  }
  return weights;
}

absl::Status CudaWeights::ReleaseDequantScratch(DeviceMemoryAccount& memory, cudaStream_t stream) {
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  memory.Free(fp8_scratch);
  fp8_scratch = nullptr;
  return absl::OkStatus();
}

}  // namespace kvtier::cuda
