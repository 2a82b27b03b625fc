// KvGrouping::Validate and ValidateGroupTables (kv_grouping.h).
#include "backend/kv_grouping.h"

#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace kvtier {

absl::StatusOr<int64_t> KvGrouping::Validate(std::span<const std::optional<int64_t>> layer_windows) const {
  const size_t layers = layer_windows.size();
  if (group_of_layer.size() != layers || index_in_group.size() != layers || group_window.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("KV grouping: ", group_of_layer.size(), " layer groups and ",
                                                   index_in_group.size(), " group indices for ", layers,
                                                   " layers, over ", group_window.size(), " groups"));
  }
  std::vector<std::vector<bool>> seen(group_window.size());
  const int64_t per_group = static_cast<int64_t>(layers / group_window.size());
  if (per_group * num_groups() != static_cast<int64_t>(layers)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV grouping: ", layers, " layers do not cut into ", num_groups(), " equal groups"));
  }
  for (size_t l = 0; l < layers; ++l) {
    const int64_t g = group_of_layer[l];
    const int64_t i = index_in_group[l];
    if (g < 0 || g >= num_groups() || i < 0 || i >= per_group) {
      return absl::InvalidArgumentError(absl::StrCat("KV grouping: layer ", l, " at group ", g, " index ", i));
    }
    std::vector<bool>& s = seen[static_cast<size_t>(g)];
    s.resize(static_cast<size_t>(per_group));
    if (s[static_cast<size_t>(i)]) {
      return absl::InvalidArgumentError(absl::StrCat("KV grouping: two layers at group ", g, " index ", i));
    }
    s[static_cast<size_t>(i)] = true;
    if (group_window[static_cast<size_t>(g)] != layer_windows[l]) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV grouping: layer ", l, "'s window differs from its group ", g, "'s"));
    }
  }
  return per_group;
}

absl::Status ValidateGroupTables(const KvGrouping& grouping, std::span<const GroupKvTable> tables,
                                 int64_t start_position, int64_t end_position, int64_t block_tokens,
                                 int64_t num_blocks, absl::flat_hash_set<int32_t>* written, const std::string& name) {
  if (static_cast<int64_t>(tables.size()) != grouping.num_groups()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", tables.size(), " group tables for ", grouping.num_groups(), " layer groups"));
  }
  const int64_t end_block = (end_position + block_tokens - 1) / block_tokens;
  for (size_t g = 0; g < tables.size(); ++g) {
    const GroupKvTable& t = tables[g];
    const std::optional<int64_t>& window = grouping.group_window[g];
    const int64_t first_read = window ? std::max<int64_t>(0, start_position - *window + 1) / block_tokens : 0;
    const HostResidentKv& host = t.host;
    const int64_t table_end = t.first_block + host.num_blocks() + static_cast<int64_t>(t.blocks.size());
    if (t.first_block < 0 || t.first_block > first_read || table_end < end_block) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": group ", g, " table covers blocks [", t.first_block,
                                                     ", ", table_end, "), positions ", start_position, "..",
                                                     end_position, " read from block ", first_read, " to ",
                                                     end_block));
    }
    if (!host.empty()) {
      // Host blocks are read only, and full: the chunk writes after all of them.
      const int64_t host_end = t.first_block + host.first_block + host.num_blocks();
      if (host.first_block < 0 || host_end * block_tokens > start_position) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": group ", g, " host-resident blocks are not all before ",
                                                       "the chunk's first position ", start_position));
      }
      for (const void* data : host.blocks) {
        if (data == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, ": group ", g, " null host block"));
      }
    }
    for (int64_t j = t.first_block; j < end_block; ++j) {
      if (host.Contains(j - t.first_block)) continue;
      const int32_t b = t.blocks[static_cast<size_t>(host.DeviceIndex(j - t.first_block))];
      if (b < 0 || b >= num_blocks) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": group ", g, " block ", b, " out of range [0, ", num_blocks, ")"));
      }
      if (j >= start_position / block_tokens && !written->insert(b).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": group ", g, " block ", b, " is written twice in one batch"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier
