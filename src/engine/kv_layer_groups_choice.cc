// ChooseKvLayerGroups (kv_layer_groups_choice.h).
#include "engine/kv_layer_groups_choice.h"

#include <string>
#include <vector>

#include "common/status_macros.h"

namespace kvtier {
namespace {

// What keeps one group for these options ("" when nothing does). The CPU and CUDA
// backends read a grouped layout on one rank, so "auto" groups whichever it picks.
std::string OneGroupReason(const EngineOptions& options) {
  if (options.tensor_parallel > 1 || options.sharded_reduction) {
    return "the sharded plan reads one group (tensor_parallel " + std::to_string(options.tensor_parallel) +
           (options.sharded_reduction ? ", sharded_reduction" : "") + ")";
  }
  return "";
}

}  // namespace

absl::StatusOr<KvLayerGroupsChoice> ChooseKvLayerGroups(const EngineOptions& options, const ModelConfig& config) {
  KvLayerGroupsChoice choice;
  if (!options.kv_layer_groups) return choice;
  std::vector<std::optional<int64_t>> windows;
  bool windowed = false;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    windows.push_back(config.LayerWindow(l));
    windowed = windowed || windows.back().has_value();
  }
  if (!windowed) return choice;
  choice.why_one_group = OneGroupReason(options);
  if (!choice.why_one_group.empty()) return choice;
  ASSIGN_OR_RETURN(KvLayerGroups groups, KvLayerGroups::Create(windows, options.block_tokens, /*grouped=*/true));
  choice.groups.emplace(std::move(groups));
  return choice;
}

}  // namespace kvtier
