// `kvtier inspect`: opens a checkpoint and prints its architecture, shapes, sizes,
// fingerprint and KV bytes per token (text or --json). Not thread-safe (CLI only).
#include <cinttypes>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "args.h"
#include "command.h"
#include "engine/request_defaults.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"

namespace kvtier::cli {
namespace {

void PrintHelp() {
  std::printf(
      "usage: kvtier inspect --model DIR [--json]\n\n"
      "Opens an HF checkpoint directory (validating config and every tensor) and prints\n"
      "its architecture, shapes, parameter count, stored weight bytes, fingerprint and\n"
      "KV-cache bytes per token, and the request defaults in force: generation_config.json's\n"
      "sampling fields as kvtier applies them to a request that does not set them.\n");
}

nlohmann::ordered_json Describe(const Checkpoint& ckpt, const RequestDefaults& defaults) {
  const ModelConfig& c = ckpt.config();
  // K and V, every layer, every kv head: bytes one token occupies in the cache.
  const int64_t kv_elements_per_token = c.num_layers * 2 * c.num_kv_heads * c.head_dim;
  nlohmann::ordered_json j;
  j["model"] = ckpt.directory();
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
  if (c.rope_scaling) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling->factor},
                         {"low_freq_factor", c.rope_scaling->low_freq_factor},
                         {"high_freq_factor", c.rope_scaling->high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling->original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.attention_bias;
  j["qk_norm"] = c.qk_norm;
  j["sliding_window"] = c.sliding_window ? nlohmann::ordered_json(*c.sliding_window) : nlohmann::ordered_json();
  j["torch_dtype"] = c.torch_dtype;
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
  auto args = Args::Parse(argc, argv, {"model"}, {"help", "json"});
  if (!args.ok()) {
    std::fprintf(stderr, "kvtier inspect: %s\n", std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->Has("help")) {
    PrintHelp();
    return 0;
  }
  std::optional<std::string> model = args->Get("model");
  if (!model && args->positional().size() == 1) model = args->positional()[0];
  if (!model) {
    std::fprintf(stderr, "kvtier inspect: --model DIR is required (see --help)\n");
    return 2;
  }
  auto ckpt = Checkpoint::Open(*model);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "kvtier inspect: %s\n", std::string(ckpt.status().message()).c_str());
    return 1;
  }
  // The same defaults kvt_model_load takes (and the same refusal of bad values).
  auto defaults = RequestDefaultsFrom((*ckpt)->generation_config());
  if (!defaults.ok()) {
    std::fprintf(stderr, "kvtier inspect: %s/%s\n", model->c_str(), std::string(defaults.status().message()).c_str());
    return 1;
  }
  nlohmann::ordered_json j = Describe(**ckpt, *defaults);
  if (args->GetOr("json", "false") != "false") {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string value = it->is_string() ? it->get<std::string>() : it->dump();
    std::printf("%-26s %s\n", it.key().c_str(), value.c_str());
  }
  return 0;
}

}  // namespace

KVTIER_REGISTER_COMMAND("inspect", "describe a checkpoint (shapes, sizes, fingerprint)", InspectMain);

}  // namespace kvtier::cli
