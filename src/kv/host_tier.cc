// Implementation of HostTier (host_tier.h).
#include "kv/host_tier.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "backend/backend.h"
#include "common/status_macros.h"
#include "kv/copy_timer.h"
#include "kv/disk_tier.h"

namespace kvtier {

HostTier::HostTier(KvContext* ctx) : SlotTier(ctx, Tier::kHost, ctx->options.host_blocks, /*keeps_tokens=*/true) {}

HostTier::~HostTier() = default;

absl::StatusOr<std::unique_ptr<HostTier>> HostTier::Create(KvContext* ctx) {
  std::unique_ptr<HostTier> host(new HostTier(ctx));
  const KvCacheOptions& options = ctx->options;
  if (options.host_blocks > 0) {
    // Reserved now, pinned in the background (see the top).
    const TierPreparationOptions& p = options.preparation;
    ASSIGN_OR_RETURN(host->region_,
                     HostTierMemory::Create(ctx->backend, static_cast<size_t>(options.host_blocks) * ctx->block_bytes,
                                            static_cast<size_t>(std::max<int64_t>(p.host_chunk_bytes, 1)),
                                            ctx->block_bytes, p.pin_host_at_create,
                                            HostPinSchedule{static_cast<size_t>(std::max<int64_t>(p.host_bytes_at_create, 0)),
                                                            p.host_pin_bytes_per_second}));
    host->memory_ = host->region_->base();
  }
  return host;
}

void HostTier::AdmitPreparedSlots() {
  if (region_ == nullptr) return;
  // done() first: a preparation done then has its final ready_bytes() already.
  const bool done = region_->done();
  cache_.pool().MakeAvailable(static_cast<int64_t>(region_->ready_bytes() / ctx_->block_bytes));
  if (done && !preparation_ended()) NotePreparationEnd(region_->status());
}

void HostTier::WaitUntilPrepared() {
  if (region_ != nullptr) region_->WaitUntilDone();
  AdmitPreparedSlots();
}

absl::Status HostTier::CopyToDevice(int32_t slot, BlockId block) {
  ctx_->DrainCopies();
  CopyTimer timer(&ctx_->counters.copy_seconds);
  ctx_->counters.swap_bytes_timed += static_cast<int64_t>(ctx_->block_bytes);
  const BlockCopy copy{block, bytes(slot)};
  return ctx_->backend->CopyBlocksFromHost(std::span<const BlockCopy>(&copy, 1));
}

std::optional<int32_t> HostTier::TakeSlotForRead(int64_t* budget) {
  if (*budget <= 0) return std::nullopt;
  std::optional<int32_t> slot = TakeSlot(/*may_wait=*/false);
  if (slot) --*budget;
  return slot;
}

// ---------------------------------------------------------------- read into the device

LowerTier::ClaimResult HostTier::ClaimForLoad(const BlockChain& chain, int64_t i, int64_t, bool, Claim* claim) {
  const BlockHash hash = chain.Key(i);
  const std::optional<int32_t> slot = cache_.Find(hash);
  if (!slot) return ClaimResult::kMiss;
  if (!cache_.TokensMatch(*slot, chain.Tokens(i))) {
    ++ctx_->counters.prefix_token_mismatch;
    return ClaimResult::kStop;
  }
  cache_.lru().Erase(*slot);  // not evictable while it is read
  *claim = Claim{hash, *slot, bytes(*slot)};
  return ClaimResult::kHit;
}

absl::Status HostTier::StartLoad(const Claim& claim, std::span<const int32_t>, BlockId block) {
  const absl::Status copied = CopyToDevice(claim.slot, block);
  cache_.lru().PushBack(claim.slot, ctx_->priorities.Of(claim.hash));  // the host copy stays cached too
  if (copied.ok()) ++loads_started_;
  return copied;
}

void HostTier::Unclaim(const Claim& claim) { cache_.lru().PushBack(claim.slot, ctx_->priorities.Of(claim.hash)); }

std::vector<absl::Status> HostTier::FinishLoads() {
  std::vector<absl::Status> done(static_cast<size_t>(loads_started_));
  loads_started_ = 0;
  return done;
}

// ---------------------------------------------------------------- write from the device

void HostTier::QueueWrite(BlockId block, const BlockHash& hash, bool computed) {
  // Written back while its sequence runs, when the host tier has room for a copy of the
  // whole device tier (else only the coldest unreferenced blocks are, see StartWrites).
  // Bounded: stale entries are skipped there.
  if (!computed || num_blocks() < ctx_->device.num_blocks()) return;
  writeback_queue_.push_back({block, hash});
  if (static_cast<int64_t>(writeback_queue_.size()) > 2 * ctx_->device.num_blocks()) writeback_queue_.pop_front();
}

int64_t HostTier::WriteBackBudget() const {
  // Per step: enough to keep ahead of the blocks a step caches or evicts (a full-budget
  // prefill step caches max_tokens_per_step / block_tokens), small enough that one batch
  // of host copies fits inside a forward (blocks of an 8B model are megabytes each).
  return std::max<int64_t>(64, ctx_->device.num_blocks() / 8);
}

void HostTier::StartWrites(WritePhase phase) {
  if (phase != WritePhase::kBeforeForward || !on() || !ctx_->options.prefix_cache) return;
  const int64_t budget = WriteBackBudget();
  int64_t taken = 0;
  const TierCache& device = ctx_->device;
  // Two batches: the coldest unreferenced blocks (the next victims: their batch lands first,
  // so an early eviction waits for it only), then blocks cached since earlier calls that
  // running sequences still hold: immutable too, and the victims once their sequence
  // finishes. Host work stays O(budget + newly cached blocks) per step.
  std::vector<Transfers::Copy> cold, held;
  absl::flat_hash_set<BlockId> chosen;
  auto consider = [&](BlockId block, std::vector<Transfers::Copy>* out) {
    const BlockHash* hash = device.KeyOf(block);
    if (hash == nullptr || HasCopy(*hash) || (disk_ != nullptr && disk_->HasCopy(*hash)) ||
        ctx_->transfers.ReadingBatch(block) || !chosen.insert(block).second) {
      return;
    }
    const std::span<const int32_t> tokens = device.tokens(block);
    out->push_back({HostWriteBackCopy{block, -1, *hash, Tokens(tokens.begin(), tokens.end()),
                                      ctx_->priorities.Of(*hash), /*evicted=*/false},
                    block, nullptr});
    ++taken;
  };
  int64_t examined = 0;  // the next `budget` victims, clean or not
  device.lru().ForEachInEvictionOrder([&](int32_t block) {
    if (examined++ >= budget) return false;
    consider(block, &cold);
    return true;
  });
  while (taken < budget && !writeback_queue_.empty()) {
    const auto [block, hash] = writeback_queue_.front();
    writeback_queue_.pop_front();
    const BlockHash* now = device.KeyOf(block);
    if (now != nullptr && *now == hash) consider(block, &held);
  }
  for (std::vector<Transfers::Copy>* batch : {&cold, &held}) {
    size_t n = 0;
    for (; n < batch->size(); ++n) {
      // May demote a host LRU entry to disk, as the eviction of this block would later.
      std::optional<int32_t> slot = TakeSlot();
      if (!slot) break;
      std::get<HostWriteBackCopy>((*batch)[n].transfer).host_slot = *slot;
      (*batch)[n].destination = bytes(*slot);
    }
    batch->resize(n);
    if (batch->empty()) continue;
    std::vector<int32_t> slots;
    for (const Transfers::Copy& c : *batch) slots.push_back(std::get<HostWriteBackCopy>(c.transfer).host_slot);
    if (!ctx_->transfers.StartCopies(std::move(*batch)).ok()) {
      for (int32_t slot : slots) cache_.pool().Release(slot);
      break;
    }
  }
  ctx_->transfers.Land(LaneBit(Lane::kCopy));  // synchronous backends: landed already
}

std::vector<DirtyVictim> HostTier::TakeDeviceVictims(std::vector<DirtyVictim> victims) {
  std::vector<Transfers::Copy> copies;
  std::vector<DirtyVictim> rest;
  for (DirtyVictim& v : victims) {
    std::optional<int32_t> slot = TakeSlot();
    if (!slot) {
      rest.push_back(std::move(v));
      continue;
    }
    copies.push_back({HostWriteBackCopy{v.block, *slot, v.hash, std::move(v.tokens), v.priority, /*evicted=*/true},
                      v.block, bytes(*slot)});
  }
  if (copies.empty()) return rest;
  std::vector<HostWriteBackCopy> started;
  for (const Transfers::Copy& c : copies) started.push_back(std::get<HostWriteBackCopy>(c.transfer));
  const absl::StatusOr<int64_t> batch_id = ctx_->transfers.StartCopies(std::move(copies));
  if (batch_id.ok()) {
    ctx_->transfers.Await(Transfers::CopyBatch(*batch_id));  // lands them in the host cache (or counts them dropped)
    return rest;
  }
  for (HostWriteBackCopy& c : started) {
    cache_.pool().Release(c.host_slot);
    rest.push_back({c.block, c.hash, c.priority, std::move(c.tokens)});
  }
  return rest;
}

void HostTier::Land(Transfers::Landed& landed) {
  const HostWriteBackCopy& copy = std::get<HostWriteBackCopy>(landed.transfer);
  const absl::Status& status = landed.status;
  if (status.ok() && !cache_.Contains(copy.hash)) {
    ctx_->priorities.Raise(copy.hash, copy.priority);
    cache_.InsertEvictable(copy.host_slot, copy.hash, ctx_->priorities.Of(copy.hash), copy.tokens);
    if (!copy.evicted) ++ctx_->counters.blocks_written_back;
    return;
  }
  cache_.pool().Release(copy.host_slot);
  if (!status.ok() && copy.evicted) ++ctx_->counters.blocks_dropped;
}

// ---------------------------------------------------------------- evict

void HostTier::Evict(int32_t slot) {
  ++ctx_->counters.blocks_demoted[static_cast<int>(Tier::kHost)];
  if (disk_ == nullptr || disk_->num_blocks() == 0) {  // the last tier drops it
    ++ctx_->counters.blocks_dropped;
    return;
  }
  disk_->TakeHostVictim(slot, *cache_.KeyOf(slot));
}

bool HostTier::EvictsWithoutWaiting(int32_t slot) const {
  if (disk_ == nullptr || disk_->num_blocks() == 0) return true;  // dropped
  const BlockHash& hash = *cache_.KeyOf(slot);
  const Transfers& t = ctx_->transfers;
  if (t.WriteBackOfHostSlot(slot) || t.DemoteWriteOf(hash) || t.PersistWriteOf(hash)) return false;
  return disk_->cache().Contains(hash);  // else written at its eviction
}

}  // namespace kvtier
