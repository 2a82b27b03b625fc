// How a kvtier model is spelled in GGUF, both ways: the architecture and hyperparameter
// keys (`general.architecture`, `<arch>.embedding_length`, ...), llama.cpp's tensor names
// (`blk.N.attn_q.weight` for `model.layers.N.self_attn.q_proj.weight`), Llama 3 RoPE
// scaling as the `rope_freqs.weight` factors, and the row permutation llama.cpp's
// converter applies to the Q and K projections of `llama` models (so that its RoPE can
// rotate adjacent pairs; HF rotates the two halves of each head). Pure functions;
// thread-safe.
#ifndef KVTIER_MODEL_GGUF_MODEL_H_
#define KVTIER_MODEL_GGUF_MODEL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "model/generation_config.h"
#include "model/gguf_file.h"
#include "model/gguf_writer.h"

namespace kvtier {

// "llama" (Llama and Mistral), "qwen2", "qwen3".
std::string_view GgufArchitectureName(Architecture arch);

// The config a GGUF file's metadata and tensor shapes describe. Unimplemented naming what
// kvtier does not run: another general.architecture, per-layer head counts, partial RoPE,
// a rope.scaling type other than none, or rope_freqs that are not Llama 3 scaling.
// InvalidArgument naming the key for a missing or mistyped hyperparameter (or one
// ParseModelConfig refuses).
absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& file);

// The general.* and <arch>.* metadata of a config (llama.cpp's keys). `file_type` is
// llama.cpp's LLAMA_FTYPE of the file (0 all F32, 1 F16, 7 Q8_0, 32 BF16).
GgufMetadata GgufModelMetadata(const ModelConfig& config, const std::string& name, uint32_t file_type);

// The sampling defaults of a generation_config.json as GGUF metadata: llama.cpp's
// general.sampling.{temp, top_k, top_p, penalty_repeat} (what its converter writes), and the
// file itself as kvtier.generation_config, for what llama.cpp has no key for (do_sample,
// max_new_tokens, eos_token_id). InvalidArgument as ParseGenerationConfig.
absl::StatusOr<GgufMetadata> GgufGenerationMetadata(std::string_view generation_config_json);

// The sampling defaults a GGUF file carries: kvtier.generation_config when present, else
// general.sampling.* (temp > 0 samples); nullopt when it has neither. InvalidArgument naming
// the key for a malformed one.
absl::StatusOr<std::optional<GenerationConfig>> GenerationConfigFromGguf(const GgufFile& file);

// llama.cpp's name of an HF tensor name ExpectedTensors uses; nullopt for any other name.
std::optional<std::string> GgufTensorName(std::string_view hf_name);
// The HF name of a llama.cpp tensor name; nullopt for names kvtier does not read.
std::optional<std::string> HfTensorName(std::string_view gguf_name);

// The number of heads whose rows llama.cpp's converter interleaves in tensor `hf_name`
// (q_proj: num_heads, k_proj: num_kv_heads, weights and biases) for a `llama` model;
// nullopt when the tensor is stored as HF stores it.
std::optional<int64_t> RopePermutedHeads(const ModelConfig& config, std::string_view hf_name);

// Reorders the rows of a [rows, ...] tensor between HF's layout and llama.cpp's: within
// each of `heads` heads of `rows / heads` rows, HF row s * half + i (s in {0, 1}) is GGUF
// row 2 * i + s. `to_gguf` false undoes it. Rows are row_bytes apart (any dtype: a row of
// a block type is whole blocks).
void PermuteRopeRows(const uint8_t* in, uint8_t* out, int64_t rows, size_t row_bytes, int64_t heads, bool to_gguf);

// Llama 3 RoPE scaling as llama.cpp stores it: one factor per rotated pair (head_dim / 2),
// dividing that pair's frequency.
std::vector<float> Llama3RopeFactors(const Llama3RopeScaling& scaling, double rope_theta, int64_t head_dim);

}  // namespace kvtier

#endif  // KVTIER_MODEL_GGUF_MODEL_H_
