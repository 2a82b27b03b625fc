// DiskTier (disk_tier.h): opening and closing the tier, its slots, looking blocks up and
// claiming them for a prefix match, eviction. Writes are in disk_tier_writes.cc, reads in
// disk_tier_reads.cc.
#include "kv/disk_tier.h"

#include <algorithm>

#include "backend/backend.h"
#include "common/status_macros.h"
#include "kv/copy_timer.h"
#include "kv/host_tier.h"

namespace kvtier {
namespace {

// Staging buffers between the device and the disk lanes: async device -> disk copies (the
// bytes land there, the disk write follows when the copy is done) and disk -> device reads
// at a block's use. Few: these are the paths without host room (host tier full of swapped
// blocks, or off); a user that runs out waits for the oldest copy or write.
constexpr int64_t kStagingBlocks = 16;
// Write-behind buffers (device -> buffer -> disk for cached blocks with no host copy): up to
// this many blocks, within kWriteBehindBufferBytes.
constexpr int64_t kWriteBehindBlocks = 16;
constexpr int64_t kWriteBehindBufferBytes = 64ll << 20;

}  // namespace

DiskTier::DiskTier(KvContext* ctx, HostTier* host)
    : SlotTier(ctx, Tier::kDisk, ctx->options.disk_blocks, /*keeps_tokens=*/false),
      host_(host),
      clock_(Clock::OrSteady(ctx->options.clock)),
      read_speed_(kSpeedWindowBlocks * static_cast<int64_t>(ctx->block_bytes)) {
  write_behind_.idle_drain_budget = ctx->options.idle_drain_budget;
}

DiskTier::~DiskTier() {
  ctx_->transfers.CloseDisk();  // no thread uses the store or the buffers after this
  preparer_.reset();
  if (staging_.memory != nullptr) ctx_->backend->FreeHostMemory(staging_.memory);
  if (write_behind_.buffers.memory != nullptr) ctx_->backend->FreeHostMemory(write_behind_.buffers.memory);
}

absl::Status DiskTier::AllocateBuffers(Buffers* buffers, int64_t count) {
  ASSIGN_OR_RETURN(void* memory, ctx_->backend->AllocateHostMemory(static_cast<size_t>(count) * ctx_->block_bytes));
  buffers->memory = static_cast<uint8_t*>(memory);
  buffers->count = static_cast<int32_t>(count);
  for (int32_t i = 0; i < buffers->count; ++i) buffers->free.push_back(i);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Create(KvContext* ctx, HostTier* host) {
  std::unique_ptr<DiskTier> disk(new DiskTier(ctx, host));
  const KvCacheOptions& options = ctx->options;
  if (options.disk_blocks <= 0) return disk;
  const size_t block_bytes = ctx->block_bytes;
  RETURN_IF_ERROR(disk->AllocateBuffers(&disk->staging_, std::min<int64_t>(kStagingBlocks, options.disk_blocks)));
  if (options.write_behind && options.prefix_cache) {
    RETURN_IF_ERROR(disk->AllocateBuffers(
        &disk->write_behind_.buffers,
        std::clamp<int64_t>(kWriteBehindBufferBytes / static_cast<int64_t>(block_bytes), 1, kWriteBehindBlocks)));
  }
  DiskStoreOptions store_options;
  store_options.path = options.disk_path;
  store_options.num_slots = options.disk_blocks;
  store_options.block_bytes = block_bytes;
  store_options.model_fingerprint = options.model_fingerprint;
  store_options.block_tokens = options.block_tokens;
  store_options.io = options.file_io;
  store_options.clock = options.clock;
  // The file's first slots are reserved before Open returns, the rest in the background.
  const int64_t slot_bytes = DiskBlockStore::SlotBytes(block_bytes, options.block_tokens);
  store_options.slots_reserved_at_open = std::max<int64_t>(options.preparation.disk_bytes_at_create, 0) / slot_bytes;
  ASSIGN_OR_RETURN(disk->store_, DiskBlockStore::Open(store_options));
  DiskBlockStore* store = disk->store_.get();
  disk->preparer_ = std::make_unique<ChunkedPreparer>(
      store->slots_in_file_at_open(), options.disk_blocks,
      std::max<int64_t>(1, std::max<int64_t>(options.preparation.disk_chunk_bytes, 0) / slot_bytes),
      [store](int64_t begin, int64_t end) { return store->PreallocateSlots(begin, end); });
  disk->AdmitPreparedSlots();  // before the recovered entries: their slots must be available
  // Prefix blocks persisted by an earlier context over the same file and model (their keys
  // cover the model, layout and namespace; their slots are checked when read).
  for (const DiskIndexEntry& entry : store->recovered_entries()) {
    const int32_t slot = static_cast<int32_t>(entry.slot);
    const BlockHash hash{entry.key};
    if (disk->cache_.Contains(hash) || !disk->cache_.pool().AllocateSpecific(slot)) continue;
    disk->cache_.InsertEvictable(slot, hash, 0);
  }
  ctx->transfers.OpenDisk(store);
  // The disk's read speed, measured now on the reader threads by reading a few of the blocks
  // found (the newest), so that the first load plan splits by it, not by a guess: one read
  // per reader thread (the speed of reads in flight together, as a load plan's are).
  const std::vector<DiskIndexEntry>& found = store->recovered_entries();
  const size_t probes = options.preparation.probe_disk_read_speed ? Transfers::kReaderThreads : 0;
  std::vector<int32_t> slots;
  for (size_t i = found.size(); i > 0 && found.size() - i < probes; --i) {
    slots.push_back(static_cast<int32_t>(found[i - 1].slot));
  }
  disk->SubmitSpeedProbes(slots);
  return disk;
}

void DiskTier::Shutdown() {
  if (!on()) return;
  if (preparer_ != nullptr) preparer_->Cancel();  // the chunk in progress finishes meanwhile
  // The reader writes into host slots: done before they are freed. The writes in flight
  // land (their slots join the cache, so they are persisted below); then the threads stop
  // before the store closes.
  ctx_->transfers.AwaitLane(Lane::kDiskRead);
  ctx_->transfers.AwaitLane(Lane::kDiskWrite);
  ctx_->transfers.CloseDisk();
  preparer_.reset();  // waits for the chunk being reserved: then no thread uses the store
  // Keep what the prefix cache holds for the next context: device and host entries not yet
  // on disk are written there while slots last, from the host copy where there is one.
  BlockPool& slots = cache_.pool();
  for (const BlockHash& hash : ShutdownWriteOrder()) {
    if (slots.num_free() == 0) break;
    const std::optional<int32_t> host_slot = host_->cache().Find(hash);
    const std::optional<int32_t> block = ctx_->device.Find(hash);
    if (cache_.Contains(hash) || (!host_slot && !block)) continue;  // on disk, or no longer cached
    const int32_t disk_slot = *slots.Allocate();
    const absl::Status written =
        host_slot ? store_->Write(disk_slot, hash.digest, host_->cache().tokens(*host_slot), host_->bytes(*host_slot),
                                  DiskBlockStore::Content::kCached)
                  : CopyDeviceToDisk(*block, disk_slot, hash);
    if (written.ok()) {
      cache_.Insert(disk_slot, hash);
    } else {
      slots.Release(disk_slot);
    }
  }
  // The journal holds every block written; a snapshot makes the next open quick.
  (void)store_->Compact();
}

std::vector<BlockHash> DiskTier::ShutdownWriteOrder() const {
  // The cache maps list their entries in hash order, which differs from run to run: written
  // in it, a prompt's blocks would land in scattered slots, and the next context's prefix
  // match (which reads them in prompt order) would read the file out of order.
  std::vector<BlockHash> order;
  for (const auto& [block, hash] : write_behind_.queue) order.push_back(hash);
  for (const TierCache* cache : {&host_->cache(), &ctx_->device}) {
    std::vector<std::pair<int32_t, BlockHash>> entries(cache->entries().begin(), cache->entries().end());
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [slot, hash] : entries) order.push_back(hash);
  }
  return order;
}

absl::Status DiskTier::CopyDeviceToDisk(BlockId block, int32_t disk_slot, const BlockHash& hash) {
  ctx_->DrainCopies();
  CopyTimer timer(&ctx_->counters.copy_seconds);
  ctx_->counters.swap_bytes_timed += static_cast<int64_t>(ctx_->block_bytes);
  // Shutdown only (nothing else in flight): any staging buffer is free.
  const std::optional<int32_t> buffer = AcquireStaging();
  if (!buffer) return absl::InternalError("kv cache: no staging buffer");
  const BlockCopy copy{block, staging(*buffer)};
  absl::Status status = ctx_->backend->CopyBlocksToHost(std::span<const BlockCopy>(&copy, 1));
  if (status.ok()) {
    status = store_->Write(disk_slot, hash.digest, ctx_->device.tokens(block), staging(*buffer),
                           DiskBlockStore::Content::kCached);
  }
  ReleaseStaging(*buffer);
  return status;
}

void DiskTier::AdmitPreparedSlots() {
  if (preparer_ == nullptr) return;
  const bool done = preparer_->done();
  cache_.pool().MakeAvailable(preparer_->ready());
  if (done && !preparation_ended()) NotePreparationEnd(preparer_->status());
}

void DiskTier::WaitUntilPrepared() {
  if (preparer_ != nullptr) preparer_->Wait();
  AdmitPreparedSlots();
}

// ---------------------------------------------------------------- look up

LowerTier::Presence DiskTier::Find(const BlockHash& hash) const {
  if (!cache_.Contains(hash)) return Presence::kAbsent;
  return ctx_->transfers.PrefixReadOf(hash) ? Presence::kLoading : Presence::kStored;
}

bool DiskTier::HasCopy(const BlockHash& hash) const {
  // On disk, or on its way there by write-behind.
  return cache_.Contains(hash) || ctx_->transfers.PersistWriteOf(hash).has_value();
}

bool DiskTier::Settle(const BlockHash& hash, bool landed_only) {
  if (!on()) return true;
  Transfers& transfers = ctx_->transfers;
  // Being read ahead: waited for, then it is a host hit.
  const std::optional<TransferId> read = transfers.PrefixReadOf(hash);
  if (landed_only && read.has_value()) return false;
  transfers.Await(read);
  // Being written since its device eviction: waited for, then a disk hit.
  transfers.Await(transfers.DemoteWriteOf(hash));
  // Its only copy being written by write-behind: the same.
  if (!ctx_->device.Contains(hash) && !host_->cache().Contains(hash)) transfers.Await(transfers.PersistWriteOf(hash));
  return true;
}

// ---------------------------------------------------------------- read into the device

LowerTier::ClaimResult DiskTier::ClaimForLoad(const BlockChain& chain, int64_t i, int64_t, bool landed_only,
                                              Claim* claim) {
  const BlockHash hash = chain.Key(i);
  const std::optional<int32_t> slot = cache_.Find(hash);
  if (!slot) return ClaimResult::kMiss;
  if (landed_only) return ClaimResult::kStop;  // a disk read would be waited for
  // Until read (FinishLoads), out of the LRU: neither evicted nor reused.
  cache_.lru().Erase(*slot);
  *claim = Claim{hash, *slot, nullptr};
  return ClaimResult::kHit;
}

absl::Status DiskTier::StartLoad(const Claim& claim, std::span<const int32_t> tokens, BlockId block) {
  loads_.push_back({claim.slot, claim.hash.digest, Tokens(tokens.begin(), tokens.end()), block});
  load_keys_.push_back(claim.hash);
  return absl::OkStatus();
}

void DiskTier::Unclaim(const Claim& claim) { cache_.lru().PushBack(claim.slot, ctx_->priorities.Of(claim.hash)); }

std::vector<absl::Status> DiskTier::FinishLoads() {
  const std::vector<absl::Status> read = ReadToDevice(loads_);
  for (size_t r = 0; r < loads_.size(); ++r) {
    if (absl::IsDataLoss(read[r]) || absl::IsNotFound(read[r])) {  // never used as data: forget the slot
      ForgetSlot(loads_[r].disk_slot);
    } else {
      cache_.lru().PushBack(loads_[r].disk_slot, ctx_->priorities.Of(load_keys_[r]));  // the disk copy stays cached
    }
  }
  loads_.clear();
  load_keys_.clear();
  return read;
}

std::optional<int32_t> DiskTier::AcquireStaging() {
  Transfers& transfers = ctx_->transfers;
  // Landing the oldest copies writes their staged blocks to disk (or frees the buffers).
  while (staging_.free.empty() && transfers.num_copy_batches() > 0) transfers.Await(transfers.oldest_copy());
  // Or the oldest disk write still holding its buffer (the writer finishes in order).
  while (staging_.free.empty() && transfers.disk_open()) {
    std::optional<TransferId> oldest;
    auto older = [&](TransferId id) {
      if (!oldest || id.seq < oldest->seq) oldest = id;
    };
    transfers.ForEach<SwapWriteJob>([&](TransferId id, const SwapWriteJob&) { older(id); });
    transfers.ForEach<DemoteWriteJob>([&](TransferId id, const DemoteWriteJob&) { older(id); });
    if (!oldest) break;
    transfers.Await(oldest);
  }
  if (staging_.free.empty()) return std::nullopt;
  const int32_t buffer = staging_.free.back();
  staging_.free.pop_back();
  return buffer;
}

// ---------------------------------------------------------------- evict

void DiskTier::Evict(int32_t) {
  ++ctx_->counters.blocks_demoted[static_cast<int>(Tier::kDisk)];
  ++ctx_->counters.blocks_dropped;  // the last tier with slots drops it
}

void DiskTier::CacheBlock(int32_t disk_slot, const BlockHash& hash) {
  cache_.InsertEvictable(disk_slot, hash, ctx_->priorities.Of(hash));
}

void DiskTier::ForgetSlot(int32_t disk_slot) {
  ctx_->Uncache(cache_, disk_slot);
  cache_.pool().Release(disk_slot);
  store_->Forget(disk_slot);
}

}  // namespace kvtier
