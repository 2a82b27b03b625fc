// KvCacheManager's side of load or recompute (engine/load_plan.h; the contract is in
// kv_cache_manager.h): what a prompt's prefix costs to load from the tiers below, starting
// those loads, and how far they have come. Written once over `below_`.
#include <algorithm>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace kvtier {

KvCacheManager::SlowPrefix KvCacheManager::ProbeSlowPrefix(SequenceId seq, std::span<const int32_t> tokens,
                                                             BlockKeyChain* keys) {
  SlowPrefix probe;
  if (!ctx_.options.prefix_cache || tokens.size() < 2) return probe;
  if (grouped_) {
    std::optional<BlockKeyChain> own;
    return ProbeSlowGroupedPrefix(seq, Chain(tokens, keys, &own));  // kv_cache_grouped_load_plan.cc
  }
  int64_t first = 0;
  if (auto held = sequences_.find(seq); held != sequences_.end()) {
    if (!held->second.host_slots.empty() || held->second.hashes.size() != held->second.table.size()) return probe;
    first = static_cast<int64_t>(held->second.table.size());
  }
  std::optional<BlockKeyChain> own;
  const BlockChain chain = Chain(tokens, keys, &own);
  ctx_.transfers.Land(LaneBit(Lane::kRemoteGet));
  std::vector<int64_t> slow[kNumTiers];  // per tier: the chain blocks it alone holds
  int64_t num_slow = 0;
  // A run of blocks one lookup found in a tier that must be asked (the remote tier's EXISTS).
  const LowerTier* run_tier = nullptr;
  int64_t run_from = -1, run = 0;
  const int64_t max_blocks = chain.max_blocks();
  for (int64_t i = first; i < max_blocks; ++i) {
    const BlockHash hash = chain.Key(i);
    auto [holder, presence] = FirstHolder(hash);
    // Fast: on the device, in host memory, or being read into it by this process.
    const bool fast = ctx_.device.Contains(hash) ||
                      (holder != nullptr && holder->local() &&
                       (presence == LowerTier::Presence::kLanded || presence == LowerTier::Presence::kLoading));
    if (fast) {
      if (num_slow > 0) break;  // the slow run ends at a fast block
      ++probe.fast_blocks;
      continue;
    }
    if (holder == nullptr) break;
    if (presence != LowerTier::Presence::kStored) {
      // Only a lookup tells: one for the whole run from here.
      if (run_tier != holder) {
        run_tier = holder;
        run_from = i;
        run = holder->ProbeRun(chain, i, max_blocks);
      }
      if (i >= run_from + run) break;  // not there: the slow run ends
    }
    slow[static_cast<int>(holder->tier())].push_back(i);
    ++num_slow;
  }
  probe.slow_blocks = num_slow;
  if (num_slow == 0) return probe;
  double seconds = 0;
  probe.overlap = true;
  for (LowerTier* tier : below_) {
    const std::vector<int64_t>& blocks = slow[static_cast<int>(tier->tier())];
    if (blocks.empty()) continue;
    tier->NoteSlowBlocks(chain, blocks);  // a stale figure: measured again for a later plan
    seconds += static_cast<double>(blocks.size()) * tier->SecondsPerBlock();
    probe.overlap = probe.overlap && tier->LoadsOverlapCompute();
  }
  probe.load_seconds_per_block = seconds / static_cast<double>(num_slow);
  return probe;
}

int64_t KvCacheManager::LoadPrefixAhead(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t from,
                                        int64_t to) {
  std::optional<BlockKeyChain> own;
  const BlockChain chain = Chain(tokens, keys, &own);
  to = std::min(to, chain.max_blocks());
  if (from >= to) return 0;
  ctx_.transfers.Land(kReadLanes);
  if (grouped_) return LoadGroupedPrefixAhead(chain, from, to);
  // Back first: the compute meets the loads wherever they have come to (Scheduler::Attach).
  // All at once: a read that waits for a later step's budget lands too late to be used.
  int64_t started[kNumTiers] = {};
  ReadChainAhead(chain, from, to, ReadAheadOptions{/*back_first=*/true, /*max_host_slots=*/to - from}, started);
  return started[static_cast<int>(Tier::kDisk)];
}

KvCacheManager::LoadFrontier KvCacheManager::ProbeLoadFrontier(std::span<const int32_t> tokens, BlockKeyChain* keys,
                                                               int64_t from, int64_t to) {
  std::optional<BlockKeyChain> own;
  const BlockChain chain = Chain(tokens, keys, &own);
  to = std::min(to, chain.max_blocks());
  if (from >= to) return LoadFrontier{std::max(from, to), 0, false, 0};
  ctx_.transfers.Land(kReadLanes);
  if (grouped_) return ProbeGroupedLoadFrontier(chain, from, to);
  auto landed = [&](int64_t b) {
    const BlockHash hash = chain.Key(b);
    return ctx_.device.Contains(hash) || std::any_of(below_.begin(), below_.end(), [&](const LowerTier* t) {
             return t->Find(hash) == LowerTier::Presence::kLanded;
           });
  };
  auto loading = [&](int64_t b, const LowerTier& tier) {
    return tier.Find(chain.Key(b)) == LowerTier::Presence::kLoading;
  };
  return FrontierOf(from, to, landed, loading);
}

KvCacheManager::LoadFrontier KvCacheManager::FrontierOf(int64_t from, int64_t to,
                                                        const std::function<bool(int64_t)>& landed,
                                                        const std::function<bool(int64_t, const LowerTier&)>& loading) {
  LoadFrontier frontier;
  frontier.landed_from = to;
  while (frontier.landed_from > from && landed(frontier.landed_from - 1)) --frontier.landed_from;
  frontier.landed = to - frontier.landed_from;
  bool loading_in[kNumTiers] = {};  // per tier: a block before the landed run is on its way
  for (int64_t i = from; i < frontier.landed_from; ++i) {
    for (const LowerTier* tier : below_) {
      if (loading(i, *tier)) loading_in[static_cast<int>(tier->tier())] = true;
    }
    if (landed(i)) ++frontier.landed;
  }
  for (const LowerTier* tier : below_) {
    if (!loading_in[static_cast<int>(tier->tier())]) continue;
    frontier.loading = true;
    frontier.load_seconds_per_block = std::max(frontier.load_seconds_per_block, tier->SecondsPerBlock());
  }
  return frontier;
}

}  // namespace kvtier
