// KvCacheManager's host and disk tiers as caches (the contract is in kv_cache_manager.h):
// taking a slot, evicting the least recently used cached entry when none is free (a host
// victim moves down to disk, a disk victim is dropped), and each hash's eviction priority.
#include "kv/kv_cache_manager.h"
#include "storage/disk_block_store.h"

namespace kvtier {

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
  if (!state(Tier::kDevice).by_hash.contains(hash) && !state(Tier::kHost).by_hash.contains(hash) &&
      !state(Tier::kDisk).by_hash.contains(hash)) {
    hash_priority_.erase(hash);
  }
}

std::optional<int32_t> KvCacheManager::AllocateSlot(Tier tier, bool may_wait) {
  BlockPool& slots = pool(tier);
  if (slots.num_blocks() == 0) return std::nullopt;
  // Slots prepared since the last step count too; those still being prepared do not (as
  // if the tier were full: the caller falls back, nothing waits).
  if (slots.num_free() == 0 && slots.num_available() < slots.num_blocks()) AdmitPreparedSlots();
  if (auto id = slots.Allocate()) return id;
  std::optional<int32_t> victim = may_wait ? lru(tier).PopFront() : PopVictimWithoutWaiting(tier);
  if (!victim) return std::nullopt;
  Offload(tier, *victim);
  DropCached(tier, *victim);
  slots.Release(*victim);
  return slots.Allocate();
}

std::optional<int32_t> KvCacheManager::PopVictimWithoutWaiting(Tier tier) {
  // Writes that have finished make their blocks evictable at once.
  if (disk_tier_.jobs != nullptr) LandDiskJobs(DiskThreads::kWriter);
  std::optional<int32_t> victim;
  int64_t scanned = 0;
  lru(tier).ForEachInEvictionOrder([&](int32_t slot) {
    if (EvictsWithoutWaiting(tier, slot)) {
      victim = slot;
      return false;
    }
    return ++scanned < kVictimsScanned;
  });
  if (!victim) {
    ++counters_.reads_without_host_slot;
    return std::nullopt;
  }
  lru(tier).Erase(*victim);
  return victim;
}

bool KvCacheManager::EvictsWithoutWaiting(Tier tier, int32_t slot) const {
  if (tier != Tier::kHost || pool(Tier::kDisk).num_blocks() == 0) return true;  // dropped
  const BlockHash hash = state(Tier::kHost).hash_of.at(slot);
  if (disk_tier_.jobs != nullptr) {
    const DiskJobs& jobs = *disk_tier_.jobs;
    if (jobs.WriteBackOfHostSlot(slot) || jobs.DemoteWriteOf(hash) || jobs.PersistWriteOf(hash)) return false;
  }
  return state(Tier::kDisk).by_hash.contains(hash);  // else written at its eviction
}

void KvCacheManager::Offload(Tier tier, int32_t slot) {
  ++counters_.blocks_demoted[static_cast<int>(tier)];
  // The last tier drops it.
  if (tier != Tier::kHost || pool(Tier::kDisk).num_blocks() == 0) {
    ++counters_.blocks_dropped;
    return;
  }
  // The host bytes are complete: a slot is in the host cache only once its copy landed.
  const BlockHash hash = state(Tier::kHost).hash_of.at(slot);
  // Its write-back to disk still in flight (queued too late, or a slow disk): wait for it
  // rather than write the block a second time; landed, it is on disk (or failed, and it is
  // written below). The same for a device demotion of the same content on its way there.
  AwaitDiskJob(disk_tier_.jobs->WriteBackOfHostSlot(slot));
  AwaitDiskJob(disk_tier_.jobs->DemoteWriteOf(hash));
  AwaitDiskJob(disk_tier_.jobs->PersistWriteOf(hash));
  if (state(Tier::kDisk).by_hash.contains(hash)) {
    ++counters_.host_evictions_on_disk;  // written back ahead (or demoted before): no write
    return;
  }
  if (std::optional<int32_t> disk_slot = AllocateSlot(Tier::kDisk)) {
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
  ++counters_.blocks_dropped;
}

void KvCacheManager::CacheOnDisk(int32_t disk_slot, BlockHash hash) {
  TierState& disk = state(Tier::kDisk);
  disk.by_hash[hash] = disk_slot;
  disk.hash_of[disk_slot] = hash;
  lru(Tier::kDisk).PushBack(disk_slot, PriorityOf(hash));
}

void KvCacheManager::TouchOnDisk(BlockHash hash) {
  auto on_disk = state(Tier::kDisk).by_hash.find(hash);
  if (on_disk == state(Tier::kDisk).by_hash.end() || !lru(Tier::kDisk).Contains(on_disk->second)) return;
  lru(Tier::kDisk).Erase(on_disk->second);
  lru(Tier::kDisk).PushBack(on_disk->second, PriorityOf(hash));
}

void KvCacheManager::ForgetDiskSlot(int32_t disk_slot) {
  DropCached(Tier::kDisk, disk_slot);
  pool(Tier::kDisk).Release(disk_slot);
  disk_tier_.store->Forget(disk_slot);
}

absl::Status KvCacheManager::WriteEvictedHostSlot(int32_t host_slot, int32_t disk_slot, BlockHash hash) {
  const std::span<const int32_t> tokens = StoredTokens(Tier::kHost, host_slot);
  if (disk_tier_.jobs == nullptr) {
    return disk_tier_.store->Write(disk_slot, hash.digest, tokens, HostSlot(host_slot), DiskBlockStore::Content::kCached);
  }
  // The write-back did not get to this block: the writer thread writes it now, behind the
  // writes already queued (the disk takes them in order anyway), and the eviction waits for
  // it, since the host slot is reused as soon as Demote returns. The stepping thread waits
  // but never touches the file.
  return AwaitResult(
      disk_tier_.jobs->SubmitWrite(EvictionWriteJob{}, disk_slot, hash.digest, tokens, HostSlot(host_slot)));
}

}  // namespace kvtier
