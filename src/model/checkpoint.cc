// Checkpoint::Open: a directory's config.json + safetensors (single or sharded), shape
// checks and fingerprint (checkpoint.h; GGUF files: gguf_checkpoint.cc). Immutable after
// Open; thread-safe reads.
#include "model/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "model/fp8_weights.h"
#include "model/gguf_file.h"
#include "model/safetensors.h"
#include "model/stable_hash.h"
#include "nlohmann/json.hpp"

namespace kvtier {
namespace {

constexpr size_t kFingerprintSampleBytes = 4096;

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, " not found"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return buffer.str();
}

// Same code, message prefixed with where it happened.
absl::Status Annotate(const absl::Status& status, const std::string& where) {
  return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
}

// weight_map of model.safetensors.index.json -> {tensor: shard file name}.
absl::StatusOr<std::map<std::string, std::string>> ReadIndex(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::DataLossError(absl::StrCat(path, " is not a valid JSON object"));
  }
  auto map = json.find("weight_map");
  if (map == json.end() || !map->is_object()) {
    return absl::DataLossError(absl::StrCat(path, " has no 'weight_map' object"));
  }
  std::map<std::string, std::string> out;
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it->is_string()) {
      return absl::DataLossError(absl::StrCat(path, ": weight_map entry '", it.key(), "' is not a file name"));
    }
    std::string shard = it->get<std::string>();
    // Shards live in the model directory; refuse paths that would escape it.
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      return absl::DataLossError(
          absl::StrCat(path, ": weight_map entry '", it.key(), "' names an invalid shard '", shard, "'"));
    }
    out[it.key()] = std::move(shard);
  }
  return out;
}

uint64_t HashConfig(const ModelConfig& c, uint64_t h) {
  // Fixed field order and formatting: independent of how config.json was written.
  std::string canonical = absl::StrCat(
      std::string(ArchitectureName(c.architecture)), "|", c.hidden_size, "|", c.num_layers, "|", c.num_heads, "|",
      c.num_kv_heads, "|", c.head_dim, "|", c.intermediate_size, "|", c.vocab_size, "|",
      c.max_position_embeddings, "|", c.rms_norm_eps, "|", c.rope_theta, "|", int{c.tie_word_embeddings}, "|",
      int{c.attention_bias}, "|", int{c.qk_norm}, "|", c.sliding_window.value_or(0));
  if (c.rope_scaling) {
    absl::StrAppend(&canonical, "|llama3|", c.rope_scaling->factor, "|", c.rope_scaling->low_freq_factor, "|",
                    c.rope_scaling->high_freq_factor, "|", c.rope_scaling->original_max_position_embeddings);
  }
  // The family fields, only when a family sets them (the Llama family's hash is unchanged).
  if (!c.sliding_layers.empty()) {
    absl::StrAppend(&canonical, "|layers|");
    for (bool sliding : c.sliding_layers) absl::StrAppend(&canonical, int{sliding});
  }
  if (c.activation != Activation::kSilu || c.gemma.norm_plus_one || c.gemma.sandwich_norms || c.gemma.scale_embeddings ||
      c.fused_projections) {
    absl::StrAppend(&canonical, "|family|", static_cast<int>(c.activation), int{c.gemma.norm_plus_one},
                    int{c.gemma.sandwich_norms}, int{c.gemma.scale_embeddings}, int{c.fused_projections});
  }
  if (c.moe.num_experts > 0) {
    absl::StrAppend(&canonical, "|moe|", c.moe.num_experts, "|", c.moe.top_k, "|", c.moe.expert_intermediate_size, "|",
                    int{c.moe.norm_topk_prob}, "|");
    for (bool sparse : c.moe.sparse_layers) absl::StrAppend(&canonical, int{sparse});
  }
  const std::pair<const char*, std::optional<double>> scalars[] = {{"qs", c.query_pre_attn_scalar},
                                                                    {"ac", c.attn_logit_softcap},
                                                                    {"fc", c.final_logit_softcap},
                                                                    {"lt", c.gemma3_rope.local_theta}};
  if (c.gemma3_rope.linear_factor != 1.0) absl::StrAppend(&canonical, "|linear", c.gemma3_rope.linear_factor);
  for (const auto& [key, v] : scalars) {
    if (v) absl::StrAppend(&canonical, "|", key, *v);
  }
  if (c.long_rope) {
    absl::StrAppend(&canonical, "|longrope|", c.long_rope->original_max_position_embeddings, "|",
                    c.long_rope->attention_factor, "|", absl::StrJoin(c.long_rope->short_factor, ","), "|",
                    absl::StrJoin(c.long_rope->long_factor, ","));
  }
  return Fnv1a64(canonical, h);
}

}  // namespace

Checkpoint::~Checkpoint() = default;

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& path, const ProgressFn& progress) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->path_ = path;
  if (IsDirectory(path)) {
    RETURN_IF_ERROR(ckpt->OpenDirectory(progress));
  } else if (IsFile(path)) {
    RETURN_IF_ERROR(ckpt->OpenGguf(progress));
  } else {
    return absl::NotFoundError(
        absl::StrCat("model ", path, " does not exist (give a checkpoint directory or a .gguf file)"));
  }
  return ckpt;
}

absl::Status Checkpoint::OpenDirectory(const ProgressFn& progress) {
  const std::string& directory = path_;
  const std::string config_path = directory + "/config.json";
  if (!IsFile(config_path)) return absl::NotFoundError(absl::StrCat(config_path, " not found"));
  ASSIGN_OR_RETURN(std::string config_text, ReadFile(config_path));
  absl::StatusOr<ModelConfig> config = ParseModelConfig(config_text);
  if (!config.ok()) return Annotate(config.status(), config_path);
  config_ = *std::move(config);
  absl::StatusOr<WeightQuantization> quantization = ParseWeightQuantization(config_text);
  if (!quantization.ok()) return Annotate(quantization.status(), config_path);
  quantization_ = *std::move(quantization);
  const std::string generation_path = directory + "/generation_config.json";
  if (IsFile(generation_path)) {
    ASSIGN_OR_RETURN(std::string generation_text, ReadFile(generation_path));
    absl::StatusOr<GenerationConfig> generation = ParseGenerationConfig(generation_text);
    if (!generation.ok()) return Annotate(generation.status(), generation_path);
    generation_config_ = *std::move(generation);
    has_generation_config_ = true;
  }

  // Open the safetensors files; `expected_in` says which file the index puts each tensor in.
  std::map<std::string, std::string> expected_in;
  const std::string index_path = directory + "/model.safetensors.index.json";
  const std::string single_path = directory + "/model.safetensors";
  std::vector<std::string> files;
  if (IsFile(index_path)) {
    ASSIGN_OR_RETURN(expected_in, ReadIndex(index_path));
    std::set<std::string> shards;
    for (const auto& [name, shard] : expected_in) shards.insert(shard);
    for (const std::string& shard : shards) {
      const std::string file = directory + "/" + shard;
      if (!IsFile(file)) {
        return absl::NotFoundError(absl::StrCat("shard ", shard, " named by ", index_path, " not found"));
      }
      files.push_back(file);
    }
  } else if (IsFile(single_path)) {
    files.push_back(single_path);
  } else {
    return absl::NotFoundError(
        absl::StrCat("no model.safetensors or model.safetensors.index.json in ", directory));
  }

  ProgressStage opening(progress, "files", static_cast<int64_t>(files.size()));
  RETURN_IF_ERROR(opening.Begin());
  for (const std::string& file_path : files) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(file_path));
    RETURN_IF_ERROR(opening.Add(1));
    for (const TensorView& t : file->tensors()) {
      if (!tensors_.emplace(t.name, t).second) {
        return absl::DataLossError(
            absl::StrCat("tensor '", t.name, "' appears in more than one file (again in ", file_path, ")"));
      }
    }
    for (const auto& t : file->unsupported_tensors()) unsupported_[t.name] = t.dtype;
    files_.push_back(std::move(file));
  }
  RETURN_IF_ERROR(opening.End());
  for (const auto& [name, shard] : expected_in) {
    if (!tensors_.contains(name) && !unsupported_.contains(name)) {
      return absl::DataLossError(absl::StrCat("tensor '", name, "' is listed in ", index_path, " under ", shard,
                                              " but that shard does not contain it"));
    }
  }
  return Validate("F32, F16, BF16, F8_E4M3", progress);
}

absl::Status Checkpoint::Validate(const std::string& supported, const ProgressFn& progress) {
  const std::string arch(ArchitectureName(config_.architecture));
  for (const ExpectedTensor& want : ExpectedTensors(config_)) {
    auto it = tensors_.find(want.name);
    if (it == tensors_.end()) {
      if (auto u = unsupported_.find(want.name); u != unsupported_.end()) {
        return absl::UnimplementedError(absl::StrCat("tensor '", want.name, "' has dtype ", u->second,
                                                     " (supported: ", supported, ") in ", path_));
      }
      return absl::NotFoundError(
          absl::StrCat("tensor '", want.name, "' required by ", arch, " is missing from ", path_));
    }
    if (it->second.shape != want.shape) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", want.name, "' has shape ", ShapeString(it->second.shape),
                                                     ", expected ", ShapeString(want.shape), " for this ", arch,
                                                     " config (", path_, ")"));
    }
  }

  // Every fp8 tensor must come with scales the quantization_config explains.
  for (const auto& [name, tensor] : tensors_) {
    if (tensor.dtype != DType::kF8E4M3) continue;
    absl::Status scales = Fp8ScalesOf(tensor).status();
    if (!scales.ok()) return Annotate(scales, path_);
  }

  // Fingerprint: config, then every tensor's name/dtype/shape and sampled bytes, by name.
  // Reading the sampled bytes is what touches the disk (the weights are only mapped).
  uint64_t h = HashConfig(config_, kFnv64Offset);
  const std::vector<std::string> names = TensorNames();
  ProgressStage checking(progress, "tensors", static_cast<int64_t>(names.size()));
  RETURN_IF_ERROR(checking.Begin());
  for (const std::string& name : names) {
    const TensorView& t = tensors_.at(name);
    h = Fnv1a64(absl::StrCat(name, "|", std::string(DTypeName(t.dtype)), "|", ShapeString(t.shape), "|"), h);
    const size_t n = t.nbytes();
    const size_t head = std::min(n, kFingerprintSampleBytes);
    h = Fnv1a64(t.data, head, h);
    if (n > head) {
      const size_t tail = std::min(n - head, kFingerprintSampleBytes);
      h = Fnv1a64(t.data + n - tail, tail, h);
    }
    RETURN_IF_ERROR(checking.Add(1));
  }
  RETURN_IF_ERROR(checking.End());
  fingerprint_ = h;
  return absl::OkStatus();
}

absl::StatusOr<TensorView> Checkpoint::Tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' not found in ", path_));
  }
  return it->second;
}

absl::StatusOr<Fp8Scales> Checkpoint::Fp8ScalesOf(const TensorView& weight) const {
  const std::string scale_name = quantization_.ScaleTensorName(weight.name);
  auto scale = tensors_.find(scale_name);
  return ReadFp8Scales(quantization_, weight, scale == tensors_.end() ? nullptr : &scale->second, scale_name);
}

absl::Status Checkpoint::TensorAsFloat32(const std::string& name, std::vector<float>* out, ThreadPool* pool) const {
  ASSIGN_OR_RETURN(TensorView tensor, Tensor(name));
  if (tensor.dtype != DType::kF8E4M3) {
    ToFloat32(tensor, out);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Fp8Scales scales, Fp8ScalesOf(tensor));
  out->resize(static_cast<size_t>(tensor.num_elements()));
  if (pool == nullptr) {
    DequantizeFp8(tensor, scales, out->data());
  } else {
    pool->ParallelFor(scales.rows, [&](int64_t begin, int64_t end) {
      DequantizeFp8Rows(tensor, scales, begin, end, out->data());
    });
  }
  return absl::OkStatus();
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, view] : tensors_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

int64_t Checkpoint::TotalTensorBytes() const {
  int64_t total = 0;
  for (const auto& [name, view] : tensors_) total += static_cast<int64_t>(view.nbytes());
  return total;
}

}  // namespace kvtier
