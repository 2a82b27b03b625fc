// ChooseKvLayerGroups: whether a context keeps its KV in layer groups, so that the blocks
// that left a sliding window are given back (kv/kv_layer_groups.h, docs/ARCHITECTURE.md
// "Layer groups"). Grouping needs a model with windowed layers and one rank: the CPU and
// CUDA backends (and so "auto") read the grouped layout; the sharded plans (tensor_parallel
// above 1, sharded_reduction) keep one group of every layer, the layout every other context
// has. Every tier carries groups: a swap to the host or disk
// tier moves the blocks each group still holds (KvCacheManager::SwapOut); the prefix cache
// keeps group entries on the device tier, evicts them to the host and disk tiers and puts
// them to the remote tier, each under its group's key (kv_cache_grouped_prefix.cc); load
// plans split a grouped prefix (kv_cache_grouped_load_plan.cc); a pinned prefix pins every
// group's entries; a sequence longer than the device tier runs with its full-attention
// groups' oldest blocks resident on the host tier (KvCacheManager::MoveOldBlocksToHost),
// which the CPU backend reads; the CUDA backend does not read host-resident blocks in a
// group (ReadsHostResidentKv is false), so there a grouped context runs only sequences that
// fit its device tier, refusing longer ones at Add (ResourceExhausted).
// On by default (EngineOptions::kv_layer_groups): where it cannot group, the context is
// exactly one without groups, the reason logged at Info.
#ifndef KVTIER_ENGINE_KV_LAYER_GROUPS_CHOICE_H_
#define KVTIER_ENGINE_KV_LAYER_GROUPS_CHOICE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/engine_options.h"
#include "kv/kv_layer_groups.h"
#include "model/config.h"

namespace kvtier {

struct KvLayerGroupsChoice {
  // Set: the groups the backend and the KV manager use; unset: one group of every layer.
  std::optional<KvLayerGroups> groups;
  // Why there is one group although options.kv_layer_groups asked for groups and the model
  // has windowed layers ("" otherwise): logged, so the missed saving is visible.
  std::string why_one_group;
};

// The groups for `config` under `options`; the error of KvLayerGroups::Create when the
// model's windows are invalid.
absl::StatusOr<KvLayerGroupsChoice> ChooseKvLayerGroups(const EngineOptions& options, const ModelConfig& config);

}  // namespace kvtier

#endif  // KVTIER_ENGINE_KV_LAYER_GROUPS_CHOICE_H_
