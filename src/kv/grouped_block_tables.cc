// GroupedBlockTables and SplitLayerBlockBudget (grouped_block_tables.h).
#include "kv/grouped_block_tables.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvtier {
namespace {

const GroupBlockTable kNoTable;

int64_t TableEnd(const GroupBlockTable& t) { return t.first_block + static_cast<int64_t>(t.blocks.size()); }

}  // namespace

std::vector<int64_t> SplitLayerBlockBudget(const KvLayerGroups& groups, int64_t layer_blocks, int64_t num_tokens,
                                           int64_t chunk_tokens) {
  std::vector<int64_t> peak(static_cast<size_t>(groups.num_groups()));
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    peak[static_cast<size_t>(g)] = std::max<int64_t>(1, groups.PeakBlocks(g, num_tokens, chunk_tokens));
  }
  // Whole sequences first (each group gets its peak per sequence), then the layer-blocks
  // left go to the groups in order, a block each while they last.
  const int64_t per_sequence = std::max<int64_t>(1, groups.LayerBlocks(peak));
  const int64_t sequences = std::max<int64_t>(0, layer_blocks) / per_sequence;
  std::vector<int64_t> out(peak.size());
  int64_t left = std::max<int64_t>(0, layer_blocks) - sequences * per_sequence;
  for (size_t g = 0; g < out.size(); ++g) out[g] = sequences * peak[g];
  for (size_t g = 0; g < out.size(); ++g) {
    const int64_t layers = groups.GroupLayers(static_cast<int64_t>(g));
    const int64_t extra = left / layers / static_cast<int64_t>(out.size() - g);
    out[g] += extra;
    left -= extra * layers;
  }
  return out;
}

GroupedBlockTables::GroupedBlockTables(KvLayerGroups groups, std::span<const int64_t> blocks_per_group)
    : groups_(std::move(groups)) {
  pools_.reserve(blocks_per_group.size());
  for (int64_t n : blocks_per_group) pools_.emplace_back(n);
}

absl::StatusOr<GroupedBlockTables> GroupedBlockTables::Create(KvLayerGroups groups,
                                                              std::span<const int64_t> blocks_per_group) {
  if (static_cast<int64_t>(blocks_per_group.size()) != groups.num_groups()) {
    return absl::InvalidArgumentError(absl::StrCat("grouped block tables: ", blocks_per_group.size(),
                                                   " pool sizes for ", groups.num_groups(), " layer groups"));
  }
  for (size_t g = 0; g < blocks_per_group.size(); ++g) {
    if (blocks_per_group[g] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("grouped block tables: group ", g, " pool of ", blocks_per_group[g], " blocks"));
    }
  }
  return GroupedBlockTables(std::move(groups), blocks_per_group);
}

std::vector<int64_t> GroupedBlockTables::NewBlocksNeeded(SequenceId seq, int64_t num_tokens) const {
  const int64_t end = groups_.BlocksForTokens(num_tokens);
  std::vector<int64_t> need(pools_.size());
  auto it = sequences_.find(seq);
  for (int64_t g = 0; g < groups_.num_groups(); ++g) {
    const int64_t have_end = it == sequences_.end() ? 0 : TableEnd(it->second.tables[static_cast<size_t>(g)]);
    need[static_cast<size_t>(g)] = std::max<int64_t>(0, end - have_end);
  }
  return need;
}

bool GroupedBlockTables::CanReserve(SequenceId seq, int64_t num_tokens) const {
  const std::vector<int64_t> need = NewBlocksNeeded(seq, num_tokens);
  for (size_t g = 0; g < need.size(); ++g) {
    if (need[g] > pools_[g].num_free()) return false;
  }
  return true;
}

absl::Status GroupedBlockTables::Reserve(SequenceId seq, int64_t num_tokens) {
  const std::vector<int64_t> need = NewBlocksNeeded(seq, num_tokens);
  for (size_t g = 0; g < need.size(); ++g) {
    if (need[g] > pools_[g].num_free()) {
      return absl::ResourceExhaustedError(absl::StrCat("layer group ", g, " needs ", need[g], " blocks for sequence ",
                                                       seq, ", ", pools_[g].num_free(), " free"));
    }
  }
  SequenceTables& s = sequences_[seq];
  if (s.tables.empty()) s.tables.resize(pools_.size());
  for (size_t g = 0; g < need.size(); ++g) {
    for (int64_t i = 0; i < need[g]; ++i) s.tables[g].blocks.push_back(*pools_[g].Allocate());
  }
  return absl::OkStatus();
}

int64_t GroupedBlockTables::OnComputed(SequenceId seq, int64_t num_computed) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return 0;
  SequenceTables& s = it->second;
  s.num_computed = std::max(s.num_computed, num_computed);
  int64_t dropped = 0;
  for (int64_t g = 0; g < groups_.num_groups(); ++g) {
    GroupBlockTable& t = s.tables[static_cast<size_t>(g)];
    const int64_t live = std::min(groups_.FirstLiveBlock(g, s.num_computed), TableEnd(t));
    const int64_t n = live - t.first_block;
    if (n <= 0) continue;
    for (int64_t i = 0; i < n; ++i) pools_[static_cast<size_t>(g)].Release(t.blocks[static_cast<size_t>(i)]);
    t.blocks.erase(t.blocks.begin(), t.blocks.begin() + n);
    t.first_block = live;
    dropped += n;
  }
  blocks_dropped_for_window_ += dropped;
  return dropped;
}

void GroupedBlockTables::Release(SequenceId seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  for (size_t g = 0; g < it->second.tables.size(); ++g) {
    for (BlockId b : it->second.tables[g].blocks) pools_[g].Release(b);
  }
  sequences_.erase(it);
}

const GroupBlockTable& GroupedBlockTables::Table(SequenceId seq, int64_t g) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end() || g < 0 || g >= groups_.num_groups()) return kNoTable;
  return it->second.tables[static_cast<size_t>(g)];
}

GroupedBlockStats GroupedBlockTables::Stats() const {
  GroupedBlockStats out;
  for (int64_t g = 0; g < groups_.num_groups(); ++g) {
    const BlockPool& pool = pools_[static_cast<size_t>(g)];
    out.groups.push_back(GroupBlockStats{groups_.GroupLayers(g), groups_.group(g).window, pool.num_blocks(),
                                         pool.num_used(), pool.peak_used()});
    out.held_layer_blocks += groups_.GroupLayers(g) * pool.num_used();
  }
  for (const auto& [seq, s] : sequences_) {
    out.full_attention_layer_blocks += groups_.num_layers() * TableEnd(s.tables.front());
  }
  out.blocks_dropped_for_window = blocks_dropped_for_window_;
  return out;
}

absl::Status GroupedBlockTables::VerifyIntegrity() const {
  std::vector<int64_t> referenced(pools_.size());
  for (const auto& [seq, s] : sequences_) {
    if (s.tables.size() != pools_.size()) {
      return absl::InternalError(absl::StrCat("sequence ", seq, " has ", s.tables.size(), " group tables"));
    }
    const int64_t end = TableEnd(s.tables.front());
    for (size_t g = 0; g < s.tables.size(); ++g) {
      const GroupBlockTable& t = s.tables[g];
      if (TableEnd(t) != end) {
        return absl::InternalError(absl::StrCat("sequence ", seq, " group ", g, " ends at block ", TableEnd(t),
                                                ", group 0 at ", end));
      }
      if (t.first_block > groups_.FirstLiveBlock(static_cast<int64_t>(g), s.num_computed)) {
        return absl::InternalError(absl::StrCat("sequence ", seq, " group ", g, " dropped block ", t.first_block - 1,
                                                " which its next query at ", s.num_computed, " reads"));
      }
      for (BlockId b : t.blocks) {
        if (pools_[g].ref_count(b) != 1) {
          return absl::InternalError(absl::StrCat("group ", g, " block ", b, " has ", pools_[g].ref_count(b),
                                                  " references, one table holds it"));
        }
      }
      referenced[g] += static_cast<int64_t>(t.blocks.size());
    }
  }
  for (size_t g = 0; g < pools_.size(); ++g) {
    if (absl::Status st = pools_[g].VerifyIntegrity(); !st.ok()) return st;
    if (referenced[g] != pools_[g].num_used()) {
      return absl::InternalError(absl::StrCat("group ", g, " pool has ", pools_[g].num_used(), " blocks in use, tables ",
                                              "hold ", referenced[g]));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier
