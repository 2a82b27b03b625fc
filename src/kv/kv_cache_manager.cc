// Implementation of KvCacheManager (kv_cache_manager.h).
#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "common/errors.h"
#include "common/status_macros.h"
#include "kv/tier_budgets.h"
#include "model/stable_hash.h"
#include "storage/disk_block_store.h"

namespace kvtier {
namespace {

class CopyTimer {
 public:
  explicit CopyTimer(double* total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~CopyTimer() { *total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  double* total_;
  std::chrono::steady_clock::time_point start_;
};

// Staging buffers between the device and the disk I/O threads: async device -> disk copies
// (the bytes land there, the disk write follows when the copy is done) and disk -> device
// reads at a block's use. Few: these are the paths without host room (host tier full of
// swapped blocks, or off); a user that runs out waits for the oldest copy or write.
constexpr int64_t kStagingBlocks = 16;

}  // namespace

// Disk slots of swapped (uncached) blocks carry a tag instead of a content hash, so a slot
// read back is still checked to be the one written: by this manager (sequence ids restart
// at 1 in every context), for this swap-out of the sequence, as this block.
uint64_t KvCacheManager::SwapTag(SequenceId seq, uint64_t generation, size_t index) const {
  uint64_t tag = SplitMix64(instance_tag_ ^ static_cast<uint64_t>(seq));
  tag = SplitMix64(tag ^ generation);
  return SplitMix64(tag ^ static_cast<uint64_t>(index));
}

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
      tiers_{TierState(options.device_blocks), TierState(options.host_blocks), TierState(options.disk_blocks)},
      instance_tag_(NewInstanceTag()) {}

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
                                      options.disk_blocks * DiskBlockStore::SlotBytes(block_bytes),
                                      options.disk_path, options.file_io));
  std::unique_ptr<KvCacheManager> kv(new KvCacheManager(options, backend));
  if (options.host_blocks > 0) {
    ASSIGN_OR_RETURN(void* memory,
                     backend->AllocateHostMemory(static_cast<size_t>(options.host_blocks) * kv->block_bytes_));
    kv->host_memory_ = static_cast<uint8_t*>(memory);
  }
  if (options.disk_blocks > 0) {
    const int64_t staging = std::min<int64_t>(kStagingBlocks, options.disk_blocks);
    ASSIGN_OR_RETURN(void* memory, backend->AllocateHostMemory(static_cast<size_t>(staging) * kv->block_bytes_));
    kv->staging_.memory = static_cast<uint8_t*>(memory);
    for (int32_t i = 0; i < staging; ++i) kv->staging_.free.push_back(i);
    kv->staging_.count = static_cast<int32_t>(staging);
    DiskStoreOptions disk;
    disk.path = options.disk_path;
    disk.num_slots = options.disk_blocks;
    disk.block_bytes = kv->block_bytes_;
    disk.model_fingerprint = options.model_fingerprint;
    disk.block_tokens = options.block_tokens;
    disk.io = options.file_io;
    ASSIGN_OR_RETURN(kv->disk_tier_.store, DiskBlockStore::Open(disk));
    // Prefix blocks persisted by an earlier context over the same file and model.
    for (const DiskIndexEntry& entry : kv->disk_tier_.store->recovered_entries()) {
      const int32_t slot = static_cast<int32_t>(entry.slot);
      const BlockHash hash{entry.block_hash};
      if (entry.token_count != options.block_tokens || kv->state(Tier::kDisk).by_hash.contains(hash) ||
          !kv->pool(Tier::kDisk).AllocateSpecific(slot)) {
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
  }
  return kv;
}

KvCacheManager::~KvCacheManager() {
  DrainCopies();  // lands swap-outs and write-backs (the host slots they fill are freed below)
  DrainDiskReads();  // the reader writes into host slots: done before they are freed
  // Lands the disk writes in flight (their slots join the disk cache, so they are persisted
  // below), then stops the I/O threads before the store closes and the host memory is freed.
  DrainDiskWrites();
  disk_tier_.jobs.reset();
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
      if (disk_tier_.store->Write(disk_slot, hash.value, static_cast<int32_t>(options_.block_tokens), HostSlot(slot)).ok()) {
        state(Tier::kDisk).by_hash[hash] = disk_slot;
        state(Tier::kDisk).hash_of[disk_slot] = hash;
        disk_tier_.index_dirty = true;
      } else {
        pool(Tier::kDisk).Release(disk_slot);
      }
    }
    for (const auto& [block, hash] : device_entries) {
      if (state(Tier::kDisk).by_hash.contains(hash) || pool(Tier::kDisk).num_free() == 0) continue;
      int32_t disk_slot = *pool(Tier::kDisk).Allocate();
      if (CopyDeviceToDisk(block, disk_slot, hash.value).ok()) {
        state(Tier::kDisk).by_hash[hash] = disk_slot;
        state(Tier::kDisk).hash_of[disk_slot] = hash;
        disk_tier_.index_dirty = true;
      } else {
        pool(Tier::kDisk).Release(disk_slot);
      }
    }
    PersistIndexIfDirty(/*now=*/true);
  }
  if (host_memory_ != nullptr) backend_->FreeHostMemory(host_memory_);
  if (staging_.memory != nullptr) backend_->FreeHostMemory(staging_.memory);
}

int64_t KvCacheManager::capacity_blocks(Tier tier) const { return pool(tier).num_blocks(); }

int64_t KvCacheManager::used_blocks(Tier tier) const {
  int64_t cache_content = 0;  // held for cache content, not by a sequence
  // Host slots being filled by a write-back; disk slots being written by the I/O thread.
  if (tier == Tier::kHost) cache_content = static_cast<int64_t>(copies_.writeback_slots.size());
  if (tier == Tier::kDisk && disk_tier_.jobs != nullptr) {
    cache_content = disk_tier_.jobs->Count<WriteBackJob>() + disk_tier_.jobs->Count<DemoteWriteJob>();
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
  const int64_t have = it == sequences_.end() ? 0 : static_cast<int64_t>(it->second.table.size());
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

// ---------------------------------------------------------------- allocation & eviction

int32_t KvCacheManager::PriorityOf(BlockHash hash) const {
  auto it = hash_priority_.find(hash);
  return it == hash_priority_.end() ? 0 : it->second;
}

void KvCacheManager::RaisePriority(BlockHash hash, int32_t priority) {
  if (priority == 0 && !hash_priority_.contains(hash)) return;
  int32_t& p = hash_priority_[hash];
  p = std::max(p, priority);
}

void KvCacheManager::DropCached(Tier tier, int32_t slot) {
  TierState& c = state(tier);
  auto it = c.hash_of.find(slot);
  if (it == c.hash_of.end()) return;
  const BlockHash hash = it->second;
  auto by = c.by_hash.find(hash);
  if (by != c.by_hash.end() && by->second == slot) c.by_hash.erase(by);
  c.hash_of.erase(it);
  if (tier == Tier::kDisk) disk_tier_.index_dirty = true;
  if (!state(Tier::kDevice).by_hash.contains(hash) && !state(Tier::kHost).by_hash.contains(hash) &&
      !state(Tier::kDisk).by_hash.contains(hash)) {
    hash_priority_.erase(hash);
  }
}

std::optional<int32_t> KvCacheManager::AllocateHost() {
  if (pool(Tier::kHost).num_blocks() == 0) return std::nullopt;
  if (auto id = pool(Tier::kHost).Allocate()) return id;
  std::optional<int32_t> victim = lru(Tier::kHost).PopFront();
  if (!victim) return std::nullopt;
  // Its write to disk is still in flight (queued too late, or the disk is slow): wait for
  // it rather than write the block a second time here; landed, it is on disk (or failed,
  // and Demote writes it synchronously).
  if (disk_tier_.jobs != nullptr) AwaitDiskJob(disk_tier_.jobs->WriteBackOfHostSlot(*victim));
  Demote(Tier::kHost, *victim, state(Tier::kHost).hash_of.at(*victim));
  DropCached(Tier::kHost, *victim);
  pool(Tier::kHost).Release(*victim);
  return pool(Tier::kHost).Allocate();
}

std::optional<int32_t> KvCacheManager::AllocateDisk() {
  if (pool(Tier::kDisk).num_blocks() == 0) return std::nullopt;
  if (auto id = pool(Tier::kDisk).Allocate()) return id;
  std::optional<int32_t> victim = lru(Tier::kDisk).PopFront();
  if (!victim) return std::nullopt;
  ++counters_.blocks_dropped;
  ++counters_.blocks_demoted[static_cast<int>(Tier::kDisk)];
  DropCached(Tier::kDisk, *victim);
  pool(Tier::kDisk).Release(*victim);
  return pool(Tier::kDisk).Allocate();
}

void KvCacheManager::Demote(Tier tier, int32_t slot, BlockHash hash) {
  // Only host slots come here (device victims: AllocateDeviceBlocks; disk: dropped). The
  // host bytes are complete: a slot is in the host cache only once its copy has landed.
  ++counters_.blocks_demoted[static_cast<int>(tier)];
  if (tier == Tier::kHost && pool(Tier::kDisk).num_blocks() > 0) {
    if (state(Tier::kDisk).by_hash.contains(hash)) {
      ++counters_.host_evictions_on_disk;  // written back ahead (or demoted before): no write
      return;
    }
    // On its way there from a device demotion: that write lands it (no second copy).
    if (std::optional<DiskJobId> demoting = disk_tier_.jobs->DemoteWriteOf(hash)) {
      AwaitDiskJob(demoting);
      if (state(Tier::kDisk).by_hash.contains(hash)) {
        ++counters_.host_evictions_on_disk;
        return;
      }
    }
    if (std::optional<int32_t> disk_slot = AllocateDisk()) {
      ++counters_.host_evictions_written;
      absl::Status written = WriteEvictedHostSlot(slot, *disk_slot, hash);
      if (written.ok() && state(Tier::kDisk).by_hash.contains(hash)) {  // landed meanwhile
        pool(Tier::kDisk).Release(*disk_slot);
        return;
      }
      if (written.ok()) {
        CacheOnDisk(*disk_slot, hash);
        return;
      }
      ++counters_.io_errors;
      pool(Tier::kDisk).Release(*disk_slot);
    }
  }
  ++counters_.blocks_dropped;
}

void KvCacheManager::CacheOnDisk(int32_t disk_slot, BlockHash hash) {
  TierState& disk = state(Tier::kDisk);
  disk.by_hash[hash] = disk_slot;
  disk.hash_of[disk_slot] = hash;
  lru(Tier::kDisk).PushBack(disk_slot, PriorityOf(hash));
  disk_tier_.index_dirty = true;
}

absl::Status KvCacheManager::WriteEvictedHostSlot(int32_t host_slot, int32_t disk_slot, BlockHash hash) {
  const int32_t tokens = static_cast<int32_t>(options_.block_tokens);
  if (disk_tier_.jobs == nullptr) return disk_tier_.store->Write(disk_slot, hash.value, tokens, HostSlot(host_slot));
  // The write-back did not get to this block: the writer thread writes it now, behind the
  // writes already queued (the disk takes them in order anyway), and the eviction waits for
  // it, since the host slot is reused as soon as Demote returns. The stepping thread waits
  // but never touches the file.
  return AwaitResult(
      disk_tier_.jobs->SubmitWrite(EvictionWriteJob{}, disk_slot, hash.value, tokens, HostSlot(host_slot)));
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

absl::Status KvCacheManager::CopyDeviceToDisk(BlockId block, int32_t disk_slot, uint64_t tag) {
  DrainCopies();
  CopyTimer timer(&counters_.copy_seconds);
  counters_.swap_bytes_timed += static_cast<int64_t>(block_bytes_);
  // Shutdown only (nothing else in flight): any staging buffer is free.
  const std::optional<int32_t> staging = AcquireStaging();
  if (!staging) return absl::InternalError("kv cache: no staging buffer");
  const BlockCopy copy{block, Staging(*staging)};
  absl::Status status = backend_->CopyBlocksToHost(std::span<const BlockCopy>(&copy, 1));
  if (status.ok()) {
    status = disk_tier_.store->Write(disk_slot, tag, static_cast<int32_t>(options_.block_tokens), Staging(*staging));
  }
  staging_.free.push_back(*staging);
  return status;
}

void KvCacheManager::PersistIndexIfDirty(bool now) {
  if (disk_tier_.store == nullptr || !disk_tier_.index_dirty) return;
  // The file is rewritten whole (fsync, rename, directory fsync: milliseconds): the engine
  // asks every step, so it goes to the writer thread, at most one save at a time. The
  // entries are blocks whose writes have landed, so the index never names a block that is
  // not on disk yet (a slot rewritten later fails its tag check on read, as any stale one).
  // And at most once a second: a restart finds the cached blocks by the index, so a crash
  // loses at most the last second's entries (a stale entry fails its tag check on read;
  // freeing the context saves it synchronously); saved every step, it would queue a
  // whole-file write and two fsyncs per step in front of the block writes that evictions
  // wait for.
  const auto now_time = std::chrono::steady_clock::now();
  if (!now && disk_tier_.jobs != nullptr) {
    if (disk_tier_.index_save.has_value()) LandDiskJobs();
    if (disk_tier_.index_save.has_value()) return;  // still saving: the next call saves what changed since
    if (now_time - disk_tier_.last_index_save < kIndexSaveInterval) return;
  }
  std::vector<DiskIndexEntry> entries;
  for (const auto& [slot, hash] : state(Tier::kDisk).hash_of) {
    entries.push_back(DiskIndexEntry{slot, hash.value, static_cast<int32_t>(options_.block_tokens)});
  }
  disk_tier_.index_dirty = false;
  if (!now && disk_tier_.jobs != nullptr) {
    disk_tier_.index_save = disk_tier_.jobs->SubmitSaveIndex(std::move(entries));
    disk_tier_.last_index_save = now_time;
    return;
  }
  if (!disk_tier_.store->SaveIndex(entries).ok()) {
    ++counters_.io_errors;
    disk_tier_.index_dirty = true;
  }
}

// ---------------------------------------------------------------- sequences

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
      pool(Tier::kDevice).Release(block);
      if (pool(Tier::kDevice).ref_count(block) == 1 && state(Tier::kDevice).hash_of.contains(block)) {
        lru(Tier::kDevice).PushBack(block, PriorityOf(state(Tier::kDevice).hash_of.at(block)));
      }
    }
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
                                int32_t priority) {
  if (!options_.prefix_cache) return;
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  SequenceBlocks& blocks = it->second;
  const int64_t full = std::min<int64_t>(num_computed / options_.block_tokens, static_cast<int64_t>(blocks.table.size()));
  TierState& device_cache = state(Tier::kDevice);
  for (int64_t i = static_cast<int64_t>(blocks.hashes.size()); i < full; ++i) {
    std::optional<BlockHash> parent;
    if (i > 0) parent = blocks.hashes[static_cast<size_t>(i - 1)];
    const BlockHash hash = PromptBlockHash(parent, tokens, i);
    blocks.hashes.push_back(hash);
    const BlockId block = blocks.table[static_cast<size_t>(i)];
    if (device_cache.by_hash.contains(hash) || device_cache.hash_of.contains(block)) continue;
    RaisePriority(hash, priority);
    device_cache.by_hash[hash] = block;
    device_cache.hash_of[block] = hash;
    pool(Tier::kDevice).AddRef(block);  // the cache's own reference
    // Written back to host while its sequence runs, when the host tier has room for a copy
    // of the whole device tier (else only the coldest unreferenced blocks are, see
    // StartBackgroundCopies). Bounded: stale entries are skipped there.
    if (pool(Tier::kHost).num_blocks() >= pool(Tier::kDevice).num_blocks()) {
      writeback_queue_.push_back({block, hash});
      if (static_cast<int64_t>(writeback_queue_.size()) > 2 * pool(Tier::kDevice).num_blocks()) writeback_queue_.pop_front();
    }
  }
}

int64_t KvCacheManager::MatchPrefix(SequenceId seq, std::span<const int32_t> tokens, int32_t priority) {
  if (!options_.prefix_cache || tokens.size() < 2) return 0;
  SequenceBlocks& blocks = sequences_[seq];
  if (!blocks.table.empty()) return 0;
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / options_.block_tokens;
  std::vector<Tier> hit_tier;  // per matched block
  // Disk hits are read after the walk, all at once (ReadDiskBlocksToDevice): until then
  // their device blocks are in the table but not cached, and their slots out of the disk
  // LRU (neither evicted nor reused).
  std::vector<StagedRead> reads;
  std::vector<size_t> read_index;  // table index of each read
  std::optional<BlockHash> parent;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const BlockHash hash = PromptBlockHash(parent, tokens, i);
    // Being read ahead from disk: wait for it, then it is a host hit.
    if (disk_tier_.jobs != nullptr) AwaitDiskJob(disk_tier_.jobs->PrefixReadOf(hash));
    // Being written to disk since its device eviction: wait for the write, then a disk hit.
    if (disk_tier_.jobs != nullptr) AwaitDiskJob(disk_tier_.jobs->DemoteWriteOf(hash));
    TierState& device_cache = state(Tier::kDevice);
    const bool cached_anywhere = device_cache.by_hash.contains(hash) || state(Tier::kHost).by_hash.contains(hash) ||
                                 state(Tier::kDisk).by_hash.contains(hash);
    if (cached_anywhere) RaisePriority(hash, priority);
    if (auto hit = device_cache.by_hash.find(hash); hit != device_cache.by_hash.end()) {
      pool(Tier::kDevice).AddRef(hit->second);
      lru(Tier::kDevice).Erase(hit->second);
      blocks.table.push_back(hit->second);
      hit_tier.push_back(Tier::kDevice);
    } else {
      const bool in_host = state(Tier::kHost).by_hash.contains(hash);
      const bool in_disk = !in_host && state(Tier::kDisk).by_hash.contains(hash);
      if (!in_host && !in_disk) break;
      const Tier tier = in_host ? Tier::kHost : Tier::kDisk;
      const int32_t slot = state(tier).by_hash.at(hash);
      lru(tier).Erase(slot);  // not evictable while we read it
      std::optional<BlockId> block;
      if (num_available_device_blocks() > 0) block = AllocateDeviceBlocks(1).front();
      if (!block) {
        lru(tier).PushBack(slot, PriorityOf(hash));
        break;
      }
      if (in_disk) {
        reads.push_back({slot, hash.value, *block});
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
        pool(Tier::kDevice).AddRef(*block);
      }
      blocks.table.push_back(*block);
      hit_tier.push_back(tier);
    }
    blocks.hashes.push_back(hash);
    parent = hash;
  }
  size_t keep = blocks.table.size();
  const std::vector<absl::Status> read = ReadDiskBlocksToDevice(reads);
  for (size_t r = 0; r < reads.size(); ++r) {
    const size_t index = read_index[r];
    const BlockHash hash = blocks.hashes[index];
    if (absl::IsDataLoss(read[r])) {  // never used as data: forget the slot
      DropCached(Tier::kDisk, reads[r].disk_slot);
      pool(Tier::kDisk).Release(reads[r].disk_slot);
    } else {
      lru(Tier::kDisk).PushBack(reads[r].disk_slot, PriorityOf(hash));  // the disk copy stays cached too
    }
    if (!read[r].ok()) {
      keep = std::min(keep, index);
      continue;
    }
    state(Tier::kDevice).by_hash[hash] = reads[r].block;
    state(Tier::kDevice).hash_of[reads[r].block] = hash;
    pool(Tier::kDevice).AddRef(reads[r].block);
  }
  // The prefix ends before the first block that could not be read. The blocks after it go
  // back as a release would leave them: those read (or hit) stay cached, the others free.
  for (size_t i = keep; i < blocks.table.size(); ++i) {
    const BlockId block = blocks.table[i];
    pool(Tier::kDevice).Release(block);
    if (pool(Tier::kDevice).ref_count(block) == 1 && state(Tier::kDevice).hash_of.contains(block)) {
      lru(Tier::kDevice).PushBack(block, PriorityOf(state(Tier::kDevice).hash_of.at(block)));
    }
  }
  blocks.table.resize(keep);
  blocks.hashes.resize(keep);
  for (size_t i = 0; i < keep; ++i) ++blocks.matched[static_cast<int>(hit_tier[i])];
  for (int t = 0; t < kNumTiers; ++t) counters_.prefix_hits[t] += blocks.matched[t];
  const int64_t matched = static_cast<int64_t>(keep) * options_.block_tokens;
  counters_.prefix_hit_tokens += matched;
  return matched;
}

void KvCacheManager::UnmatchPrefix(SequenceId seq) {
  if (auto it = sequences_.find(seq); it != sequences_.end()) {
    for (int t = 0; t < kNumTiers; ++t) {
      counters_.prefix_hits[t] -= it->second.matched[t];
      counters_.prefix_hit_tokens -= it->second.matched[t] * options_.block_tokens;
    }
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
    pool(Tier::kDevice).Release(block);
    if (pool(Tier::kDevice).ref_count(block) == 1 && state(Tier::kDevice).hash_of.contains(block)) {
      lru(Tier::kDevice).PushBack(block, PriorityOf(state(Tier::kDevice).hash_of.at(block)));
    }
  }
  pinned_.clear();
}

absl::Status KvCacheManager::SwapOut(SequenceId seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end() || it->second.table.empty()) return absl::OkStatus();
  FinishCopies(0);
  const std::vector<BlockId> table = it->second.table;
  std::vector<SlotRef> slots;
  auto release_slots = [&] {
    for (const SlotRef& ref : slots) pool(ref.tier).Release(ref.slot);
  };
  for (size_t i = 0; i < table.size(); ++i) {
    if (std::optional<int32_t> host_slot = AllocateHost()) {
      slots.push_back({Tier::kHost, *host_slot});
    } else if (std::optional<int32_t> disk_slot = AllocateDisk()) {
      slots.push_back({Tier::kDisk, *disk_slot});
    } else {
      release_slots();
      return absl::ResourceExhaustedError(absl::StrCat("no host or disk room to swap out sequence ", seq));
    }
  }
  const uint64_t generation = ++swap_generation_;
  swapped_[seq] = SwapState{slots, generation, 0, absl::OkStatus()};
  // Batches of 2, 4, 8, ... blocks, in the order the pool hands the blocks out again: first
  // those that become free (uncached: the back of the free queue), then cached ones (the
  // back of the device LRU, in table order), then blocks other sequences still share. The
  // preempting sequence, which takes blocks at once, then waits only for the first small
  // batch; the rest lands while the forward runs.
  std::vector<size_t> order;
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t i = 0; i < table.size(); ++i) {
      const bool cached = state(Tier::kDevice).hash_of.contains(table[i]);
      const int32_t others = pool(Tier::kDevice).ref_count(table[i]) - 1 - (cached ? 1 : 0);
      const int rank = others > 0 ? 2 : (cached ? 1 : 0);
      if (rank == pass) order.push_back(i);
    }
  }
  std::vector<PendingCopy> batch;
  size_t batch_size = 2;
  absl::Status status;
  auto flush = [&] {
    if (batch.empty() || !status.ok()) return;
    std::vector<PendingCopy> copies = std::move(batch);
    batch.clear();
    std::vector<int32_t> staging;
    for (const PendingCopy& c : copies) {
      if (c.staging >= 0) staging.push_back(c.staging);
    }
    absl::StatusOr<int64_t> ticket = StartBatch(std::move(copies));
    if (!ticket.ok()) {
      status = ticket.status();
      staging_.free.insert(staging_.free.end(), staging.begin(), staging.end());
      return;
    }
    swapped_.at(seq).last_ticket = *ticket;
  };
  for (size_t i : order) {
    if (!status.ok()) break;
    PendingCopy c;
    c.kind = slots[i].tier == Tier::kHost ? PendingKind::kSwapToHost : PendingKind::kSwapToDisk;
    c.block = table[i];
    c.slot = slots[i].slot;
    c.seq = seq;
    c.generation = generation;
    c.index = i;
    if (c.kind == PendingKind::kSwapToDisk) {
      if (staging_.free.empty()) flush();  // its buffers come back as its writes land
      const std::optional<int32_t> staging = AcquireStaging();
      if (!staging) {
        status = absl::InternalError("kv cache: no staging buffer for a disk swap");
        break;
      }
      c.staging = *staging;
    }
    batch.push_back(c);
    if (batch.size() >= batch_size) {
      flush();
      batch_size *= 2;
    }
  }
  flush();
  if (!status.ok()) {
    // Nothing is lost: the device blocks are kept. Copies already started still read them
    // (fenced by copies_.reading_ticket) and are ignored when they land.
    for (const PendingCopy& c : batch) {
      if (c.staging >= 0) staging_.free.push_back(c.staging);
    }
    swapped_.erase(seq);
    release_slots();
    return status;
  }
  ++counters_.swaps_out;
  counters_.swap_out_bytes += static_cast<int64_t>(table.size() * block_bytes_);
  for (BlockId block : table) {
    pool(Tier::kDevice).Release(block);
    if (pool(Tier::kDevice).ref_count(block) == 1 && state(Tier::kDevice).hash_of.contains(block)) {
      lru(Tier::kDevice).PushBack(block, PriorityOf(state(Tier::kDevice).hash_of.at(block)));
    }
  }
  sequences_.at(seq).table.clear();
  FinishCopies(0);  // synchronous backends: everything has landed (disk writes happen now)
  return absl::OkStatus();
}

absl::Status KvCacheManager::SwapIn(SequenceId seq, bool prefetch) {
  if (!swapped_.contains(seq)) return absl::OkStatus();
  SettleSwap(seq);
  auto it = swapped_.find(seq);
  if (!it->second.failed.ok()) {
    const absl::Status failed = it->second.failed;
    Release(seq);
    return failed;
  }
  const std::vector<SlotRef>& slots = it->second.slots;
  if (static_cast<int64_t>(slots.size()) > num_available_device_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("sequence ", seq, " needs ", slots.size(),
                                                     " device blocks to swap in"));
  }
  SequenceBlocks& blocks = sequences_[seq];
  const std::vector<BlockId> got = AllocateDeviceBlocks(static_cast<int64_t>(slots.size()));
  blocks.table.insert(blocks.table.end(), got.begin(), got.end());
  std::vector<BlockCopy> host_copies;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].tier == Tier::kHost) host_copies.push_back({blocks.table[i], HostSlot(slots[i].slot)});
  }
  if (!prefetch) DrainCopies();
  absl::Status status;
  {
    CopyTimer timer(&counters_.copy_seconds);
    counters_.swap_bytes_timed += static_cast<int64_t>(host_copies.size() * block_bytes_);
    status = prefetch ? backend_->PrefetchBlocksFromHost(host_copies) : backend_->CopyBlocksFromHost(host_copies);
  }
  if (prefetch) ++counters_.prefetches;
  std::vector<StagedRead> reads;  // the blocks nobody read ahead
  for (size_t i = 0; i < slots.size() && status.ok(); ++i) {
    if (slots[i].tier == Tier::kDisk) reads.push_back({slots[i].slot, SwapTag(seq, it->second.generation, i), blocks.table[i]});
  }
  for (const absl::Status& read : ReadDiskBlocksToDevice(reads)) {
    if (!read.ok()) {
      status = read;
      break;
    }
  }
  ++counters_.swaps_in;
  counters_.swap_in_bytes += static_cast<int64_t>(slots.size() * block_bytes_);
  if (!status.ok()) {
    // The swapped copy cannot be trusted: drop everything; the caller recomputes.
    Release(seq);
    return status;
  }
  for (const SlotRef& ref : slots) pool(ref.tier).Release(ref.slot);
  swapped_.erase(it);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- shared helpers

bool KvCacheManager::SwapHoldsDiskSlot(SequenceId seq, uint64_t generation, size_t index,
                                       int32_t disk_slot) const {
  auto it = swapped_.find(seq);
  if (it == swapped_.end() || it->second.generation != generation) return false;
  const std::vector<SlotRef>& slots = it->second.slots;
  return index < slots.size() && slots[index].tier == Tier::kDisk && slots[index].slot == disk_slot;
}

void KvCacheManager::SettleSwap(SequenceId seq) {
  // Its swap-out copies first (normally landed a step ago): landing them submits its disk
  // writes.
  if (const int64_t ticket = swapped_.at(seq).last_ticket; ticket != 0) FinishCopies(ticket);
  if (disk_tier_.jobs == nullptr) return;
  // Then the newest write and read-ahead on its disk slots (each thread finishes in order).
  std::optional<DiskJobId> last_write, last_read;
  for (const SlotRef& ref : swapped_.at(seq).slots) {
    if (ref.tier != Tier::kDisk) continue;
    for (auto [job, last] : {std::pair{disk_tier_.jobs->SwapWriteOnSlot(ref.slot), &last_write},
                             std::pair{disk_tier_.jobs->ReadOnSlot(ref.slot), &last_read}}) {
      if (job && (!*last || (*last)->seq < job->seq)) *last = job;
    }
  }
  AwaitDiskJob(last_write);
  AwaitDiskJob(last_read);
}

BlockHash KvCacheManager::PromptBlockHash(std::optional<BlockHash> parent, std::span<const int32_t> tokens,
                                          int64_t i) const {
  return BlockHash::Chain(
      parent, tokens.subspan(static_cast<size_t>(i * options_.block_tokens), static_cast<size_t>(options_.block_tokens)),
      options_.model_fingerprint);
}

}  // namespace kvtier
