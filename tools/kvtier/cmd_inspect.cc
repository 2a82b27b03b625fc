// `kvtier inspect`: opens a checkpoint (directory or GGUF file) and prints its
// architecture, shapes, sizes, fingerprint, KV bytes per token, the request defaults of its
// generation_config.json and a GGUF file's metadata and tensor types (text or --json). Not thread-safe (CLI only).
#include <cinttypes>
#include <cstdio>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "command.h"
#include "command_line.h"
#include "engine/request_defaults.h"
#include "model/checkpoint.h"
#include "model/config_features.h"
#include "model/gguf_file.h"
#include "nlohmann/json.hpp"

namespace kvtier::cli {
namespace {

constexpr char kInspectDescription[] =
    "Opens an HF checkpoint directory or a GGUF file (validating config and every tensor)\n"
    "and prints its architecture, shapes, weight quantization, parameter count, stored weight\n"
    "bytes, fingerprint and KV-cache bytes per token, and the request defaults in force:\n"
    "generation_config.json's sampling fields as kvtier applies them to a request that does\n"
    "not set them. For a GGUF file also its metadata (long arrays shortened) and how many\n"
    "tensors of each type it holds; --json lists every tensor's type and shape as well.";

// A GGUF file's metadata, its tensor types counted, and (for --json) every tensor and
// strings in full (text shortens them to a line).
void DescribeGguf(const GgufFile& gguf, bool json, nlohmann::ordered_json* j) {
  constexpr size_t kTextWidth = 100;
  (*j)["format"] = absl::StrCat("GGUF version ", gguf.version());
  nlohmann::ordered_json metadata;
  for (const auto& [key, value] : gguf.metadata()) {
    if (json && value.AsString() != nullptr) {
      metadata[key] = *value.AsString();
      continue;
    }
    std::string text = value.Describe();
    if (!json && text.size() > kTextWidth) text = absl::StrCat(text.substr(0, kTextWidth), "... (", text.size(), " bytes)");
    metadata[key] = text;
  }
  (*j)["gguf_metadata"] = metadata;
  std::map<std::string, int64_t> counts;
  for (const GgufTensorInfo& t : gguf.tensors()) ++counts[std::string(t.type->name)];
  nlohmann::ordered_json types;
  for (const auto& [type, count] : counts) types[type] = count;
  (*j)["gguf_tensor_types"] = types;
  if (!json) return;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const GgufTensorInfo& t : gguf.tensors()) {
    list.push_back({{"name", t.name}, {"type", std::string(t.type->name)}, {"shape", t.Shape()}});
  }
  (*j)["gguf_tensors"] = list;
}

nlohmann::ordered_json Describe(const Checkpoint& ckpt, const RequestDefaults& defaults) {
  const ModelConfig& c = ckpt.config();
  // K and V, every layer, every kv head: bytes one token occupies in the cache.
  const int64_t kv_elements_per_token = c.num_layers * 2 * c.num_kv_heads * c.head_dim;
  nlohmann::ordered_json j;
  j["model"] = ckpt.path();
  j["architecture"] = std::string(ArchitectureName(c.architecture));
  j["hidden_size"] = c.hidden_size;
  j["num_layers"] = c.num_layers;
  j["num_heads"] = c.num_heads;
  j["num_kv_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["intermediate_size"] = c.intermediate_size;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  // As config.json writes it (null without scaling).
  j["rope_scaling"] = nlohmann::ordered_json::parse(ModelConfigToJson(c))["rope_scaling"];
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.attention_bias;
  j["qk_norm"] = c.qk_norm;
  j["sliding_window"] = c.sliding_window ? nlohmann::ordered_json(*c.sliding_window) : nlohmann::ordered_json();
  AddModelFeaturesJson(c, &j);
  j["torch_dtype"] = c.torch_dtype;
  j["quantization"] = ckpt.quantization().Describe();
  j["bos_token_id"] = c.bos_token_id ? nlohmann::ordered_json(*c.bos_token_id) : nlohmann::ordered_json();
  j["eos_token_ids"] = c.eos_token_ids;
  j["num_parameters"] = c.NumParameters();
  j["num_tensors"] = ckpt.TensorNames().size();
  j["weight_bytes"] = ckpt.TotalTensorBytes();
  j["fingerprint"] = absl::StrFormat("%016x", ckpt.Fingerprint());
  j["kv_bytes_per_token_fp32"] = kv_elements_per_token * 4;
  j["kv_bytes_per_token_bf16"] = kv_elements_per_token * 2;
  j["generation_defaults"] = RequestDefaultsJson(defaults, ckpt.generation_config());
  return j;
}

int InspectMain(int argc, char** argv) {
  CommandLine cl("inspect", kInspectDescription);
  std::string model;
  bool json = false;
  cl.AddString("--model", &model, "HF checkpoint directory or GGUF file", "DIR|FILE")->required();
  cl.AddSwitch("--json", &json, "print one JSON object");
  if (auto status = cl.Parse(argc, argv)) return *status;
  auto ckpt = Checkpoint::Open(model);
  if (!ckpt.ok()) return cl.Fail(kExitFailure, ckpt.status().message());
  // The same defaults kvt_model_load takes (and the same refusal of bad values).
  auto defaults = RequestDefaultsFrom((*ckpt)->generation_config());
  if (!defaults.ok()) return cl.Fail(kExitFailure, absl::StrCat(model, "/", defaults.status().message()));
  nlohmann::ordered_json j = Describe(**ckpt, *defaults);
  if ((*ckpt)->gguf() != nullptr) DescribeGguf(*(*ckpt)->gguf(), json, &j);
  if (json) {
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "gguf_metadata" || it.key() == "gguf_tensor_types") {  // one entry per line
      std::printf("%s\n", it.key().c_str());
      for (auto entry = it->begin(); entry != it->end(); ++entry) {
        const std::string value = entry->is_string() ? entry->get<std::string>() : entry->dump();
        std::printf("  %-40s %s\n", entry.key().c_str(), value.c_str());
      }
      continue;
    }
    std::string value = it->is_string() ? it->get<std::string>() : it->dump();
    std::printf("%-26s %s\n", it.key().c_str(), value.c_str());
  }
  return kExitOk;
}

}  // namespace

KVTIER_REGISTER_COMMAND("inspect", "describe a checkpoint (shapes, sizes, fingerprint)", InspectMain);

}  // namespace kvtier::cli
