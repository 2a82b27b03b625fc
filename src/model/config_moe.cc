// Mixtral and Qwen3-MoE config.json fields (config_moe.h). Stateless; thread-safe.
#include "model/config_moe.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/config_json.h"

namespace kvtier {
namespace {

using Json = nlohmann::json;
using config_json::OptionalBool;
using config_json::OptionalInt;

// A count that must be positive when given; absent reads as `fallback`.
absl::StatusOr<int64_t> PositiveInt(const Json& obj, const char* field, int64_t fallback) {
  ASSIGN_OR_RETURN(std::optional<int64_t> value, OptionalInt(obj, field));
  if (value && *value <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' must be positive, got ", *value));
  }
  return value.value_or(fallback);
}

// Qwen3MoeDecoderLayer: a layer is sparse unless listed in mlp_only_layers, and then only
// every decoder_sparse_step-th one (counting from 1).
absl::Status ParseQwen3MoeLayers(const Json& obj, ModelConfig* c) {
  ASSIGN_OR_RETURN(int64_t step, PositiveInt(obj, "decoder_sparse_step", 1));
  std::vector<bool> dense_only(static_cast<size_t>(c->num_layers), false);
  auto it = obj.find("mlp_only_layers");
  if (it != obj.end() && !it->is_null()) {
    if (!it->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field 'mlp_only_layers' must be a list of layer indices, got ", it->dump()));
    }
    for (const Json& layer : *it) {
      if (!layer.is_number_integer() || layer.get<int64_t>() < 0 || layer.get<int64_t>() >= c->num_layers) {
        return absl::InvalidArgumentError(absl::StrCat("config field 'mlp_only_layers' entry ", layer.dump(),
                                                       " is not a layer index in [0, ", c->num_layers, ")"));
      }
      dense_only[static_cast<size_t>(layer.get<int64_t>())] = true;
    }
  }
  for (int64_t i = 0; i < c->num_layers; ++i) {
    c->moe.sparse_layers[static_cast<size_t>(i)] = !dense_only[static_cast<size_t>(i)] && (i + 1) % step == 0;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseMoeFields(const Json& obj, ModelConfig* c) {
  auto act = obj.find("hidden_act");
  if (act != obj.end() && !act->is_null() && *act != "silu" && *act != "swish") {
    return absl::UnimplementedError(
        absl::StrCat("unsupported activation ", act->dump(), " for the experts (kvtier runs silu)"));
  }
  MoeConfig& moe = c->moe;
  const bool mixtral = c->architecture == Architecture::kMixtral;
  const char* count_field = mixtral ? "num_local_experts" : "num_experts";
  // MixtralConfig: 8 experts, top 2; Qwen3MoeConfig: 128, top 8, no renormalization.
  ASSIGN_OR_RETURN(std::optional<int64_t> count, OptionalInt(obj, count_field));
  moe.num_experts = count.value_or(mixtral ? 8 : 128);
  if (moe.num_experts < 0 || (mixtral && moe.num_experts == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field '", count_field, "' must be positive, got ", moe.num_experts));
  }
  moe.sparse_layers.assign(static_cast<size_t>(c->num_layers), moe.num_experts > 0);
  if (moe.num_experts == 0) {  // Qwen3-MoE with no experts: every layer dense
    moe = MoeConfig();
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(moe.top_k, PositiveInt(obj, "num_experts_per_tok", mixtral ? 2 : 8));
  if (moe.top_k > moe.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat("config field 'num_experts_per_tok' (", moe.top_k,
                                                   ") exceeds the number of experts '", count_field, "' (",
                                                   moe.num_experts, ")"));
  }
  if (mixtral) {
    moe.expert_intermediate_size = c->intermediate_size;
    moe.norm_topk_prob = true;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(moe.expert_intermediate_size, PositiveInt(obj, "moe_intermediate_size", 768));
  ASSIGN_OR_RETURN(std::optional<bool> norm, OptionalBool(obj, "norm_topk_prob"));
  moe.norm_topk_prob = norm.value_or(false);
  return ParseQwen3MoeLayers(obj, c);
}

void AddMoeFieldsToJson(const ModelConfig& c, nlohmann::ordered_json* json) {
  nlohmann::ordered_json& j = *json;
  const MoeConfig& moe = c.moe;
  j["num_experts_per_tok"] = moe.top_k;
  j["output_router_logits"] = false;
  j["router_aux_loss_coef"] = 0.001;
  if (c.architecture == Architecture::kMixtral) {
    j["num_local_experts"] = moe.num_experts;
    j["router_jitter_noise"] = 0.0;
    return;
  }
  j["num_experts"] = moe.num_experts;
  j["moe_intermediate_size"] = moe.expert_intermediate_size;
  j["norm_topk_prob"] = moe.norm_topk_prob;
  // Every layer sparse is decoder_sparse_step 1; the dense ones are listed.
  j["decoder_sparse_step"] = 1;
  nlohmann::ordered_json dense = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < static_cast<int64_t>(moe.sparse_layers.size()); ++i) {
    if (!moe.sparse_layers[static_cast<size_t>(i)]) dense.push_back(i);
  }
  j["mlp_only_layers"] = dense;
}

}  // namespace kvtier
