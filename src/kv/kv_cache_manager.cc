// Implementation of KvCacheManager (kv_cache_manager.h).
#include "kv/copy_timer.h"
#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "common/errors.h"
#include "common/status_macros.h"
#include "kv/tier_budgets.h"
#include "model/stable_hash.h"
#include "remote/remote_block_store.h"
#include "storage/disk_block_store.h"

namespace kvtier {
namespace {

// Staging buffers between the device and the disk I/O threads: async device -> disk copies
// (the bytes land there, the disk write follows when the copy is done) and disk -> device
// reads at a block's use. Few: these are the paths without host room (host tier full of
// swapped blocks, or off); a user that runs out waits for the oldest copy or write.
constexpr int64_t kStagingBlocks = 16;
// Reads that measure the disk's read speed at creation (one per reader thread: the speed of
// reads in flight together, as a load plan's are; few, as a prompt's reads queue behind them).
constexpr size_t kSpeedProbeReads = DiskJobs::kReaderThreads;
// Write-behind buffers (device -> buffer -> disk for cached blocks with no host copy): up to
// this many blocks, within kWriteBehindBufferBytes.
constexpr int64_t kWriteBehindBlocks = 16;
constexpr int64_t kWriteBehindBufferBytes = 64ll << 20;

}  // namespace

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

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kDevice: return "gpu";
    case Tier::kHost: return "host";
    case Tier::kDisk: return "disk";
  }
  return "?";
}

KvCacheManager::KvCacheManager(const KvCacheOptions& options, Backend* backend)
    : options_(options),
      backend_(backend),
      block_bytes_(backend->kv_layout().BlockBytes()),
      // The lower tiers' slots become available as they are prepared (AdmitPreparedSlots).
      tiers_{TierState(options.device_blocks, options.device_blocks, options.block_tokens),
             TierState(options.host_blocks, 0, options.block_tokens), TierState(options.disk_blocks, 0, 0)},
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
  if (options.host_blocks > 0) {
    // Reserved now, pinned in the background (see the top of kv_cache_manager.h).
    ASSIGN_OR_RETURN(kv->host_region_,
                     HostTierMemory::Create(backend, static_cast<size_t>(options.host_blocks) * kv->block_bytes_,
                                            static_cast<size_t>(std::max<int64_t>(options.preparation.host_chunk_bytes, 1)),
                                            kv->block_bytes_, options.preparation.pin_host_at_create,
                                            HostPinSchedule{static_cast<size_t>(std::max<int64_t>(
                                                                options.preparation.host_bytes_at_create, 0)),
                                                            options.preparation.host_pin_bytes_per_second}));
    kv->host_memory_ = kv->host_region_->base();
  }
  if (options.disk_blocks > 0) {
    const int64_t staging = std::min<int64_t>(kStagingBlocks, options.disk_blocks);
    ASSIGN_OR_RETURN(void* memory, backend->AllocateHostMemory(static_cast<size_t>(staging) * kv->block_bytes_));
    kv->staging_.memory = static_cast<uint8_t*>(memory);
    for (int32_t i = 0; i < staging; ++i) kv->staging_.free.push_back(i);
    kv->staging_.count = static_cast<int32_t>(staging);
    if (options.write_behind && options.prefix_cache) {
      const int64_t buffers = std::clamp<int64_t>(kWriteBehindBufferBytes / static_cast<int64_t>(kv->block_bytes_), 1,
                                                  kWriteBehindBlocks);
      ASSIGN_OR_RETURN(void* buffer_memory,
                       backend->AllocateHostMemory(static_cast<size_t>(buffers) * kv->block_bytes_));
      StagingBuffers& wb = kv->write_behind_.buffers;
      wb.memory = static_cast<uint8_t*>(buffer_memory);
      wb.count = static_cast<int32_t>(buffers);
      for (int32_t i = 0; i < wb.count; ++i) wb.free.push_back(i);
    }
    DiskStoreOptions disk;
    disk.path = options.disk_path;
    disk.num_slots = options.disk_blocks;
    disk.block_bytes = kv->block_bytes_;
    disk.model_fingerprint = options.model_fingerprint;
    disk.block_tokens = options.block_tokens;
    disk.io = options.file_io;
    // The file's first slots are reserved before Open returns, the rest in the background.
    const int64_t slot_bytes = DiskBlockStore::SlotBytes(kv->block_bytes_, options.block_tokens);
    disk.slots_reserved_at_open = std::max<int64_t>(options.preparation.disk_bytes_at_create, 0) / slot_bytes;
    ASSIGN_OR_RETURN(kv->disk_tier_.store, DiskBlockStore::Open(disk));
    DiskBlockStore* store = kv->disk_tier_.store.get();
    kv->disk_tier_.preparer = std::make_unique<ChunkedPreparer>(
        store->slots_in_file_at_open(), options.disk_blocks,
        std::max<int64_t>(1, std::max<int64_t>(options.preparation.disk_chunk_bytes, 0) / slot_bytes),
        [store](int64_t begin, int64_t end) { return store->PreallocateSlots(begin, end); });
    kv->AdmitPreparedSlots();  // before the recovered entries: their slots must be available
    // Prefix blocks persisted by an earlier context over the same file and model (their
    // keys cover the model, layout and namespace; their slots are checked when read).
    for (const DiskIndexEntry& entry : kv->disk_tier_.store->recovered_entries()) {
      const int32_t slot = static_cast<int32_t>(entry.slot);
      const BlockHash hash{entry.key};
      if (kv->state(Tier::kDisk).by_hash.contains(hash) || !kv->pool(Tier::kDisk).AllocateSpecific(slot)) {
        continue;
      }
      kv->state(Tier::kDisk).by_hash[hash] = slot;
      kv->state(Tier::kDisk).hash_of[slot] = hash;
      kv->lru(Tier::kDisk).PushBack(slot);
    }
    // Disk writes (swapped and demoted blocks; with a host tier, the write-back of cached
    // host blocks) and reads (read-ahead into host slots, with a host tier; staged reads at
    // a block's use) leave the stepping thread.
    kv->disk_tier_.jobs = std::make_unique<DiskJobs>(kv->disk_tier_.store.get());
    // The disk's read speed, measured now on the reader threads by reading a few of the
    // blocks found (the newest), so that the first load plan splits by it, not by a guess.
    const std::vector<DiskIndexEntry>& found = kv->disk_tier_.store->recovered_entries();
    const size_t probes = options.preparation.probe_disk_read_speed ? kSpeedProbeReads : 0;
    for (size_t i = found.size(); i > 0 && found.size() - i < probes; --i) {
      kv->disk_tier_.jobs->SubmitProbe(static_cast<int32_t>(found[i - 1].slot));
    }
  }
  RETURN_IF_ERROR(kv->OpenRemoteTier());
  kv->AdmitPreparedSlots();
  return kv;
}

KvCacheManager::~KvCacheManager() {
  // Blocks computed here reach the remote tier for the other processes (each batch bounded
  // by its timeout; nothing when it is off).
  FlushRemotePuts();
  remote_.store.reset();
  if (remote_.put_buffer != nullptr) backend_->FreeHostMemory(remote_.put_buffer);
  // Nothing more is prepared: the chunks in progress finish while the rest is drained.
  if (host_region_ != nullptr) host_region_->CancelPinning();
  if (disk_tier_.preparer != nullptr) disk_tier_.preparer->Cancel();
  DrainCopies();  // lands swap-outs and write-backs (the host slots they fill are freed below)
  DrainDiskReads();  // the reader writes into host slots: done before they are freed
  // Lands the disk writes in flight (their slots join the disk cache, so they are persisted
  // below), then stops the I/O threads before the store closes and the host memory is freed.
  DrainDiskWrites();
  disk_tier_.jobs.reset();
  disk_tier_.preparer.reset();  // waits for the chunk being reserved: then no thread uses the store
  if (disk_tier_.store != nullptr) {
    // Keep what the prefix cache holds for the next context: device and host entries not
    // yet on disk are written there while slots last.
    std::vector<std::pair<int32_t, BlockHash>> device_entries(state(Tier::kDevice).hash_of.begin(),
                                                              state(Tier::kDevice).hash_of.end());
    std::vector<std::pair<int32_t, BlockHash>> host_entries(state(Tier::kHost).hash_of.begin(),
                                                            state(Tier::kHost).hash_of.end());
    for (const auto& [slot, hash] : host_entries) {
      if (state(Tier::kDisk).by_hash.contains(hash) || pool(Tier::kDisk).num_free() == 0) continue;
      int32_t disk_slot = *pool(Tier::kDisk).Allocate();
      if (disk_tier_.store
              ->Write(disk_slot, hash.digest, StoredTokens(Tier::kHost, slot), HostSlot(slot),
                      DiskBlockStore::Content::kCached)
              .ok()) {
        state(Tier::kDisk).by_hash[hash] = disk_slot;
        state(Tier::kDisk).hash_of[disk_slot] = hash;
      } else {
        pool(Tier::kDisk).Release(disk_slot);
      }
    }
    for (const auto& [block, hash] : device_entries) {
      if (state(Tier::kDisk).by_hash.contains(hash) || pool(Tier::kDisk).num_free() == 0) continue;
      int32_t disk_slot = *pool(Tier::kDisk).Allocate();
      if (CopyDeviceToDisk(block, disk_slot, hash).ok()) {
        state(Tier::kDisk).by_hash[hash] = disk_slot;
        state(Tier::kDisk).hash_of[disk_slot] = hash;
      } else {
        pool(Tier::kDisk).Release(disk_slot);
      }
    }
    // The journal holds every block written; a snapshot makes the next open quick.
    (void)disk_tier_.store->Compact();
  }
  host_region_.reset();  // unpins what was pinned, releases the region
  if (staging_.memory != nullptr) backend_->FreeHostMemory(staging_.memory);
  if (write_behind_.buffers.memory != nullptr) backend_->FreeHostMemory(write_behind_.buffers.memory);
}

int64_t KvCacheManager::capacity_blocks(Tier tier) const { return pool(tier).num_blocks(); }

int64_t KvCacheManager::used_blocks(Tier tier) const {
  int64_t cache_content = 0;  // held for cache content, not by a sequence
  // Host slots being filled by a write-back; disk slots being written by the I/O thread.
  if (tier == Tier::kHost) cache_content = static_cast<int64_t>(copies_.writeback_slots.size());
  if (tier == Tier::kDisk && disk_tier_.jobs != nullptr) {
    cache_content = disk_tier_.jobs->Count<WriteBackJob>() + disk_tier_.jobs->Count<DemoteWriteJob>() +
                    disk_tier_.jobs->Count<PersistWriteJob>();
    for (const PendingBatch& batch : copies_.batches) {
      for (const PendingCopy& c : batch.copies) cache_content += c.kind == PendingKind::kPersistToDisk ? 1 : 0;
    }
  }
  return pool(tier).num_used() - lru(tier).size() - cache_content;
}

int64_t KvCacheManager::cached_blocks(Tier tier) const {
  return static_cast<int64_t>(state(tier).hash_of.size());
}

int64_t KvCacheManager::peak_blocks(Tier tier) const { return pool(tier).peak_used(); }

double KvCacheManager::measured_swap_bandwidth() const {
  return counters_.copy_seconds > 0 ? static_cast<double>(counters_.swap_bytes_timed) / counters_.copy_seconds : 0.0;
}

int64_t KvCacheManager::NewBlocksNeeded(SequenceId seq, int64_t num_tokens) const {
  auto it = sequences_.find(seq);
  const int64_t have =
      it == sequences_.end() ? 0 : static_cast<int64_t>(it->second.host_slots.size() + it->second.table.size());
  return std::max<int64_t>(0, BlocksForTokens(num_tokens) - have);
}

std::span<const BlockId> KvCacheManager::BlockTable(SequenceId seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return {};
  return it->second.table;
}

int64_t KvCacheManager::SwappedBlocks(SequenceId seq) const {
  auto it = swapped_.find(seq);
  return it == swapped_.end() ? 0 : static_cast<int64_t>(it->second.slots.size());
}

// ---------------------------------------------------------------- copies

// Synchronous copies go behind the async ones on a copy engine: land those first, so the
// host's wait for them is counted as a stall, not hidden inside a "synchronous" copy.
absl::Status KvCacheManager::CopyHostSlotToDevice(int32_t host_slot, BlockId block) {
  DrainCopies();
  CopyTimer timer(&counters_.copy_seconds);
  counters_.swap_bytes_timed += static_cast<int64_t>(block_bytes_);
  BlockCopy copy{block, HostSlot(host_slot)};
  return backend_->CopyBlocksFromHost(std::span<const BlockCopy>(&copy, 1));
}

absl::Status KvCacheManager::CopyDeviceToDisk(BlockId block, int32_t disk_slot, BlockHash hash) {
  DrainCopies();
  CopyTimer timer(&counters_.copy_seconds);
  counters_.swap_bytes_timed += static_cast<int64_t>(block_bytes_);
  // Shutdown only (nothing else in flight): any staging buffer is free.
  const std::optional<int32_t> staging = AcquireStaging();
  if (!staging) return absl::InternalError("kv cache: no staging buffer");
  const BlockCopy copy{block, Staging(*staging)};
  absl::Status status = backend_->CopyBlocksToHost(std::span<const BlockCopy>(&copy, 1));
  if (status.ok()) {
    status = disk_tier_.store->Write(disk_slot, hash.digest, StoredTokens(Tier::kDevice, block), Staging(*staging),
                                     DiskBlockStore::Content::kCached);
  }
  staging_.free.push_back(*staging);
  return status;
}

DiskStoreCounters KvCacheManager::disk_store_counters() const {
  return disk_tier_.store != nullptr ? disk_tier_.store->counters() : DiskStoreCounters{};
}

std::string KvCacheManager::disk_index_ignored_reason() const {
  return disk_tier_.store != nullptr ? disk_tier_.store->index_ignored_reason() : std::string();
}

// ---------------------------------------------------------------- sequences

void KvCacheManager::ReleaseDeviceBlock(BlockId block) {
  pool(Tier::kDevice).Release(block);
  auto cached = state(Tier::kDevice).hash_of.find(block);
  if (cached != state(Tier::kDevice).hash_of.end() && pool(Tier::kDevice).ref_count(block) == 1) {
    lru(Tier::kDevice).PushBack(block, PriorityOf(cached->second));
  }
}

absl::Status KvCacheManager::Reserve(SequenceId seq, int64_t num_tokens) {
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
  if (auto it = sequences_.find(seq); it != sequences_.end()) {
    for (BlockId block : it->second.table) {
      ReleaseDeviceBlock(block);
    }
    for (int32_t slot : it->second.host_slots) pool(Tier::kHost).Release(slot);
    sequences_.erase(it);
  }
  if (auto it = swapped_.find(seq); it != swapped_.end()) {
    // Copies still filling these slots are ignored when they land (FinishBatch).
    for (const SlotRef& ref : it->second.slots) {
      // A disk slot being read ahead or written is freed by its job when it lands.
      if (ref.tier == Tier::kDisk &&
          (disk_tier_.jobs->ReadOnSlot(ref.slot) || disk_tier_.jobs->SwapWriteOnSlot(ref.slot))) {
        continue;
      }
      pool(ref.tier).Release(ref.slot);
    }
    swapped_.erase(it);
  }
}

void KvCacheManager::OnComputed(SequenceId seq, std::span<const int32_t> tokens, int64_t num_computed,
                                int32_t priority, BlockKeyChain* keys) {
  if (!options_.prefix_cache) return;
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  SequenceBlocks& blocks = it->second;
  const int64_t on_host = static_cast<int64_t>(blocks.host_slots.size());
  const int64_t full =
      std::min<int64_t>(num_computed / options_.block_tokens, on_host + static_cast<int64_t>(blocks.table.size()));
  if (static_cast<int64_t>(blocks.hashes.size()) >= full) return;
  std::optional<BlockKeyChain> own_keys;
  if (keys == nullptr) keys = &own_keys.emplace(default_scope_);
  TierState& device_cache = state(Tier::kDevice);
  for (int64_t i = static_cast<int64_t>(blocks.hashes.size()); i < full; ++i) {
    const BlockHash hash = keys->Key(tokens, options_.block_tokens, i);
    blocks.hashes.push_back(hash);
    // Only computed blocks move to the host, so they were cached before they moved.
    if (i < on_host) continue;
    const BlockId block = blocks.table[static_cast<size_t>(i - on_host)];
    if (device_cache.by_hash.contains(hash) || device_cache.hash_of.contains(block)) continue;
    RaisePriority(hash, priority);
    device_cache.by_hash[hash] = block;
    device_cache.hash_of[block] = hash;
    SetStoredTokens(Tier::kDevice, block, BlockTokens(tokens, i));
    pool(Tier::kDevice).AddRef(block);  // the cache's own reference
    QueueWriteBehind(block, hash);  // on disk soon (crash durability), see the top
    QueueRemotePut(block, hash);    // shared with the other processes after this step
    // Written back to host while its sequence runs, when the host tier has room for a copy
    // of the whole device tier (else only the coldest unreferenced blocks are, see
    // StartBackgroundCopies). Bounded: stale entries are skipped there.
    if (pool(Tier::kHost).num_blocks() >= pool(Tier::kDevice).num_blocks()) {
      writeback_queue_.push_back({block, hash});
      if (static_cast<int64_t>(writeback_queue_.size()) > 2 * pool(Tier::kDevice).num_blocks()) writeback_queue_.pop_front();
    }
  }
}

BlockKeyChain KvCacheManager::KeyChain(std::string_view cache_namespace) const {
  if (cache_namespace.empty()) return BlockKeyChain(default_scope_);
  return BlockKeyChain(BlockKeyScope(options_.model_fingerprint, backend_->kv_layout(), cache_namespace));
}

bool KvCacheManager::StoredTokensMatch(Tier tier, int32_t slot, std::span<const int32_t> tokens) {
  const std::span<const int32_t> stored = std::as_const(*this).StoredTokens(tier, slot);
  if (std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end())) return true;
  ++counters_.prefix_token_mismatch;
  return false;
}

int64_t KvCacheManager::MatchPrefix(SequenceId seq, std::span<const int32_t> tokens, int32_t priority,
                                    BlockKeyChain* keys, int64_t max_blocks_held, bool landed_only) {
  if (!options_.prefix_cache || tokens.size() < 2) return 0;
  if (landed_only) {  // what finished loading joins; nothing is waited for
    if (disk_tier_.jobs != nullptr) LandDiskJobs(DiskThreads::kReader);
    if (remote_.store != nullptr) LandRemoteLookups();
  }
  SequenceBlocks& blocks = sequences_[seq];
  // Only full computed blocks held (each has its key): the match continues after them. A
  // long sequence keeping blocks on the host has computed past any prefix: nothing to match.
  if (!blocks.host_slots.empty() || blocks.hashes.size() != blocks.table.size()) return 0;
  const size_t first = blocks.table.size();
  std::optional<BlockKeyChain> own_keys;
  if (keys == nullptr) keys = &own_keys.emplace(default_scope_);
  int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / options_.block_tokens;
  if (max_blocks_held >= 0) max_blocks = std::min(max_blocks, max_blocks_held);
  constexpr int kRemoteHit = kNumTiers;  // hit_tier of a block found in the remote tier
  std::vector<int> hit_tier;  // per matched block: a Tier, or kRemoteHit
  // Disk hits are read after the walk, all at once (ReadDiskBlocksToDevice): until then
  // their device blocks are in the table but not cached, and their slots out of the disk
  // LRU (neither evicted nor reused).
  std::vector<StagedRead> reads;
  std::vector<size_t> read_index;  // table index of each read
  // Remote hits are copied to their device blocks after the walk too, in one batch.
  std::vector<BlockCopy> remote_copies;
  std::vector<size_t> remote_index;  // table index of each
  for (int64_t i = static_cast<int64_t>(first); i < max_blocks; ++i) {
    const BlockHash hash = keys->Key(tokens, options_.block_tokens, i);
    const std::span<const int32_t> block_tokens = BlockTokens(tokens, i);
    // Being read ahead from disk: wait for it, then it is a host hit.
    if (disk_tier_.jobs != nullptr) {
      const auto read_ahead = disk_tier_.jobs->PrefixReadOf(hash);
      if (landed_only && read_ahead.has_value()) break;
      AwaitDiskJob(read_ahead);
    }
    // Being written to disk since its device eviction: wait for the write, then a disk hit.
    if (disk_tier_.jobs != nullptr) AwaitDiskJob(disk_tier_.jobs->DemoteWriteOf(hash));
    TierState& device_cache = state(Tier::kDevice);
    // Its only copy being written to disk by write-behind: the same.
    if (disk_tier_.jobs != nullptr && !device_cache.by_hash.contains(hash) && !state(Tier::kHost).by_hash.contains(hash)) {
      AwaitDiskJob(disk_tier_.jobs->PersistWriteOf(hash));
    }
    const bool cached_anywhere = device_cache.by_hash.contains(hash) || state(Tier::kHost).by_hash.contains(hash) ||
                                 state(Tier::kDisk).by_hash.contains(hash);
    if (cached_anywhere) RaisePriority(hash, priority);
    if (auto hit = device_cache.by_hash.find(hash); hit != device_cache.by_hash.end()) {
      if (!StoredTokensMatch(Tier::kDevice, hit->second, block_tokens)) break;
      TouchOnDisk(hash);
      pool(Tier::kDevice).AddRef(hit->second);
      lru(Tier::kDevice).Erase(hit->second);
      blocks.table.push_back(hit->second);
      hit_tier.push_back(static_cast<int>(Tier::kDevice));
    } else {
      const bool in_host = state(Tier::kHost).by_hash.contains(hash);
      const bool in_disk = !in_host && state(Tier::kDisk).by_hash.contains(hash);
      if (!in_host && !in_disk) {
        // No local tier has it: the remote tier may (looked up with the blocks after it).
        const RemoteLookup* remote = landed_only ? LandedRemoteHit(keys->Key(tokens, options_.block_tokens, i))
                                                 : RemoteHit(tokens, keys, i, max_blocks);
        if (remote == nullptr || num_available_device_blocks() == 0) break;
        const BlockId block = AllocateDeviceBlocks(1).front();
        // Received in a host slot (pinned), or into bytes of its own.
        uint8_t* bytes = remote->host_slot >= 0 ? HostSlot(remote->host_slot) : const_cast<uint8_t*>(remote->bytes.data());
        remote_copies.push_back({block, bytes});
        remote_index.push_back(blocks.table.size());
        blocks.table.push_back(block);
        hit_tier.push_back(kRemoteHit);
        blocks.hashes.push_back(hash);
        continue;
      }
      if (in_disk && landed_only) break;  // a disk read would be waited for
      const Tier tier = in_host ? Tier::kHost : Tier::kDisk;
      const int32_t slot = state(tier).by_hash.at(hash);
      if (in_host && !StoredTokensMatch(Tier::kHost, slot, block_tokens)) break;
      lru(tier).Erase(slot);  // not evictable while we read it
      std::optional<BlockId> block;
      if (num_available_device_blocks() > 0) block = AllocateDeviceBlocks(1).front();
      if (!block) {
        lru(tier).PushBack(slot, PriorityOf(hash));
        break;
      }
      if (in_disk) {
        reads.push_back({slot, hash.digest, Tokens(block_tokens.begin(), block_tokens.end()), *block});
        read_index.push_back(blocks.table.size());
      } else {
        const absl::Status copied = CopyHostSlotToDevice(slot, *block);
        lru(tier).PushBack(slot, PriorityOf(hash));  // the host copy stays cached too
        if (!copied.ok()) {
          pool(Tier::kDevice).Release(*block);
          break;
        }
        device_cache.by_hash[hash] = *block;
        device_cache.hash_of[*block] = hash;
        SetStoredTokens(Tier::kDevice, *block, block_tokens);
        pool(Tier::kDevice).AddRef(*block);
        QueueWriteBehind(*block, hash);
      }
      blocks.table.push_back(*block);
      hit_tier.push_back(static_cast<int>(tier));
    }
    blocks.hashes.push_back(hash);
  }
  size_t keep = blocks.table.size();
  const std::vector<absl::Status> read = ReadDiskBlocksToDevice(reads);
  for (size_t r = 0; r < reads.size(); ++r) {
    const size_t index = read_index[r];
    const BlockHash hash = blocks.hashes[index];
    if (absl::IsDataLoss(read[r]) || absl::IsNotFound(read[r])) {  // never used as data: forget the slot
      ForgetDiskSlot(reads[r].disk_slot);
    } else {
      lru(Tier::kDisk).PushBack(reads[r].disk_slot, PriorityOf(hash));  // the disk copy stays cached too
    }
    if (!read[r].ok()) {
      keep = std::min(keep, index);
      continue;
    }
    state(Tier::kDevice).by_hash[hash] = reads[r].block;
    state(Tier::kDevice).hash_of[reads[r].block] = hash;
    SetStoredTokens(Tier::kDevice, reads[r].block, reads[r].tokens);
    pool(Tier::kDevice).AddRef(reads[r].block);
    QueueWriteBehind(reads[r].block, hash);  // its record is renewed: the disk's newest
  }
  if (!remote_copies.empty()) {
    absl::Status copied;
    {
      CopyTimer timer(&counters_.copy_seconds);
      counters_.swap_bytes_timed += static_cast<int64_t>(remote_copies.size() * block_bytes_);
      copied = backend_->CopyBlocksFromHost(remote_copies);
    }
    for (size_t r = 0; r < remote_copies.size(); ++r) {
      const size_t index = remote_index[r];
      const BlockHash hash = blocks.hashes[index];
      if (!copied.ok()) {
        keep = std::min(keep, index);
        continue;
      }
      const BlockId block = remote_copies[r].device_block;
      state(Tier::kDevice).by_hash[hash] = block;
      state(Tier::kDevice).hash_of[block] = hash;
      SetStoredTokens(Tier::kDevice, block, BlockTokens(tokens, static_cast<int64_t>(index)));
      pool(Tier::kDevice).AddRef(block);
      QueueWriteBehind(block, hash);  // a local copy on disk too
      // Used: the landed bytes are not needed any more.
      if (auto it = remote_.lookups.find(hash); it != remote_.lookups.end()) {
        remote_.landed_bytes -= static_cast<int64_t>(it->second.bytes.size());
        if (it->second.host_slot >= 0) {
          pool(Tier::kHost).Release(it->second.host_slot);
          --remote_.host_slot_lookups;
        }
        remote_.lookups.erase(it);
      }
    }
    if (!copied.ok()) ++counters_.io_errors;
  }
  // The prefix ends before the first block that could not be read. The blocks after it go
  // back as a release would leave them: those read (or hit) stay cached, the others free.
  for (size_t i = keep; i < blocks.table.size(); ++i) {
    const BlockId block = blocks.table[i];
    ReleaseDeviceBlock(block);
  }
  blocks.table.resize(keep);
  blocks.hashes.resize(keep);
  for (size_t i = first; i < keep; ++i) {
    ++blocks.matched[hit_tier[i - first]];
    if (hit_tier[i - first] == kRemoteHit) {
      ++counters_.prefix_hits_remote;
    } else {
      ++counters_.prefix_hits[hit_tier[i - first]];
    }
  }
  counters_.prefix_hit_tokens += static_cast<int64_t>(keep - first) * options_.block_tokens;
  return static_cast<int64_t>(keep) * options_.block_tokens;
}

void KvCacheManager::UnmatchPrefix(SequenceId seq) {
  if (auto it = sequences_.find(seq); it != sequences_.end()) {
    for (int t = 0; t < kNumTiers; ++t) counters_.prefix_hits[t] -= it->second.matched[t];
    counters_.prefix_hits_remote -= it->second.matched[kNumTiers];
    for (int t = 0; t <= kNumTiers; ++t) counters_.prefix_hit_tokens -= it->second.matched[t] * options_.block_tokens;
  }
  Release(seq);
}

void KvCacheManager::PinPrefix(SequenceId seq, int64_t num_blocks) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  const SequenceBlocks& blocks = it->second;
  const TierState& device_cache = state(Tier::kDevice);
  const int64_t n = std::min<int64_t>(num_blocks, static_cast<int64_t>(blocks.hashes.size()));
  for (int64_t i = 0; i < n; ++i) {
    const BlockHash hash = blocks.hashes[static_cast<size_t>(i)];
    auto cached = device_cache.by_hash.find(hash);
    if (pinned_.contains(hash) || cached == device_cache.by_hash.end()) continue;
    pool(Tier::kDevice).AddRef(cached->second);
    lru(Tier::kDevice).Erase(cached->second);
    pinned_[hash] = cached->second;
  }
}

void KvCacheManager::UnpinAll() {
  for (const auto& [hash, block] : pinned_) {
    ReleaseDeviceBlock(block);
  }
  pinned_.clear();
}

}  // namespace kvtier
