// GroupedBlockTables (grouped_block_tables.h).
#include "kv/grouped_block_tables.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvtier {
namespace {

const GroupBlockTable kNoGroupTable;

int64_t GroupTableEnd(const GroupBlockTable& t) { return t.first_block + static_cast<int64_t>(t.blocks.size()); }

}  // namespace

absl::StatusOr<GroupedBlockTables> GroupedBlockTables::Create(KvLayerGroups groups, int64_t num_blocks) {
  if (num_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat("grouped block tables: a pool of ", num_blocks, " blocks"));
  }
  return GroupedBlockTables(std::move(groups), num_blocks);
}

int64_t GroupedBlockTables::NewBlocksNeeded(SequenceId seq, int64_t num_tokens) const {
  const int64_t end = groups_.BlocksForTokens(num_tokens);
  auto it = sequences_.find(seq);
  const int64_t have_end = it == sequences_.end() ? 0 : GroupTableEnd(it->second.tables.front());
  return std::max<int64_t>(0, end - have_end) * groups_.num_groups();
}

absl::Status GroupedBlockTables::Reserve(SequenceId seq, int64_t num_tokens) {
  const int64_t need = NewBlocksNeeded(seq, num_tokens);
  if (need > num_free()) {
    return absl::ResourceExhaustedError(absl::StrCat("sequence ", seq, " needs ", need, " blocks over ",
                                                     groups_.num_groups(), " layer groups, ", num_free(),
                                                     " free"));
  }
  SequenceTables& s = sequences_[seq];
  if (s.tables.empty()) s.tables.resize(static_cast<size_t>(groups_.num_groups()));
  for (GroupBlockTable& t : s.tables) {
    while (GroupTableEnd(t) < groups_.BlocksForTokens(num_tokens)) t.blocks.push_back(TakeBlock());
  }
  return absl::OkStatus();
}

absl::Status GroupedBlockTables::Restore(SequenceId seq, int64_t num_computed) {
  if (sequences_.contains(seq)) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq, " already holds blocks"));
  }
  if (num_computed < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, " restored at position ", num_computed));
  }
  const int64_t end = groups_.BlocksForTokens(num_computed);
  const int64_t need = groups_.ComputedBlocksHeld(num_computed);
  if (need > num_free()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("sequence ", seq, " needs ", need, " blocks to come back, ", num_free(), " free"));
  }
  SequenceTables& s = sequences_[seq];
  s.num_computed = num_computed;
  s.tables.resize(static_cast<size_t>(groups_.num_groups()));
  for (int64_t g = 0; g < groups_.num_groups(); ++g) {
    GroupBlockTable& t = s.tables[static_cast<size_t>(g)];
    t.first_block = std::min(end, groups_.FirstLiveBlock(g, num_computed));
    while (GroupTableEnd(t) < end) t.blocks.push_back(TakeBlock());
  }
  return absl::OkStatus();
}

std::vector<BlockId> GroupedBlockTables::KeptBlocks(SequenceId seq) const {
  std::vector<BlockId> out;
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return out;
  for (const GroupBlockTable& t : it->second.tables) {
    if (t.host_blocks > 0) return out;
  }
  const int64_t num_computed = it->second.num_computed;
  const int64_t end = groups_.BlocksForTokens(num_computed);
  for (int64_t g = 0; g < groups_.num_groups(); ++g) {
    const GroupBlockTable& t = it->second.tables[static_cast<size_t>(g)];
    // The table starts no later than the first live block (the invariant) and ends no
    // earlier than `end` (the computed positions were reserved).
    for (int64_t b = std::min(end, groups_.FirstLiveBlock(g, num_computed)); b < std::min(end, GroupTableEnd(t)); ++b) {
      out.push_back(t.blocks[static_cast<size_t>(b - t.first_block)]);
    }
  }
  return out;
}

int64_t GroupedBlockTables::NumComputed(SequenceId seq) const {
  auto it = sequences_.find(seq);
  return it == sequences_.end() ? 0 : it->second.num_computed;
}

int64_t GroupedBlockTables::OnComputed(SequenceId seq, int64_t num_computed) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return 0;
  SequenceTables& s = it->second;
  s.num_computed = std::max(s.num_computed, num_computed);
  int64_t dropped = 0;
  for (int64_t g = 0; g < groups_.num_groups(); ++g) {
    GroupBlockTable& t = s.tables[static_cast<size_t>(g)];
    const int64_t live = std::min(groups_.FirstLiveBlock(g, s.num_computed), GroupTableEnd(t));
    const int64_t n = live - t.first_block;
    if (n <= 0) continue;
    for (int64_t i = 0; i < n; ++i) Unref(t.blocks[static_cast<size_t>(i)]);
    t.blocks.erase(t.blocks.begin(), t.blocks.begin() + n);
    t.first_block = live;
    dropped += n;
  }
  blocks_dropped_for_window_ += dropped;
  return dropped;
}

absl::StatusOr<std::vector<std::pair<BlockId, BlockId>>> GroupedBlockTables::Fork(SequenceId parent,
                                                                                  SequenceId child,
                                                                                  int64_t num_tokens) {
  if (sequences_.contains(child)) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", child, " already holds blocks"));
  }
  auto it = sequences_.find(parent);
  const int64_t end = groups_.BlocksForTokens(num_tokens);
  bool holds = it != sequences_.end() && num_tokens >= 1 && it->second.num_computed >= num_tokens;
  for (int64_t g = 0; holds && g < groups_.num_groups(); ++g) {
    const GroupBlockTable& t = it->second.tables[static_cast<size_t>(g)];
    holds = t.first_block <= groups_.FirstLiveBlock(g, num_tokens) && GroupTableEnd(t) >= end;
  }
  if (!holds) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", parent, " does not hold every group's blocks of ", num_tokens, " positions"));
  }
  const int64_t full = num_tokens / groups_.block_tokens();
  const int64_t copies = full < end ? groups_.num_groups() : 0;
  if (copies > num_free()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no ", copies, " free blocks to copy sequence ", parent, "'s partial blocks into"));
  }
  SequenceTables s;
  s.num_computed = num_tokens;
  s.num_cached = std::min(it->second.num_cached, full);
  s.tables.resize(static_cast<size_t>(groups_.num_groups()));
  std::vector<std::pair<BlockId, BlockId>> copied;
  for (int64_t g = 0; g < groups_.num_groups(); ++g) {
    const GroupBlockTable& from = it->second.tables[static_cast<size_t>(g)];
    GroupBlockTable& t = s.tables[static_cast<size_t>(g)];
    t.first_block = std::min(end, groups_.FirstLiveBlock(g, num_tokens));
    for (int64_t b = t.first_block; b < full; ++b) {
      const BlockId id = from.blocks[static_cast<size_t>(b - from.first_block)];
      pool_.AddRef(id);
      t.blocks.push_back(id);
    }
    if (full < end) {
      t.blocks.push_back(TakeBlock());
      copied.emplace_back(from.blocks[static_cast<size_t>(full - from.first_block)], t.blocks.back());
    }
  }
  sequences_.emplace(child, std::move(s));
  return copied;
}

absl::Status GroupedBlockTables::MoveFrontToHost(SequenceId seq, int64_t g) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end() || g < 0 || g >= groups_.num_groups() || groups_.group(g).window.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq, " has no full-attention group ", g));
  }
  GroupBlockTable& t = it->second.tables[static_cast<size_t>(g)];
  if (t.blocks.empty() || t.first_block >= it->second.num_computed / groups_.block_tokens()) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", seq, " group ", g, " block ", t.first_block, " is not full and computed"));
  }
  Unref(t.blocks.front());
  t.blocks.erase(t.blocks.begin());
  ++t.first_block;
  ++t.host_blocks;
  return absl::OkStatus();
}

void GroupedBlockTables::Release(SequenceId seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  for (const GroupBlockTable& t : it->second.tables) {
    for (BlockId b : t.blocks) Unref(b);
  }
  sequences_.erase(it);
}

const GroupBlockTable& GroupedBlockTables::Table(SequenceId seq, int64_t g) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end() || g < 0 || g >= groups_.num_groups()) return kNoGroupTable;
  return it->second.tables[static_cast<size_t>(g)];
}

GroupedBlockStats GroupedBlockTables::Stats() const {
  GroupedBlockStats out;
  out.capacity_blocks = pool_.num_blocks();
  out.used_blocks = pool_.num_used() - evictable_.size();  // held by tables
  out.peak_blocks = pool_.peak_used();
  out.group_blocks.assign(static_cast<size_t>(groups_.num_groups()), 0);
  for (const auto& [seq, s] : sequences_) {
    for (size_t g = 0; g < s.tables.size(); ++g) out.group_blocks[g] += static_cast<int64_t>(s.tables[g].blocks.size());
    out.full_attention_blocks += groups_.num_groups() * GroupTableEnd(s.tables.front());
  }
  out.blocks_dropped_for_window = blocks_dropped_for_window_;
  out.cached_blocks = static_cast<int64_t>(entries_.size());
  return out;
}

absl::Status GroupedBlockTables::VerifyIntegrity() const {
  absl::flat_hash_map<BlockId, int64_t> table_refs;
  for (const auto& [seq, s] : sequences_) {
    if (static_cast<int64_t>(s.tables.size()) != groups_.num_groups()) {
      return absl::InternalError(absl::StrCat("sequence ", seq, " has ", s.tables.size(), " group tables"));
    }
    const int64_t end = GroupTableEnd(s.tables.front());
    for (size_t g = 0; g < s.tables.size(); ++g) {
      const GroupBlockTable& t = s.tables[g];
      if (GroupTableEnd(t) != end) {
        return absl::InternalError(absl::StrCat("sequence ", seq, " group ", g, " ends at block ", GroupTableEnd(t),
                                                ", group 0 at ", end));
      }
      if (GroupTableEnd(t) < groups_.BlocksForTokens(s.num_computed)) {
        return absl::InternalError(absl::StrCat("sequence ", seq, " group ", g, " ends at block ", GroupTableEnd(t),
                                                " before its computed position ", s.num_computed));
      }
      if (t.first_block - t.host_blocks > groups_.FirstLiveBlock(static_cast<int64_t>(g), s.num_computed)) {
        return absl::InternalError(absl::StrCat("sequence ", seq, " group ", g, " dropped block ",
                                                t.first_block - t.host_blocks - 1, ", which its next query at ",
                                                s.num_computed, " reads"));
      }
      if (t.host_blocks > 0 && t.first_block > s.num_computed / groups_.block_tokens()) {
        return absl::InternalError(absl::StrCat("sequence ", seq, " group ", g, " has host-resident block ",
                                                t.first_block - 1, " past its computed position ", s.num_computed));
      }
      for (BlockId b : t.blocks) ++table_refs[b];
    }
  }
  if (absl::Status st = pool_.VerifyIntegrity(); !st.ok()) return st;
  return VerifyEntries(table_refs);
}

}  // namespace kvtier
