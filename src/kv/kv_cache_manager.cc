// KvCacheManager (kv_cache_manager.h): creation and shutdown, block tables, the device
// tier's cache and its eviction, pins, the step's calls to the tiers, and the statistics.
#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "common/status_macros.h"
#include "kv/tier_budgets.h"
#include "model/stable_hash.h"
#include "remote/remote_block_store.h"

namespace kvtier {
namespace {

// Distinct for every manager created, in this process or another.
uint64_t NewInstanceTag() {
  static std::atomic<uint64_t> counter{0};
  std::random_device device;
  const uint64_t random = (static_cast<uint64_t>(device()) << 32) ^ device();
  const uint64_t time = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return SplitMix64(random ^ SplitMix64(time + counter.fetch_add(1)));
}

}  // namespace

KvCacheManager::KvCacheManager(const KvCacheOptions& options, Backend* backend)
    : ctx_(options, backend, backend->kv_layout().BlockBytes()),
      instance_tag_(NewInstanceTag()),
      default_scope_(BlockKeyScope(options.model_fingerprint, backend->kv_layout(), "")) {}

absl::StatusOr<std::unique_ptr<KvCacheManager>> KvCacheManager::Create(const KvCacheOptions& options,
                                                                       Backend* backend) {
  if (backend->num_kv_blocks() != options.device_blocks) {
    return absl::InternalError(absl::StrCat("device pool has ", backend->num_kv_blocks(), " blocks, expected ",
                                            options.device_blocks));
  }
  if (options.disk_blocks > 0 && options.disk_path.empty()) {
    return absl::InvalidArgumentError("the disk tier needs a disk_path");
  }
  // Before the pools' bookkeeping (proportional to the block counts) is allocated.
  const size_t block_bytes = backend->kv_layout().BlockBytes();
  RETURN_IF_ERROR(CheckTierBudgetsFit(options.host_blocks * static_cast<int64_t>(block_bytes),
                                      options.disk_blocks * DiskBlockStore::SlotBytes(block_bytes, options.block_tokens),
                                      options.disk_path, options.file_io));
  std::unique_ptr<KvCacheManager> kv(new KvCacheManager(options, backend));
  if (options.layer_groups.has_value()) {
    // The host and disk tiers take grouped sequences' swaps (kv_cache_swap.cc) and the group
    // entries the device evicts, the remote tier those computed (kv_cache_grouped_prefix.cc).
    ASSIGN_OR_RETURN(GroupedBlockTables tables, GroupedBlockTables::Create(*options.layer_groups, options.device_blocks));
    kv->grouped_.emplace(std::move(tables));
    kv->ctx_.grouped = &*kv->grouped_;
  }
  KvCacheManager* self = kv.get();
  kv->ctx_.transfers.set_land([self](Transfers::Landed& landed) { self->Land(landed); });
  // The host tier first: its pinning then runs while the disk tier's index is read.
  ASSIGN_OR_RETURN(kv->host_, HostTier::Create(&kv->ctx_));
  ASSIGN_OR_RETURN(kv->disk_, DiskTier::Create(&kv->ctx_, kv->host_.get()));
  kv->host_->set_below(kv->disk_.get());
  ASSIGN_OR_RETURN(kv->remote_, RemoteTier::Create(&kv->ctx_, kv->host_.get()));
  kv->ctx_.caches = {&kv->ctx_.device, &kv->host_->cache(), &kv->disk_->cache()};
  kv->below_ = {kv->host_.get(), kv->disk_.get()};
  if (kv->remote_ != nullptr) kv->below_.push_back(kv->remote_.get());
  kv->slot_tiers_ = {kv->host_.get(), kv->disk_.get()};
  kv->AdmitPreparedSlots();
  return kv;
}

KvCacheManager::~KvCacheManager() {
  below_.clear();
  // Blocks computed here reach the remote tier for the other processes (each batch bounded
  // by its timeout; nothing when it is off).
  remote_.reset();
  // Nothing more is prepared: the chunk in progress finishes while the rest is drained.
  if (host_ != nullptr) host_->CancelPinning();
  ctx_.DrainCopies();  // lands swap-outs and write-backs (the host slots they fill are freed below)
  if (disk_ != nullptr) disk_->Shutdown();
  disk_.reset();
  host_.reset();  // unpins what was pinned, releases the region
}

BlockKeyChain KvCacheManager::KeyChain(std::string_view cache_namespace) const {
  if (cache_namespace.empty()) return BlockKeyChain(default_scope_);
  return BlockKeyChain(BlockKeyScope(ctx_.options.model_fingerprint, ctx_.backend->kv_layout(), cache_namespace));
}

BlockChain KvCacheManager::Chain(std::span<const int32_t> tokens, BlockKeyChain* keys,
                                 std::optional<BlockKeyChain>* own) const {
  if (keys == nullptr) keys = &own->emplace(default_scope_);
  return BlockChain{tokens, keys, block_tokens()};
}

// ---------------------------------------------------------------- block tables

int64_t KvCacheManager::NewBlocksNeeded(SequenceId seq, int64_t num_tokens) const {
  if (grouped_) return grouped_->NewBlocksNeeded(seq, num_tokens);
  auto it = sequences_.find(seq);
  const int64_t have =
      it == sequences_.end() ? 0 : static_cast<int64_t>(it->second.host_slots.size() + it->second.table.size());
  return std::max<int64_t>(0, BlocksForTokens(num_tokens) - have);
}

std::span<const BlockId> KvCacheManager::BlockTable(SequenceId seq) const {
  if (grouped_) return grouped_->Table(seq, 0).blocks;
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return {};
  return it->second.table;
}

int64_t KvCacheManager::SwappedBlocks(SequenceId seq) const {
  auto it = swapped_.find(seq);
  return it == swapped_.end() ? 0 : static_cast<int64_t>(it->second.slots.size());
}

absl::Status KvCacheManager::Reserve(SequenceId seq, int64_t num_tokens) {
  if (grouped_) {
    RETURN_IF_ERROR(grouped_->Reserve(seq, num_tokens));
    DemoteGroupEntries();
    return absl::OkStatus();
  }
  const int64_t need = NewBlocksNeeded(seq, num_tokens);
  if (need > num_available_device_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("sequence ", seq, " needs ", need, " more KV blocks, ",
                                                     num_available_device_blocks(), " available"));
  }
  const std::vector<BlockId> blocks = AllocateDeviceBlocks(need);
  std::vector<BlockId>& table = sequences_[seq].table;
  table.insert(table.end(), blocks.begin(), blocks.end());
  return absl::OkStatus();
}

void KvCacheManager::Release(SequenceId seq) {
  if (grouped_) grouped_->Release(seq);
  if (auto it = sequences_.find(seq); it != sequences_.end()) {
    for (BlockId block : it->second.table) ReleaseDeviceBlock(block);
    for (int32_t slot : it->second.host_slots) host_->cache().pool().Release(slot);
    sequences_.erase(it);
  }
  if (auto it = swapped_.find(seq); it != swapped_.end()) {
    // Copies still filling these slots are ignored when they land (LandSwapCopy).
    for (const SlotRef& ref : it->second.slots) {
      // A disk slot being read ahead or written is freed by its transfer when it lands.
      if (ref.tier == Tier::kDisk &&
          (ctx_.transfers.ReadOnSlot(ref.slot) || ctx_.transfers.SwapWriteOnSlot(ref.slot))) {
        continue;
      }
      (ref.tier == Tier::kHost ? host_->cache() : disk_->cache()).pool().Release(ref.slot);
    }
    swapped_.erase(it);
  }
}

void KvCacheManager::OnComputed(SequenceId seq, std::span<const int32_t> tokens, int64_t num_computed,
                                int32_t priority, BlockKeyChain* keys) {
  if (grouped_) {
    // Full blocks become prefix entries first, so the windowed groups' blocks that no later
    // query reads, which then go back, stay reusable by a new sequence until evicted.
    if (ctx_.options.prefix_cache) {
      std::optional<BlockKeyChain> own;
      const BlockChain chain = Chain(tokens, keys, &own);
      const std::vector<BlockId> made = grouped_->CacheFullBlocks(
          seq, num_computed / block_tokens(), [&](int64_t i) { return chain.Key(i); }, tokens);
      QueueGroupEntries(made);
    }
    grouped_->OnComputed(seq, num_computed);
    return;
  }
  if (!ctx_.options.prefix_cache) return;
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  SequenceBlocks& blocks = it->second;
  const int64_t on_host = static_cast<int64_t>(blocks.host_slots.size());
  const int64_t full =
      std::min<int64_t>(num_computed / block_tokens(), on_host + static_cast<int64_t>(blocks.table.size()));
  if (static_cast<int64_t>(blocks.hashes.size()) >= full) return;
  std::optional<BlockKeyChain> own;
  const BlockChain chain = Chain(tokens, keys, &own);
  for (int64_t i = static_cast<int64_t>(blocks.hashes.size()); i < full; ++i) {
    const BlockHash hash = chain.Key(i);
    blocks.hashes.push_back(hash);
    // Only computed blocks move to the host, so they were cached before they moved.
    if (i < on_host) continue;
    const BlockId block = blocks.table[static_cast<size_t>(i - on_host)];
    if (ctx_.device.Contains(hash) || ctx_.device.IsCached(block)) continue;
    ctx_.priorities.Raise(hash, priority);
    CacheOnDevice(block, hash, chain.Tokens(i), /*computed=*/true);
  }
}

void KvCacheManager::CacheOnDevice(BlockId block, const BlockHash& hash, std::span<const int32_t> tokens,
                                   bool computed) {
  ctx_.device.Insert(block, hash, tokens);
  ctx_.device.pool().AddRef(block);  // the cache's own reference
  for (LowerTier* tier : below_) tier->QueueWrite(block, hash, computed);
}

void KvCacheManager::ReleaseDeviceBlock(BlockId block) {
  TierCache& device = ctx_.device;
  device.pool().Release(block);
  const BlockHash* cached = device.KeyOf(block);
  if (cached != nullptr && device.pool().ref_count(block) == 1) {
    device.lru().PushBack(block, ctx_.priorities.Of(*cached));
  }
}

std::vector<BlockId> KvCacheManager::AllocateDeviceBlocks(int64_t n) {
  Transfers& transfers = ctx_.transfers;
  TierCache& device = ctx_.device;
  transfers.Land(LaneBit(Lane::kCopy));
  std::vector<BlockId> blocks;
  std::vector<DirtyVictim> dirty;
  int64_t wait_batch = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::optional<BlockId> id = device.pool().Allocate();
    if (!id) {
      const std::optional<int32_t> victim = device.lru().PopFront();
      if (!victim) break;  // callers check num_available_device_blocks first
      // A write-back of the victim still in flight lands first: then it needs no copy.
      if (const std::optional<int64_t> t = transfers.ReadingBatch(*victim)) {
        transfers.Await(Transfers::CopyBatch(*t));
      }
      NoteDeviceVictim(*victim, *device.KeyOf(*victim), device.tokens(*victim), &dirty);
      ctx_.Uncache(device, *victim);
      device.pool().Release(*victim);  // the cache's reference: the block is free now
      id = device.pool().Allocate();   // the victim itself (the free queue was empty)
    }
    // Freed while an async copy (a swap-out) still reads it: FIFO reuse makes that the last
    // resort, and the wait then covers only the small first batches of the swap-out.
    if (const std::optional<int64_t> t = transfers.ReadingBatch(*id)) wait_batch = std::max(wait_batch, *t);
    blocks.push_back(*id);
  }
  if (wait_batch > 0) transfers.Await(Transfers::CopyBatch(wait_batch));
  // Victims are copied down before this returns: the caller's forward may overwrite them.
  CopyVictimsDown(std::move(dirty));
  return blocks;
}

void KvCacheManager::NoteDeviceVictim(BlockId block, const BlockHash& hash, std::span<const int32_t> tokens,
                                      std::vector<DirtyVictim>* dirty) {
  ++ctx_.counters.blocks_demoted[static_cast<int>(Tier::kDevice)];
  const bool has_copy = std::any_of(below_.begin(), below_.end(), [&](const LowerTier* t) { return t->HasCopy(hash); });
  if (has_copy) return;  // already a tier down (written back ahead, or demoted before): nothing to copy
  if (host_->on() || disk_->on()) {
    dirty->push_back({block, hash, ctx_.priorities.Of(hash), Tokens(tokens.begin(), tokens.end())});
  } else {
    ++ctx_.counters.blocks_dropped;
  }
}

void KvCacheManager::CopyVictimsDown(std::vector<DirtyVictim> dirty) {
  if (dirty.empty()) return;
  ctx_.counters.evictions_copied += static_cast<int64_t>(dirty.size());
  for (SlotTier* tier : slot_tiers_) dirty = tier->TakeDeviceVictims(std::move(dirty));
  ctx_.counters.blocks_dropped += static_cast<int64_t>(dirty.size());
}

void KvCacheManager::PinPrefix(SequenceId seq, int64_t num_blocks, std::span<const int32_t> tokens,
                               BlockKeyChain* keys) {
  if (grouped_) {
    if (!ctx_.options.prefix_cache) return;
    std::optional<BlockKeyChain> own;
    const BlockChain chain = Chain(tokens, keys, &own);
    grouped_->PinPrefix(num_blocks, [&](int64_t i) { return chain.Key(i); }, tokens);
    return;
  }
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  const SequenceBlocks& blocks = it->second;
  const int64_t n = std::min<int64_t>(num_blocks, static_cast<int64_t>(blocks.hashes.size()));
  for (int64_t i = 0; i < n; ++i) {
    const BlockHash& hash = blocks.hashes[static_cast<size_t>(i)];
    const std::optional<int32_t> cached = ctx_.device.Find(hash);
    if (pinned_.contains(hash) || !cached) continue;
    ctx_.device.pool().AddRef(*cached);
    ctx_.device.lru().Erase(*cached);
    pinned_[hash] = *cached;
  }
}

void KvCacheManager::UnpinAll() {
  if (grouped_) grouped_->UnpinAll();
  for (const auto& [hash, block] : pinned_) ReleaseDeviceBlock(block);
  pinned_.clear();
}

// ---------------------------------------------------------------- the step

void KvCacheManager::AdmitPreparedSlots() {
  for (SlotTier* tier : slot_tiers_) tier->AdmitPreparedSlots();
}

void KvCacheManager::StartBackgroundCopies() {
  AdmitPreparedSlots();
  ctx_.transfers.Land(LaneBit(Lane::kCopy) | kDiskLanes);
  for (LowerTier* tier : below_) tier->StartWrites(WritePhase::kBeforeForward);
}

void KvCacheManager::FinishStep(bool idle) {
  ctx_.transfers.Land(LaneBit(Lane::kCopy) | kDiskLanes);
  for (LowerTier* tier : below_) tier->StartWrites(idle ? WritePhase::kIdleStep : WritePhase::kStepEnd);
}

int64_t KvCacheManager::PumpIdleWrites() {
  ctx_.transfers.Land(LaneBit(Lane::kCopy) | kDiskLanes);
  int64_t left = 0;
  for (LowerTier* tier : below_) tier->StartWrites(WritePhase::kIdlePump);
  for (LowerTier* tier : below_) left += tier->WritesToPump();
  return left;
}

absl::Status KvCacheManager::WaitForPrefetches() { return ctx_.backend->WaitForPrefetches(); }

// ---------------------------------------------------------------- statistics

KvStats KvCacheManager::Stats() const {
  KvStats stats;
  stats.block_bytes = ctx_.block_bytes;
  const Transfers& t = ctx_.transfers;
  // Slots held for cache content, not by a sequence: host slots being filled by a
  // write-back, disk slots being written.
  const int64_t cache_content[kNumSlotTiers] = {
      0, t.Count<HostWriteBackCopy>(),
      t.Count<WriteBackJob>() + t.Count<DemoteWriteJob>() + t.Count<PersistWriteJob>() + t.Count<PersistCopy>() +
          t.Count<DemoteCopy>()};
  for (int i = 0; i < kNumSlotTiers; ++i) {
    const TierCache& cache = *ctx_.caches[static_cast<size_t>(i)];
    KvTierStats& s = stats.tiers[i];
    s.capacity_blocks = cache.num_blocks();
    s.used_blocks = cache.pool().num_used() - cache.lru().size() - cache_content[i];
    s.cached_blocks = cache.num_cached();
    s.peak_blocks = cache.pool().peak_used();
    s.ready_blocks = cache.pool().num_available();
  }
  stats.tiers[static_cast<int>(Tier::kHost)].preparation_error = host_->preparation_error();
  stats.tiers[static_cast<int>(Tier::kDisk)].preparation_error = disk_->preparation_error();
  stats.counters = ctx_.counters;
  stats.pinned_blocks = num_pinned_blocks();
  if (grouped_) {
    stats.layer_groups = grouped_->Stats();
    // The one pool of group blocks is the device tier's capacity.
    KvTierStats& device = stats.tiers[static_cast<int>(Tier::kDevice)];
    device.capacity_blocks = stats.layer_groups.capacity_blocks;
    device.used_blocks = stats.layer_groups.used_blocks;
    device.peak_blocks = stats.layer_groups.peak_blocks;
    device.ready_blocks = grouped_->num_free();
    device.cached_blocks = stats.layer_groups.cached_blocks;
  }
  if (disk_->on()) {
    stats.disk_store = disk_->store()->counters();
    stats.disk_index_ignored_reason = disk_->store()->index_ignored_reason();
    stats.disk_read_bytes_per_second = disk_->ReadBytesPerSecond();
  }
  stats.pending_disk_writes = disk_->PendingWrites();
  if (remote_ != nullptr) {
    stats.remote_enabled = true;
    stats.remote = remote_->store().counters();
    stats.pending_remote_writes = remote_->PendingWrites();
  }
  return stats;
}

}  // namespace kvtier
