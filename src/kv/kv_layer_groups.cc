// KvLayerGroups (kv_layer_groups.h).
#include "kv/kv_layer_groups.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvtier {

absl::StatusOr<KvLayerGroups> KvLayerGroups::Create(std::span<const std::optional<int64_t>> layer_windows,
                                                    int64_t block_tokens, bool grouped) {
  if (layer_windows.empty()) return absl::InvalidArgumentError("KV layer groups: the model has no layers");
  if (block_tokens < 1) return absl::InvalidArgumentError(absl::StrCat("KV layer groups: block_tokens ", block_tokens));
  std::vector<int64_t> full;
  std::map<int64_t, std::vector<int64_t>> by_window;  // ascending windows
  for (size_t l = 0; l < layer_windows.size(); ++l) {
    const std::optional<int64_t>& w = layer_windows[l];
    if (w.has_value() && *w < 1) {
      return absl::InvalidArgumentError(absl::StrCat("KV layer groups: layer ", l, " has window ", *w));
    }
    if (grouped && w.has_value()) {
      by_window[*w].push_back(static_cast<int64_t>(l));
    } else {
      full.push_back(static_cast<int64_t>(l));
    }
  }
  int64_t per_group = static_cast<int64_t>(full.size());
  for (const auto& [window, layers] : by_window) per_group = std::gcd(per_group, static_cast<int64_t>(layers.size()));
  KvLayerGroups out;
  out.block_tokens_ = block_tokens;
  auto add_runs = [&](const std::vector<int64_t>& layers, std::optional<int64_t> window) {
    for (size_t i = 0; i < layers.size(); i += static_cast<size_t>(per_group)) {
      out.groups_.push_back(KvLayerGroup{
          std::vector<int64_t>(layers.begin() + static_cast<std::ptrdiff_t>(i),
                               layers.begin() + static_cast<std::ptrdiff_t>(i) + per_group),
          window});
    }
  };
  add_runs(full, std::nullopt);
  for (const auto& [window, layers] : by_window) add_runs(layers, window);
  out.group_of_layer_.assign(layer_windows.size(), 0);
  out.index_in_group_.assign(layer_windows.size(), 0);
  for (size_t g = 0; g < out.groups_.size(); ++g) {
    const std::vector<int64_t>& layers = out.groups_[g].layers;
    for (size_t i = 0; i < layers.size(); ++i) {
      out.group_of_layer_[static_cast<size_t>(layers[i])] = static_cast<int64_t>(g);
      out.index_in_group_[static_cast<size_t>(layers[i])] = static_cast<int64_t>(i);
    }
  }
  return out;
}

int64_t KvLayerGroups::FirstLiveBlock(int64_t g, int64_t next_position) const {
  const std::optional<int64_t>& window = group(g).window;
  if (!window.has_value()) return 0;
  return std::max<int64_t>(0, next_position - *window + 1) / block_tokens_;
}

int64_t KvLayerGroups::BlocksHeld(int64_t g, int64_t num_computed, int64_t num_tokens) const {
  return std::max<int64_t>(0, BlocksForTokens(num_tokens) - FirstLiveBlock(g, num_computed));
}

int64_t KvLayerGroups::ComputedBlocksHeld(int64_t num_computed) const {
  int64_t total = 0;
  for (int64_t g = 0; g < num_groups(); ++g) total += BlocksHeld(g, num_computed, num_computed);
  return total;
}

int64_t KvLayerGroups::PeakBlocks(int64_t g, int64_t num_tokens, int64_t chunk_tokens) const {
  const int64_t all = BlocksForTokens(num_tokens);
  const std::optional<int64_t>& window = group(g).window;
  if (!window.has_value()) return all;
  // A step computing [p, p + c) holds positions [p - W + 1, p + c): W - 1 + c positions,
  // over at most floor((W + c - 2) / B) + 2 blocks.
  const int64_t span = *window - 1 + std::max<int64_t>(chunk_tokens, 1);
  return std::min(all, (span - 1) / block_tokens_ + 2);
}

int64_t KvLayerGroups::SequencePeakBlocks(int64_t num_tokens, int64_t chunk_tokens) const {
  int64_t total = 0;
  for (int64_t g = 0; g < num_groups(); ++g) total += PeakBlocks(g, num_tokens, chunk_tokens);
  return total;
}

int64_t KvLayerGroups::UsablePrefixBlocks(int64_t matched,
                                          const std::function<bool(int64_t g, int64_t block)>& held) const {
  for (int64_t n = matched; n > 0; --n) {
    bool whole = true;
    for (int64_t g = 0; g < num_groups() && whole; ++g) {
      for (int64_t b = FirstLiveBlock(g, n * block_tokens_); b < n && whole; ++b) whole = held(g, b);
    }
    if (whole) return n;
  }
  return 0;
}

KvGrouping BackendGrouping(const KvLayerGroups& groups) {
  KvGrouping out;
  if (groups.num_groups() == 1 && !groups.group(0).window.has_value()) return out;
  out.group_of_layer.resize(static_cast<size_t>(groups.num_layers()));
  out.index_in_group.resize(static_cast<size_t>(groups.num_layers()));
  for (int64_t l = 0; l < groups.num_layers(); ++l) {
    out.group_of_layer[static_cast<size_t>(l)] = groups.GroupOfLayer(l);
    out.index_in_group[static_cast<size_t>(l)] = groups.IndexInGroup(l);
  }
  for (int64_t g = 0; g < groups.num_groups(); ++g) out.group_window.push_back(groups.group(g).window);
  return out;
}

}  // namespace kvtier
