// GroupedBlockTables' prefix entries and the block supply they share with the tables
// (grouped_block_tables.h): an entry holds one reference of its block; evicting one, when
// the pool has no free block, drops the least recently released entry no table holds.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kv/grouped_block_tables.h"

namespace kvtier {

BlockId GroupedBlockTables::TakeBlock() {
  if (const std::optional<BlockId> id = pool_.Allocate()) return *id;
  const std::optional<int32_t> victim = evictable_.PopFront();  // the caller checked num_free()
  auto entry = entry_of_block_.find(*victim);
  entries_.erase(EntryKey{entry->second.key, entry->second.group});
  evicted_.push_back({*victim, entry->second.key, entry->second.group, std::move(entry->second.tokens)});
  entry_of_block_.erase(entry);
  pool_.Release(*victim);  // the entry's reference: free now
  return *pool_.Allocate();
}

void GroupedBlockTables::Unref(BlockId block) {
  pool_.Release(block);
  if (pool_.ref_count(block) == 1 && entry_of_block_.contains(block)) evictable_.PushBack(block);
}

std::optional<BlockId> GroupedBlockTables::FindEntry(const BlockHash& key, int64_t group,
                                                     std::span<const int32_t> tokens) const {
  auto it = entries_.find(EntryKey{key, group});
  if (it == entries_.end()) return std::nullopt;
  const std::vector<int32_t>& cached = entry_of_block_.at(it->second).tokens;
  if (!std::equal(cached.begin(), cached.end(), tokens.begin(), tokens.end())) return std::nullopt;
  return it->second;
}

std::vector<GroupedBlockTables::EvictedEntry> GroupedBlockTables::TakeEvicted() { return std::exchange(evicted_, {}); }

void GroupedBlockTables::Hold(BlockId block) {
  pool_.AddRef(block);
  evictable_.Erase(block);
}

void GroupedBlockTables::Unhold(BlockId block) { Unref(block); }

BlockId GroupedBlockTables::AddEntry(const BlockHash& key, int64_t group, std::span<const int32_t> tokens) {
  const BlockId id = TakeBlock();  // the holder's reference
  entries_[EntryKey{key, group}] = id;
  entry_of_block_[id] = PrefixEntry{key, group, std::vector<int32_t>(tokens.begin(), tokens.end())};
  pool_.AddRef(id);  // the entry's own
  return id;
}

void GroupedBlockTables::DropEntry(BlockId block) {
  auto entry = entry_of_block_.find(block);
  entries_.erase(EntryKey{entry->second.key, entry->second.group});
  entry_of_block_.erase(entry);
  pool_.Release(block);  // the entry's reference
  pool_.Release(block);  // the holder's
}

std::vector<BlockId> GroupedBlockTables::CacheFullBlocks(SequenceId seq, int64_t num_full,
                                                         const std::function<BlockHash(int64_t)>& key,
                                                         std::span<const int32_t> tokens) {
  std::vector<BlockId> made;
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return made;
  SequenceTables& s = it->second;
  const int64_t block_tokens = groups_.block_tokens();
  const GroupBlockTable& first = s.tables.front();  // every group's table ends at the same block
  num_full = std::min({num_full, first.first_block + static_cast<int64_t>(first.blocks.size()),
                       static_cast<int64_t>(tokens.size()) / block_tokens});
  for (int64_t i = s.num_cached; i < num_full; ++i) {
    const BlockHash hash = key(i);
    const std::span<const int32_t> block = tokens.subspan(static_cast<size_t>(i * block_tokens),
                                                          static_cast<size_t>(block_tokens));
    for (int64_t g = 0; g < groups_.num_groups(); ++g) {
      const GroupBlockTable& t = s.tables[static_cast<size_t>(g)];
      if (i < t.first_block || i >= t.first_block + static_cast<int64_t>(t.blocks.size())) continue;
      const BlockId id = t.blocks[static_cast<size_t>(i - t.first_block)];
      if (entries_.contains(EntryKey{hash, g}) || entry_of_block_.contains(id)) continue;
      entries_[EntryKey{hash, g}] = id;
      entry_of_block_[id] = PrefixEntry{hash, g, std::vector<int32_t>(block.begin(), block.end())};
      pool_.AddRef(id);
      made.push_back(id);
    }
  }
  s.num_cached = std::max(s.num_cached, num_full);
  return made;
}

int64_t GroupedBlockTables::MatchPrefix(SequenceId seq, int64_t max_blocks, const std::function<BlockHash(int64_t)>& key,
                                        std::span<const int32_t> tokens) {
  const int64_t block_tokens = groups_.block_tokens();
  max_blocks = std::min(max_blocks, static_cast<int64_t>(tokens.size()) / block_tokens);
  const int64_t held = HeldComputedBlocks(seq);
  if (held < 0 || max_blocks <= held) return 0;
  std::vector<BlockHash> keys;  // keys[i]: block i's, computed as far as the chain is cached
  for (int64_t i = 0; i < max_blocks; ++i) keys.push_back(key(i));
  auto block_tokens_of = [&](int64_t b) {
    return tokens.subspan(static_cast<size_t>(b * block_tokens), static_cast<size_t>(block_tokens));
  };
  // The sequence's own tables hold every block before `held` that a query past it reads.
  const int64_t n = groups_.UsablePrefixBlocks(max_blocks, [&](int64_t g, int64_t b) {
    return b < held || FindEntry(keys[static_cast<size_t>(b)], g, block_tokens_of(b)).has_value();
  });
  if (n <= held) return 0;
  SequenceTables& s = sequences_[seq];
  s.num_computed = n * block_tokens;
  s.num_cached = n;
  s.tables.resize(static_cast<size_t>(groups_.num_groups()));
  for (int64_t g = 0; g < groups_.num_groups(); ++g) {
    GroupBlockTable& t = s.tables[static_cast<size_t>(g)];
    const int64_t first = std::min(n, groups_.FirstLiveBlock(g, s.num_computed));
    // Its own blocks the window has passed go back, as OnComputed would give them.
    while (!t.blocks.empty() && t.first_block < first) {
      Unref(t.blocks.front());
      t.blocks.erase(t.blocks.begin());
      ++t.first_block;
      ++blocks_dropped_for_window_;
    }
    if (t.blocks.empty()) t.first_block = first;
    for (int64_t b = std::max(held, first); b < n; ++b) {
      const BlockId id = *FindEntry(keys[static_cast<size_t>(b)], g, block_tokens_of(b));
      pool_.AddRef(id);
      evictable_.Erase(id);
      t.blocks.push_back(id);
    }
  }
  return n;
}

int64_t GroupedBlockTables::HeldComputedBlocks(SequenceId seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return 0;
  const SequenceTables& s = it->second;
  // Every group's table ends at the same block.
  const int64_t end =
      s.tables.empty() ? 0 : s.tables.front().first_block + static_cast<int64_t>(s.tables.front().blocks.size());
  if (s.num_computed != end * groups_.block_tokens()) return -1;
  for (const GroupBlockTable& t : s.tables) {
    if (t.host_blocks > 0) return -1;
  }
  return end;
}

int64_t GroupedBlockTables::PinPrefix(int64_t num_blocks, const std::function<BlockHash(int64_t)>& key,
                                      std::span<const int32_t> tokens) {
  const int64_t block_tokens = groups_.block_tokens();
  num_blocks = std::min(num_blocks, static_cast<int64_t>(tokens.size()) / block_tokens);
  int64_t pinned = 0;
  for (int64_t b = 0; b < num_blocks; ++b) {
    const BlockHash hash = key(b);
    const std::span<const int32_t> block =
        tokens.subspan(static_cast<size_t>(b * block_tokens), static_cast<size_t>(block_tokens));
    for (int64_t g = 0; g < groups_.num_groups(); ++g) {
      if (b < groups_.FirstLiveBlock(g, num_blocks * block_tokens)) continue;  // no match at num_blocks reads it
      const std::optional<BlockId> id = FindEntry(hash, g, block);
      if (!id || pinned_.contains(*id)) continue;
      Hold(*id);
      pinned_.insert(*id);
      ++pinned;
    }
  }
  return pinned;
}

void GroupedBlockTables::UnpinAll() {
  for (BlockId block : pinned_) Unhold(block);
  pinned_.clear();
}

absl::Status GroupedBlockTables::VerifyEntries(const absl::flat_hash_map<BlockId, int64_t>& table_refs) const {
  int64_t used = 0;
  for (BlockId b = 0; b < pool_.num_blocks(); ++b) {
    auto refs = table_refs.find(b);
    // A pin holds its entry as a table does.
    const int64_t held = (refs == table_refs.end() ? 0 : refs->second) + (pinned_.contains(b) ? 1 : 0);
    const bool entry = entry_of_block_.contains(b);
    if (pool_.ref_count(b) != held + (entry ? 1 : 0)) {
      return absl::InternalError(absl::StrCat("block ", b, " has ", pool_.ref_count(b), " references, ", held,
                                              " tables hold it", entry ? " and it is a prefix entry" : ""));
    }
    if (evictable_.Contains(b) != (entry && held == 0)) {
      return absl::InternalError(absl::StrCat("block ", b, (evictable_.Contains(b) ? " is" : " is not"),
                                              " evictable, held by ", held, " tables"));
    }
    if (pool_.ref_count(b) > 0) ++used;
  }
  for (const auto& [entry_key, block] : entries_) {
    auto it = entry_of_block_.find(block);
    if (it == entry_of_block_.end() || it->second.key != entry_key.first || it->second.group != entry_key.second) {
      return absl::InternalError(absl::StrCat("prefix entry of block ", block, " is not recorded with its key"));
    }
  }
  if (entries_.size() != entry_of_block_.size()) {
    return absl::InternalError(absl::StrCat(entries_.size(), " prefix entries, ", entry_of_block_.size(), " blocks"));
  }
  if (used != pool_.num_used()) {
    return absl::InternalError(absl::StrCat("the pool has ", pool_.num_used(), " blocks in use, ", used, " referenced"));
  }
  return absl::OkStatus();
}

}  // namespace kvtier
