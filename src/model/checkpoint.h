// Checkpoint: a model opened for reading, from either source kvtier reads: an HF model
// directory (config.json plus safetensors tensors memory-mapped, single file or sharded via
// model.safetensors.index.json) or a GGUF file (llama.cpp's format: hyperparameters in its
// metadata, tensors memory-mapped, some block-quantized). Either way the tensors carry HF's
// names and row order, so every consumer reads both alike.
// Immutable after Open; thread-safe for concurrent reads.
#ifndef KVTIER_MODEL_CHECKPOINT_H_
#define KVTIER_MODEL_CHECKPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/progress.h"
#include "model/config.h"
#include "model/generation_config.h"
#include "model/tensor.h"
#include "model/weight_quantization.h"

namespace kvtier {

class SafetensorsFile;  // model/safetensors.h
class ThreadPool;       // common/thread_pool.h
class GgufFile;         // model/gguf_file.h
struct Fp8Scales;       // model/fp8_weights.h

class Checkpoint {
 public:
  // NotFound: directory, config.json, the weights or a shard named by the index missing,
  // or a tensor the architecture needs absent (named). DataLoss: malformed safetensors
  // (header length past end of file, bad JSON, offsets out of range or overlapping, size
  // not matching dtype x shape) or an index entry whose shard lacks the tensor.
  // InvalidArgument / Unimplemented: from ParseModelConfig (message prefixed with the
  // config.json path). A needed tensor with the wrong shape: InvalidArgument naming the
  // tensor, its shape and the expected one; with a dtype other than F32/F16/BF16/F8_E4M3
  // (I64, F64, a dtype this reader does not know): Unimplemented naming tensor and dtype.
  // quantization_config: Unimplemented naming a method/format kvtier does not read
  // (weight_quantization.h); an F8_E4M3 tensor without an fp8 quantization_config is
  // FailedPrecondition, one whose scale tensor is missing NotFound, misshapen
  // InvalidArgument (fp8_weights.h), all naming the tensors.
  // generation_config.json, when present, is parsed too (InvalidArgument prefixed with its
  // path for a field of the wrong type).
  // A path that is a file is read as GGUF (gguf_file.h and gguf_model.h say what is
  // refused, and how). Its tensors take their HF names; the Q and K projections of a
  // `llama` model are reordered back to HF's rows (copies held by the checkpoint: the
  // other tensors stay in the mapping). A tensor of a GGUF type kvtier does not read is
  // an error only when the model needs it (Unimplemented naming tensor and type).
  // `progress` (may be empty) hears the stages "files" (files opened) and "tensors"
  // (tensors checked and fingerprinted); when it asks to stop, Open returns Cancelled.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& path,
                                                          const ProgressFn& progress = {});
  ~Checkpoint();

  const ModelConfig& config() const { return config_; }
  // The directory or GGUF file it was opened from.
  const std::string& path() const { return path_; }
  // The GGUF file behind this checkpoint (its metadata, its tensors' own names and types);
  // nullptr for a safetensors checkpoint.
  const GgufFile* gguf() const { return gguf_.get(); }
  // The sampling fields of generation_config.json, or of a GGUF file's metadata
  // (gguf_model.h GenerationConfigFromGguf); all absent when there are none.
  const GenerationConfig& generation_config() const { return generation_config_; }
  // How the linear weights are stored (kNone for a 16/32-bit checkpoint).
  const WeightQuantization& quantization() const { return quantization_; }
  bool has_generation_config() const { return has_generation_config_; }
  // NotFound naming the tensor when absent.
  absl::StatusOr<TensorView> Tensor(const std::string& name) const;
  bool Has(const std::string& name) const { return tensors_.contains(name); }
  std::vector<std::string> TensorNames() const;
  // The values of tensor `name` as fp32 into out (resized): F32/F16/BF16 widened, F8_E4M3
  // codes times their scales as the checkpoint's quantization lays them out, GGUF blocks
  // dequantized. NotFound naming the tensor when absent. With a pool, F8_E4M3 rows are
  // dequantized on its threads (the same values: each row is one thread's).
  absl::Status TensorAsFloat32(const std::string& name, std::vector<float>* out, ThreadPool* pool = nullptr) const;
  int64_t TotalTensorBytes() const;
  // The scales of an F8_E4M3 weight of this checkpoint (errors as ReadFp8Scales).
  absl::StatusOr<Fp8Scales> Fp8ScalesOf(const TensorView& weight) const;
  // A stable 64-bit fingerprint of config + tensor names/shapes/dtypes + sampled weight
  // bytes: distinguishes models for the persistent disk tier.
  uint64_t Fingerprint() const { return fingerprint_; }

 private:
  Checkpoint() = default;
  absl::Status OpenDirectory(const ProgressFn& progress);
  absl::Status OpenGguf(const ProgressFn& progress);  // gguf_checkpoint.cc
  // The tensors the architecture needs are present with the right shapes (`supported`
  // lists the dtypes the source format has that kvtier reads), fp8 scales are explained,
  // and the fingerprint is computed.
  absl::Status Validate(const std::string& supported, const ProgressFn& progress);

  std::string path_;
  ModelConfig config_;
  GenerationConfig generation_config_;
  WeightQuantization quantization_;
  bool has_generation_config_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unique_ptr<GgufFile> gguf_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;  // GGUF tensors reordered to HF rows
  absl::flat_hash_map<std::string, TensorView> tensors_;
  // Tensors present with a dtype kvtier does not read: name -> dtype name.
  absl::flat_hash_map<std::string, std::string> unsupported_;
  uint64_t fingerprint_ = 0;
};

// Tensor names the forward reads, in HF naming, with their expected shapes for a config:
// model.embed_tokens.weight [vocab, hidden]; per layer i model.layers.{i}.input_layernorm.weight
// [hidden], self_attn.{q,k,v,o}_proj.weight, {q,k,v}_proj.bias (attention_bias), self_attn.
// o_proj.bias [hidden] (attention_bias on Llama/Qwen3 only: HF's Qwen2 has no o_proj bias),
// self_attn.{q,k}_norm.weight [head_dim] (qk_norm), post_attention_layernorm.weight,
// mlp.{gate,up,down}_proj.weight; model.norm.weight; lm_head.weight [vocab, hidden] unless tied.
// Gemma adds {pre,post}_feedforward_layernorm.weight [hidden]; Phi-3 stores q/k/v as one
// self_attn.qkv_proj.weight [q_dim + 2 kv_dim, hidden] and gate/up as mlp.gate_up_proj.weight
// [2 intermediate, hidden]. A mixture-of-experts layer (ModelConfig::IsMoeLayer) has, in place
// of the MLP's projections, its router [num_experts, hidden] and each expert e's gate, up
// [expert_intermediate, hidden] and down [hidden, expert_intermediate] (ExpertNames).
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config);

// The HF names of a sparse layer's tensors, after "model.layers.{i}.": router, then
// experts + "{e}." + gate / up / down.
struct ExpertTensorNames {
  const char* router;
  const char* experts;
  const char* gate;
  const char* up;
  const char* down;
};
ExpertTensorNames ExpertNames(Architecture arch);

}  // namespace kvtier

#endif  // KVTIER_MODEL_CHECKPOINT_H_
