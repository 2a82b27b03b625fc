// KvCacheManager's prefix reuse over the tiers below (the contract is in
// kv_cache_manager.h): the prefix walk of a match, and read-ahead of what a waiting
// sequence will need. Each is written once over `below_`, fastest tier first.
#include <algorithm>

#include "backend/backend.h"
#include "kv/kv_cache_manager.h"

namespace kvtier {

std::pair<LowerTier*, LowerTier::Presence> KvCacheManager::FirstHolder(const BlockHash& hash) const {
  for (LowerTier* tier : below_) {
    const LowerTier::Presence presence = tier->Find(hash);
    if (presence != LowerTier::Presence::kAbsent) return {tier, presence};
  }
  return {nullptr, LowerTier::Presence::kAbsent};
}

int64_t KvCacheManager::MatchPrefix(SequenceId seq, std::span<const int32_t> tokens, int32_t priority,
                                    BlockKeyChain* keys, int64_t max_blocks_held, bool landed_only) {
  if (!ctx_.options.prefix_cache || tokens.size() < 2) return 0;
  if (grouped_) {
    std::optional<BlockKeyChain> own;
    const BlockChain chain = Chain(tokens, keys, &own);
    int64_t max_blocks = chain.max_blocks();
    if (max_blocks_held >= 0) max_blocks = std::min(max_blocks, max_blocks_held);
    return MatchGroupedPrefix(seq, chain, max_blocks, landed_only);
  }
  if (landed_only) ctx_.transfers.Land(kReadLanes);  // waits for nothing
  SequenceBlocks& blocks = sequences_[seq];
  // Only full computed blocks held (each has its key): the match continues after them. A
  // long sequence keeping blocks on the host has computed past any prefix: nothing to match.
  if (!blocks.host_slots.empty() || blocks.hashes.size() != blocks.table.size()) return 0;
  const size_t first = blocks.table.size();
  std::optional<BlockKeyChain> own;
  const BlockChain chain = Chain(tokens, keys, &own);
  int64_t max_blocks = chain.max_blocks();
  if (max_blocks_held >= 0) max_blocks = std::min(max_blocks, max_blocks_held);
  TierCache& device = ctx_.device;
  std::vector<Tier> hit_tier;  // per matched block
  // Per tier below, the table index of each block it loads (landed after the walk).
  std::vector<size_t> loads[kNumTiers];
  for (int64_t i = static_cast<int64_t>(first); i < max_blocks; ++i) {
    const BlockHash hash = chain.Key(i);
    const std::span<const int32_t> block_tokens = chain.Tokens(i);
    // Moves of the block under way (a read into host memory, a write down) end first.
    if (!std::all_of(below_.begin(), below_.end(), [&](LowerTier* t) { return t->Settle(hash, landed_only); })) {
      break;
    }
    if (ctx_.CachedAnywhere(hash)) ctx_.priorities.Raise(hash, priority);
    if (const std::optional<int32_t> hit = device.Find(hash)) {
      if (!device.TokensMatch(*hit, block_tokens)) {
        ++ctx_.counters.prefix_token_mismatch;
        break;
      }
      disk_->cache().Touch(hash, ctx_.priorities.Of(hash));  // in use: not the disk's next victim
      device.pool().AddRef(*hit);
      device.lru().Erase(*hit);
      blocks.table.push_back(*hit);
      blocks.hashes.push_back(hash);
      hit_tier.push_back(Tier::kDevice);
      continue;
    }
    // The first tier below that holds it, claimed (kept from eviction) until loaded.
    LowerTier* holder = nullptr;
    LowerTier::Claim claim;
    bool stop = false;
    for (LowerTier* tier : below_) {
      const LowerTier::ClaimResult r = tier->ClaimForLoad(chain, i, max_blocks, landed_only, &claim);
      if (r == LowerTier::ClaimResult::kMiss) continue;
      stop = r == LowerTier::ClaimResult::kStop;
      if (!stop) holder = tier;
      break;
    }
    if (stop || holder == nullptr) break;
    if (num_available_device_blocks() == 0) {
      holder->Unclaim(claim);
      break;
    }
    const BlockId block = AllocateDeviceBlocks(1).front();
    if (!holder->StartLoad(claim, block_tokens, block).ok()) {
      ctx_.device.pool().Release(block);
      break;
    }
    loads[static_cast<int>(holder->tier())].push_back(blocks.table.size());
    blocks.table.push_back(block);
    blocks.hashes.push_back(hash);
    hit_tier.push_back(holder->tier());
  }
  // The loads land, tier by tier; the prefix ends before the first block that could not be
  // loaded. The blocks after it go back as a release would leave them: those loaded (or
  // hit) stay cached, the others free.
  size_t keep = blocks.table.size();
  for (LowerTier* tier : below_) {
    const std::vector<size_t>& index = loads[static_cast<int>(tier->tier())];
    const std::vector<absl::Status> loaded = tier->FinishLoads();
    for (size_t r = 0; r < loaded.size() && r < index.size(); ++r) {
      if (!loaded[r].ok()) {
        keep = std::min(keep, index[r]);
        continue;
      }
      CacheOnDevice(blocks.table[index[r]], blocks.hashes[index[r]], chain.Tokens(static_cast<int64_t>(index[r])),
                    /*computed=*/false);
    }
  }
  for (size_t i = keep; i < blocks.table.size(); ++i) ReleaseDeviceBlock(blocks.table[i]);
  blocks.table.resize(keep);
  blocks.hashes.resize(keep);
  for (size_t i = first; i < keep; ++i) {
    const int tier = static_cast<int>(hit_tier[i - first]);
    ++blocks.matched[tier];
    ++ctx_.counters.prefix_hits[tier];
  }
  ctx_.counters.prefix_hit_tokens += static_cast<int64_t>(keep - first) * block_tokens();
  return static_cast<int64_t>(keep) * block_tokens();
}

void KvCacheManager::UnmatchPrefix(SequenceId seq) {
  if (auto it = sequences_.find(seq); it != sequences_.end()) {
    for (int t = 0; t < kNumTiers; ++t) {
      ctx_.counters.prefix_hits[t] -= it->second.matched[t];
      ctx_.counters.prefix_hit_tokens -= it->second.matched[t] * block_tokens();
    }
  }
  Release(seq);
}

bool KvCacheManager::ReadAhead(SequenceId seq, std::span<const int32_t> tokens, BlockKeyChain* keys) {
  // Landed reads are host copies (and free read budget): a waiting sequence whose prefix
  // reads have finished is admitted this step, not the next.
  ctx_.transfers.Land(kReadLanes);
  if (swapped_.contains(seq)) return ReadSwapAhead(seq);
  // Prefix blocks, for a sequence that holds none yet.
  if (!ctx_.options.prefix_cache || tokens.size() < 2) return false;
  if (auto held = sequences_.find(seq);
      held != sequences_.end() && (!held->second.table.empty() || !held->second.host_slots.empty())) {
    return false;
  }
  if (grouped_ && !grouped_->Table(seq, 0).blocks.empty()) return false;
  std::optional<BlockKeyChain> own;
  const BlockChain chain = Chain(tokens, keys, &own);
  int64_t started[kNumTiers] = {};
  if (grouped_) return ReadGroupsAhead(chain, started);
  return ReadChainAhead(chain, 0, chain.max_blocks(), ReadAheadOptions{}, started);
}

bool KvCacheManager::ReadChainAhead(const BlockChain& chain, int64_t from, int64_t to,
                                    const ReadAheadOptions& options, int64_t started[kNumTiers]) {
  // The chain's blocks, up to the first one no tier holds (as the prefix walk goes): those
  // in memory are skipped, those on their way there noted, the others left to the first
  // tier below holding them.
  bool reading = false;
  std::vector<int64_t> to_read[kNumTiers];
  for (int64_t i = from; i < to; ++i) {
    const BlockHash hash = chain.Key(i);
    // On the device already (for a group's chain: the group's entry of the block).
    if (ctx_.DeviceCaches(chain, i)) continue;
    const auto [holder, presence] = FirstHolder(hash);
    if (holder == nullptr) break;
    if (presence == LowerTier::Presence::kLanded) continue;
    if (presence == LowerTier::Presence::kLoading) {
      reading = true;
      continue;
    }
    to_read[static_cast<int>(holder->tier())].push_back(i);
  }
  for (LowerTier* tier : below_) {
    const std::vector<int64_t>& blocks = to_read[static_cast<int>(tier->tier())];
    if (blocks.empty()) continue;
    const int64_t n = tier->ReadAhead(chain, blocks, options);
    started[static_cast<int>(tier->tier())] += n;
    reading = reading || n > 0;
  }
  return reading;
}

}  // namespace kvtier
