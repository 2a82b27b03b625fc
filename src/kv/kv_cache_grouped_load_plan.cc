// KvCacheManager's side of load or recompute with layer groups (engine/load_plan.h; the
// contract is in kv_cache_manager.h). A logical block of a grouped prefix is a block of
// every group, and a windowed group's blocks before its window at the prefix's end are
// neither needed nor loaded (kv_layer_groups.h): the prefix that is fast (every group's
// block the next query reads on the device or in host memory) and the one that any tier
// holds are each the longest KvLayerGroups::UsablePrefixBlocks run; the slow blocks between
// are split as one group's are, the front computed while the back loads, each group's
// blocks from its own chain. A group's windowed blocks in the front are computed with it.
#include <algorithm>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace kvtier {

KvCacheManager::SlowPrefix KvCacheManager::ProbeSlowGroupedPrefix(SequenceId seq, const BlockChain& chain) {
  SlowPrefix probe;
  if (grouped_->HeldComputedBlocks(seq) != 0) return probe;  // a fresh prompt's only
  const KvLayerGroups& groups = grouped_->groups();
  const int64_t num_groups = groups.num_groups();
  const int64_t max_blocks = chain.max_blocks();
  ctx_.transfers.Land(LaneBit(Lane::kRemoteGet));
  // Per group and block: in memory (device, host, or being read into it by this process),
  // or the slow tier alone holding it (nullptr: none).
  std::vector<std::vector<int8_t>> fast(static_cast<size_t>(num_groups), std::vector<int8_t>(max_blocks, 0));
  std::vector<std::vector<LowerTier*>> slow(static_cast<size_t>(num_groups),
                                            std::vector<LowerTier*>(max_blocks, nullptr));
  for (int64_t g = 0; g < num_groups; ++g) {
    BlockChain group_chain = chain;
    group_chain.group = g;
    // A run of blocks one lookup found in a tier that must be asked (the remote tier's
    // EXISTS): one lookup a group.
    const LowerTier* run_tier = nullptr;
    int64_t run_from = -1, run = 0;
    for (int64_t b = 0; b < max_blocks; ++b) {
      if (ctx_.DeviceCaches(group_chain, b)) {
        fast[static_cast<size_t>(g)][static_cast<size_t>(b)] = 1;
        continue;
      }
      const auto [holder, presence] = FirstHolder(group_chain.Key(b));
      if (holder == nullptr) continue;
      if (holder->local() &&
          (presence == LowerTier::Presence::kLanded || presence == LowerTier::Presence::kLoading)) {
        fast[static_cast<size_t>(g)][static_cast<size_t>(b)] = 1;
        continue;
      }
      if (presence != LowerTier::Presence::kStored) {
        if (run_tier != holder) {
          run_tier = holder;
          run_from = b;
          run = holder->ProbeRun(group_chain, b, max_blocks);
        }
        if (b >= run_from + run) continue;  // not there
      }
      slow[static_cast<size_t>(g)][static_cast<size_t>(b)] = holder;
    }
  }
  auto is_fast = [&](int64_t g, int64_t b) { return fast[static_cast<size_t>(g)][static_cast<size_t>(b)] == 1; };
  probe.fast_blocks = groups.UsablePrefixBlocks(max_blocks, is_fast);
  const int64_t end = groups.UsablePrefixBlocks(max_blocks, [&](int64_t g, int64_t b) {
    return is_fast(g, b) || slow[static_cast<size_t>(g)][static_cast<size_t>(b)] != nullptr;
  });
  if (end <= probe.fast_blocks) return probe;
  probe.slow_blocks = end - probe.fast_blocks;
  // The slow blocks a match at `end` reads, per tier and group: what loading the run costs.
  double seconds = 0;
  probe.overlap = true;
  for (LowerTier* tier : below_) {
    for (int64_t g = 0; g < num_groups; ++g) {
      BlockChain group_chain = chain;
      group_chain.group = g;
      std::vector<int64_t> blocks;
      const int64_t first = std::max(probe.fast_blocks, groups.FirstLiveBlock(g, end * block_tokens()));
      for (int64_t b = first; b < end; ++b) {
        if (slow[static_cast<size_t>(g)][static_cast<size_t>(b)] == tier) blocks.push_back(b);
      }
      if (blocks.empty()) continue;
      tier->NoteSlowBlocks(group_chain, blocks);  // a stale figure: measured again for a later plan
      seconds += static_cast<double>(blocks.size()) * tier->SecondsPerBlock();
      probe.overlap = probe.overlap && tier->LoadsOverlapCompute();
    }
  }
  probe.load_seconds_per_block = seconds / static_cast<double>(probe.slow_blocks);
  return probe;
}

int64_t KvCacheManager::LoadGroupedPrefixAhead(const BlockChain& chain, int64_t from, int64_t to) {
  const KvLayerGroups& groups = grouped_->groups();
  int64_t started[kNumTiers] = {};
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    BlockChain group_chain = chain;
    group_chain.group = g;
    const int64_t first = std::max(from, std::min(to, groups.FirstLiveBlock(g, to * block_tokens())));
    if (first >= to) continue;
    ReadChainAhead(group_chain, first, to, ReadAheadOptions{/*back_first=*/true, /*max_host_slots=*/to - first},
                   started);
  }
  return started[static_cast<int>(Tier::kDisk)];
}

KvCacheManager::LoadFrontier KvCacheManager::ProbeGroupedLoadFrontier(const BlockChain& chain, int64_t from,
                                                                      int64_t to) {
  const KvLayerGroups& groups = grouped_->groups();
  // Group g's block b, read by a match at `to`.
  auto needed = [&](int64_t g, int64_t b) {
    return !groups.group(g).window.has_value() || b >= groups.FirstLiveBlock(g, to * block_tokens());
  };
  auto landed = [&](int64_t b) {
    const BlockHash key = chain.Key(b);
    for (int64_t g = 0; g < groups.num_groups(); ++g) {
      if (!needed(g, b) || grouped_->FindEntry(key, g, chain.Tokens(b)).has_value()) continue;
      const BlockHash group_key = GroupBlockKey(key, g);
      if (std::none_of(below_.begin(), below_.end(), [&](const LowerTier* t) {
            return t->Find(group_key) == LowerTier::Presence::kLanded;
          })) {
        return false;
      }
    }
    return true;
  };
  auto loading = [&](int64_t b, const LowerTier& tier) {
    const BlockHash key = chain.Key(b);
    for (int64_t g = 0; g < groups.num_groups(); ++g) {
      if (needed(g, b) && tier.Find(GroupBlockKey(key, g)) == LowerTier::Presence::kLoading) return true;
    }
    return false;
  };
  return FrontierOf(from, to, landed, loading);
}

}  // namespace kvtier
