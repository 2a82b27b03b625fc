// Random-weight HF checkpoints for tests and benchmarks (no model can be downloaded here).
// Every weight is a pure function of (seed, tensor name, element index), so the bytes do
// not depend on thread count, chunking or sharding. Functions are thread-safe.
#ifndef KVTIER_MODEL_RANDOM_CHECKPOINT_H_
#define KVTIER_MODEL_RANDOM_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/progress.h"
#include "model/config.h"
#include "model/safetensors_writer.h"
#include "model/tensor.h"
#include "model/weight_quantization.h"

namespace kvtier {

// Mixtral and Qwen3-MoE: every layer's MLP is `experts` experts, tokens routed to top_k.
struct RandomMoeSpec {
  int64_t experts = 4;
  int64_t top_k = 2;
  int64_t expert_intermediate = 0;  // Qwen3-MoE's moe_intermediate_size; 0: intermediate
  bool norm_topk_prob = true;       // Qwen3-MoE (Mixtral always renormalizes)
  std::vector<int64_t> dense_layers;  // Qwen3-MoE's mlp_only_layers: a dense MLP there
};

struct RandomCheckpointSpec {
  Architecture arch = Architecture::kLlama;
  int64_t hidden = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 16;
  int64_t intermediate = 128;
  int64_t vocab = 512;
  int64_t max_positions = 2048;
  DType dtype = DType::kF32;  // F32/F16/BF16: every tensor not quantized below
  // Not kNone: the linear projections (q/k/v/o, gate/up/down, the experts') are written as F8_E4M3 with
  // F32 scales in that layout (amax / 448 per tensor, channel or block), and config.json
  // gets the matching quantization_config. Embeddings, lm_head, norms and biases stay
  // `dtype`, as in the downloadable FP8 checkpoints.
  WeightQuantization quantization;
  uint64_t seed = 1;
  bool tie_embeddings = false;
  std::optional<Llama3RopeScaling> rope_scaling;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  // Llama/Qwen3 only (Qwen2 always has q/k/v biases; Mistral never).
  bool attention_bias = false;
  int64_t max_shard_bytes = 0;  // 0 = single model.safetensors
  std::optional<int32_t> bos_token_id = 1;
  std::vector<int32_t> eos_token_ids = {2};
  int num_threads = 0;  // 0 = hardware_concurrency; does not change the bytes

  // The window of the sliding layers (ignored for Llama): with Gemma every layer but each
  // sliding_window_pattern-th (transformers' layer_types default), with the other families
  // every layer; nullopt for none.
  std::optional<int64_t> sliding_window;
  int64_t sliding_window_pattern = 2;
  std::optional<double> query_pre_attn_scalar;  // Gemma; nullopt: head_dim
  std::optional<double> attn_logit_softcap;     // Gemma
  std::optional<double> final_logit_softcap;    // Gemma
  double rope_local_theta = 10000.0;            // Gemma 3's sliding layers
  double rope_linear_factor = 1.0;              // Gemma 3's full layers: linear RoPE scaling
  // Phi-3: longrope over this original context, its factors a fixed function of head_dim
  // (short 1 .. 1.5, long 1 .. 8 rising with the frequency index); nullopt for plain RoPE.
  std::optional<int64_t> longrope_original_max_positions;
  RandomMoeSpec moe;  // Mixtral and Qwen3-MoE only
};

// Named presets: "tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-gemma2",
// "tiny-gemma3", "tiny-phi3", "tiny-mixtral", "tiny-qwen3moe" (2 layers, hidden 64, fp32),
// "small-llama" (4 layers, hidden 256), "llama3-8b", "llama3.2-1b", "mistral-7b",
// "qwen2.5-0.5b", "qwen3-0.6b", "gemma2-2b", "gemma3-1b", "phi3.5-mini", "mixtral-8x7b",
// "qwen3-30b-a3b" (real shapes, bf16). NotFound naming the
// preset and listing the known ones otherwise.
absl::StatusOr<RandomCheckpointSpec> RandomCheckpointPreset(std::string_view name);
std::vector<std::string> RandomCheckpointPresetNames();

// The config a spec describes, validated through ParseModelConfig (InvalidArgument).
absl::StatusOr<ModelConfig> RandomCheckpointConfig(const RandomCheckpointSpec& spec);

// Value of element `index` of tensor `name` (before conversion to the stored dtype or
// quantization):
// matrices uniform with std 1/sqrt(fan_in), RMSNorm weights 1 +- 0.2, biases +- 0.5.
float RandomWeight(uint64_t seed, const std::string& name, const std::vector<int64_t>& shape, int64_t index);

// The tensors WriteRandomCheckpoint writes for `spec`, in its order, each producing its
// values: for writers of other formats (GGUF). InvalidArgument as RandomCheckpointConfig.
absl::StatusOr<std::vector<TensorToWrite>> RandomCheckpointTensors(const RandomCheckpointSpec& spec);

// The names of the files WriteRandomCheckpoint writes for `spec`: config.json,
// generation_config.json, then model.safetensors or the shards and their index.
absl::StatusOr<std::vector<std::string>> RandomCheckpointFiles(const RandomCheckpointSpec& spec);

// Writes those files into `directory` (created if missing), replacing files of the same
// names and deleting nothing. FailedPrecondition, before anything is written, when a
// model.safetensors.index.json it would not replace exists there (it would shadow the new
// single-file weights). `progress` (may be empty) hears the stage "weights" (tensor bytes
// written); Cancelled when it asks to stop.
absl::Status WriteRandomCheckpoint(const RandomCheckpointSpec& spec, const std::string& directory,
                                   const ProgressFn& progress = {});

}  // namespace kvtier

#endif  // KVTIER_MODEL_RANDOM_CHECKPOINT_H_
