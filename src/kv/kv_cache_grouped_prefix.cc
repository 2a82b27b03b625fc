// KvCacheManager's prefix entries of layer groups over the tiers below (kv_cache_manager.h):
// a group's entry evicted from the device pool goes down as any device victim does, under
// its group's key (GroupBlockKey); a computed one is queued to the remote tier as any
// computed block is, under the same key, and put once its block still holds that entry
// (RemoteTier checks KvContext::DeviceEntryOf before the copy). A match counts a group's
// block held where the device or a tier below holds it (the remote tier: once a lookup
// found it), loading it into a new entry. The reuse rule is the device's
// (KvLayerGroups::UsablePrefixBlocks): every block the next query reads, in every group; a
// windowed group's blocks before its window are neither needed nor loaded. A waiting
// prompt's group blocks on disk or in the remote tier are read ahead into host memory as
// any are. A load plan's attach continues the sequence's computed front with what has
// landed (kv_cache_grouped_load_plan.cc).
#include <algorithm>
#include <utility>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace kvtier {

void KvCacheManager::DemoteGroupEntries() {
  std::vector<DirtyVictim> dirty;
  for (const GroupedBlockTables::EvictedEntry& entry : grouped_->TakeEvicted()) {
    NoteDeviceVictim(entry.block, GroupBlockKey(entry.key, entry.group), entry.tokens, &dirty);
  }
  CopyVictimsDown(std::move(dirty));
}

void KvCacheManager::QueueGroupEntries(std::span<const BlockId> blocks) {
  if (remote_ == nullptr) return;
  for (const BlockId block : blocks) remote_->QueueWrite(block, ctx_.DeviceEntryOf(block)->key, /*computed=*/true);
}

int64_t KvCacheManager::MatchGroupedPrefix(SequenceId seq, const BlockChain& chain, int64_t max_blocks,
                                           bool landed_only) {
  // A load plan's attach continues after the front the sequence computed.
  const int64_t computed = grouped_->HeldComputedBlocks(seq);
  if (computed < 0 || max_blocks <= computed) return 0;
  if (landed_only) ctx_.transfers.Land(kReadLanes);  // waits for nothing
  const KvLayerGroups& groups = grouped_->groups();
  const int64_t num_groups = groups.num_groups();
  std::vector<BlockHash> keys;  // keys[b]: logical block b's chain key
  for (int64_t b = 0; b < max_blocks; ++b) keys.push_back(chain.Key(b));
  auto group_chain = [&](int64_t g) {
    BlockChain c = chain;
    c.group = g;
    return c;
  };
  // Whether a tier below holds group g's block b, its moves under way settled (remembered:
  // the usable-prefix search asks again). The remote tier, which only a lookup answers,
  // holds it once its lookup (of the group's blocks from b on) found a sound value. A load
  // plan's attach (landed_only) takes only what is in memory now.
  std::vector<std::vector<int8_t>> below(static_cast<size_t>(num_groups),
                                         std::vector<int8_t>(static_cast<size_t>(max_blocks), -1));
  auto held_below = [&](int64_t g, int64_t b) {
    int8_t& known = below[static_cast<size_t>(g)][static_cast<size_t>(b)];
    if (known < 0) {
      const BlockHash key = GroupBlockKey(keys[static_cast<size_t>(b)], g);
      known = 0;
      if (std::all_of(below_.begin(), below_.end(), [&](LowerTier* t) { return t->Settle(key, landed_only); })) {
        const auto [holder, presence] = FirstHolder(key);
        if (holder != nullptr && !holder->local()) {
          LowerTier::Claim claim;
          known = holder->ClaimForLoad(group_chain(g), b, max_blocks, landed_only, &claim) ==
                  LowerTier::ClaimResult::kHit;
          if (known == 1) holder->Unclaim(claim);
        } else {
          known = holder != nullptr && (!landed_only || presence == LowerTier::Presence::kLanded) ? 1 : 0;
        }
      }
    }
    return known == 1;
  };
  auto on_device = [&](int64_t g, int64_t b) {
    return grouped_->FindEntry(keys[static_cast<size_t>(b)], g, chain.Tokens(b));
  };
  const int64_t n = groups.UsablePrefixBlocks(max_blocks, [&](int64_t g, int64_t b) {
    return b < computed || on_device(g, b).has_value() || held_below(g, b);
  });
  if (n <= computed) return 0;

  // The blocks the next query reads that only a tier below holds come into new entries; the
  // device's entries are held meanwhile, so that taking a block for a load evicts none of them.
  std::vector<BlockId> held;
  struct GroupLoad {
    BlockId block;
    int64_t logical;
  };
  std::vector<GroupLoad> loads[kNumTiers];
  std::vector<Tier> slowest(static_cast<size_t>(n), Tier::kDevice);  // per logical block, for the counters
  auto first_read = [&](int64_t g) {
    return std::max(computed, std::min(n, groups.FirstLiveBlock(g, n * block_tokens())));
  };
  std::vector<std::pair<int64_t, int64_t>> missing;  // (group, block)
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int64_t b = first_read(g); b < n; ++b) {
      if (const std::optional<BlockId> id = on_device(g, b)) {
        grouped_->Hold(*id);
        held.push_back(*id);
      } else {
        missing.emplace_back(g, b);
      }
    }
  }
  for (const auto& [g, b] : missing) {
    // A block that cannot come in leaves a miss: the match below comes out shorter.
    if (grouped_->num_free() == 0 || grouped_->CachesKey(keys[static_cast<size_t>(b)], g)) continue;
    const BlockChain chain_g = group_chain(g);
    LowerTier* holder = nullptr;
    LowerTier::Claim claim;
    for (LowerTier* tier : below_) {
      const LowerTier::ClaimResult r = tier->ClaimForLoad(chain_g, b, n, landed_only, &claim);
      if (r == LowerTier::ClaimResult::kMiss) continue;
      if (r == LowerTier::ClaimResult::kHit) holder = tier;
      break;
    }
    if (holder == nullptr) continue;
    const BlockId block = grouped_->AddEntry(keys[static_cast<size_t>(b)], g, chain.Tokens(b));
    DemoteGroupEntries();  // an entry evicted for it goes down before the load overwrites it
    if (!holder->StartLoad(claim, chain.Tokens(b), block).ok()) {
      grouped_->DropEntry(block);
      continue;
    }
    loads[static_cast<int>(holder->tier())].push_back({block, b});
  }
  // A load that failed (a corrupt or unreadable disk record, which the disk tier forgets)
  // drops its entry: the positions it held are computed again.
  for (LowerTier* tier : below_) {
    const std::vector<GroupLoad>& started = loads[static_cast<int>(tier->tier())];
    const std::vector<absl::Status> loaded = tier->FinishLoads();
    for (size_t r = 0; r < started.size(); ++r) {
      if (r >= loaded.size() || !loaded[r].ok()) {
        grouped_->DropEntry(started[r].block);
        continue;
      }
      held.push_back(started[r].block);
      Tier& t = slowest[static_cast<size_t>(started[r].logical)];
      t = std::max(t, tier->tier());
    }
  }
  for (BlockId block : held) grouped_->Unhold(block);
  const int64_t matched = grouped_->MatchPrefix(
      seq, n, [&](int64_t i) { return keys[static_cast<size_t>(i)]; }, chain.tokens);
  SequenceBlocks& blocks = sequences_[seq];
  for (int64_t b = computed; b < matched; ++b) {
    const int tier = static_cast<int>(slowest[static_cast<size_t>(b)]);
    ++blocks.matched[tier];
    ++ctx_.counters.prefix_hits[tier];
  }
  ctx_.counters.prefix_hit_tokens += std::max<int64_t>(0, matched - computed) * block_tokens();
  return matched * block_tokens();
}

bool KvCacheManager::ReadGroupsAhead(const BlockChain& chain, int64_t started[kNumTiers]) {
  const KvLayerGroups& groups = grouped_->groups();
  const int64_t n = chain.max_blocks();
  bool reading = false;
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    BlockChain group_chain = chain;
    group_chain.group = g;
    const int64_t first = std::min(n, groups.FirstLiveBlock(g, n * block_tokens()));
    reading = ReadChainAhead(group_chain, first, n, ReadAheadOptions{}, started) || reading;
  }
  return reading;
}

}  // namespace kvtier
