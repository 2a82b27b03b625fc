// KvCacheManager::VerifyIntegrity (kv_cache_manager.h): every reference count on every tier
// accounted for by exactly its holders — sequences, swaps, the prefix cache, pins, copies
// and disk jobs in flight — and the cache maps, LRU sets, staging and write-behind buffers,
// the write-behind queue and the disk job registry in agreement. Tests call it after every
// operation.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kv/kv_cache_manager.h"

namespace kvtier {

absl::Status KvCacheManager::VerifyIntegrity() const {
  for (const TierState& t : tiers_) RETURN_IF_ERROR(t.pool.VerifyIntegrity());
  if (disk_tier_.jobs != nullptr) RETURN_IF_ERROR(disk_tier_.jobs->VerifyIntegrity());
  const BlockPool& device = pool(Tier::kDevice);
  std::vector<int32_t> device_refs(static_cast<size_t>(device.num_blocks()), 0);
  for (const auto& [seq, blocks] : sequences_) {
    for (BlockId block : blocks.table) {
      if (block < 0 || block >= device.num_blocks()) {
        return absl::InternalError(absl::StrCat("sequence ", seq, " holds device block ", block, " out of range"));
      }
      ++device_refs[static_cast<size_t>(block)];
    }
    if (blocks.host_slots.size() != blocks.host_data.size()) {
      return absl::InternalError(absl::StrCat("sequence ", seq, " has ", blocks.host_slots.size(),
                                              " host-resident slots but ", blocks.host_data.size(), " pointers"));
    }
    for (size_t i = 0; i < blocks.host_slots.size(); ++i) {
      const int32_t slot = blocks.host_slots[i];
      if (slot < 0 || slot >= pool(Tier::kHost).num_blocks() || blocks.host_data[i] != HostSlot(slot)) {
        return absl::InternalError(absl::StrCat("sequence ", seq, " host-resident block ", i, " (host slot ", slot,
                                                ") is out of range or points elsewhere"));
      }
    }
    if (blocks.hashes.size() > blocks.host_slots.size() + blocks.table.size() && !swapped_.contains(seq)) {
      return absl::InternalError(absl::StrCat("sequence ", seq, " has more hashes than blocks"));
    }
  }
  for (const auto& [block, hash] : state(Tier::kDevice).hash_of) ++device_refs[static_cast<size_t>(block)];
  for (const auto& [hash, block] : pinned_) {
    ++device_refs[static_cast<size_t>(block)];
    auto cached = state(Tier::kDevice).by_hash.find(hash);
    if (cached == state(Tier::kDevice).by_hash.end() || cached->second != block) {
      return absl::InternalError(absl::StrCat("pinned block ", block, " is not the cached block of its hash"));
    }
  }
  for (BlockId b = 0; b < device.num_blocks(); ++b) {
    if (device_refs[static_cast<size_t>(b)] != device.ref_count(b)) {
      return absl::InternalError(absl::StrCat("device block ", b, " ref count ", device.ref_count(b), " but ",
                                              device_refs[static_cast<size_t>(b)], " holders"));
    }
    const bool cached = state(Tier::kDevice).hash_of.contains(b);
    if (lru(Tier::kDevice).Contains(b) != (cached && device.ref_count(b) == 1)) {
      return absl::InternalError(absl::StrCat("device block ", b, " LRU membership wrong"));
    }
  }
  RETURN_IF_ERROR(VerifyLowerTier(Tier::kHost));
  RETURN_IF_ERROR(VerifyLowerTier(Tier::kDisk));
  RETURN_IF_ERROR(VerifyBuffers());
  if (static_cast<int64_t>(write_behind_.queue.size()) > 2 * device.num_blocks()) {
    return absl::InternalError(absl::StrCat("the write-behind queue holds ", write_behind_.queue.size(),
                                            " blocks, more than twice the device tier"));
  }
  // Stored tokens exist for every cached device and host slot.
  for (Tier tier : {Tier::kDevice, Tier::kHost}) {
    if (static_cast<int64_t>(state(tier).tokens.size()) != pool(tier).num_blocks() * options_.block_tokens) {
      return absl::InternalError(absl::StrCat(TierName(tier), " tier keeps ", state(tier).tokens.size(),
                                              " stored tokens for ", pool(tier).num_blocks(), " slots"));
    }
  }
  return absl::OkStatus();
}

absl::Status KvCacheManager::VerifyBuffers() const {
  // Staging buffers: each free, or held by one copy in flight or one disk write (a read
  // holds one only inside ReadDiskBlocksToDevice). Write-behind buffers: each free, or held
  // by one write-behind copy or write.
  const StagingBuffers* pools[2] = {&staging_, &write_behind_.buffers};
  std::vector<int32_t> holders[2];
  for (int p = 0; p < 2; ++p) holders[p].assign(static_cast<size_t>(pools[p]->count), 0);
  auto hold = [&](int p, int32_t buffer) {
    if (buffer >= 0 && buffer < pools[p]->count) ++holders[p][static_cast<size_t>(buffer)];
  };
  for (int p = 0; p < 2; ++p) {
    for (int32_t buffer : pools[p]->free) hold(p, buffer);
  }
  for (const PendingBatch& batch : copies_.batches) {
    for (const PendingCopy& c : batch.copies) hold(c.kind == PendingKind::kPersistToDisk ? 1 : 0, c.staging);
  }
  if (disk_tier_.jobs != nullptr) {
    disk_tier_.jobs->ForEach<SwapWriteJob>([&](DiskJobId, const SwapWriteJob& w) { hold(0, w.staging); });
    disk_tier_.jobs->ForEach<DemoteWriteJob>([&](DiskJobId, const DemoteWriteJob& w) { hold(0, w.staging); });
    disk_tier_.jobs->ForEach<PersistWriteJob>([&](DiskJobId, const PersistWriteJob& w) { hold(1, w.staging); });
  }
  for (int p = 0; p < 2; ++p) {
    for (int32_t b = 0; b < pools[p]->count; ++b) {
      if (holders[p][static_cast<size_t>(b)] != 1) {
        return absl::InternalError(absl::StrCat(p == 0 ? "staging" : "write-behind", " buffer ", b, " has ",
                                                holders[p][static_cast<size_t>(b)], " holders"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status KvCacheManager::VerifyLowerTier(Tier tier) const {
  const TierState& t = state(tier);
  const char* name = TierName(tier);
  std::vector<int32_t> refs(static_cast<size_t>(t.pool.num_blocks()), 0);
  auto held = [&](int32_t slot) { ++refs[static_cast<size_t>(slot)]; };
  const DiskJobs* jobs = disk_tier_.jobs.get();
  for (const auto& [slot, hash] : t.hash_of) {
    held(slot);
    // A prefix block being read ahead stays cached but out of the disk LRU.
    const bool being_read = tier == Tier::kDisk && jobs != nullptr && jobs->ReadOnSlot(slot).has_value();
    if (t.lru.Contains(slot) == being_read) {
      return absl::InternalError(
          absl::StrCat(name, " cached slot ", slot, being_read ? " in LRU while read ahead" : " not in LRU"));
    }
    auto by = t.by_hash.find(hash);
    if (by == t.by_hash.end() || by->second != slot) {
      return absl::InternalError(absl::StrCat(name, " slot ", slot, " hash index mismatch"));
    }
  }
  for (const auto& [seq, swap] : swapped_) {
    for (const SlotRef& ref : swap.slots) {
      if (ref.tier == tier) held(ref.slot);
    }
  }
  if (tier == Tier::kHost) {
    // Long sequences' host-resident blocks: private, in no cache map.
    for (const auto& [seq, blocks] : sequences_) {
      for (int32_t slot : blocks.host_slots) {
        if (t.hash_of.contains(slot)) {
          return absl::InternalError(absl::StrCat("host slot ", slot, " of sequence ", seq, " is also cached"));
        }
        held(slot);
      }
    }
  }
  int64_t cached_out_of_lru = 0;
  if (tier == Tier::kHost) {
    // Remote lookups in flight fill held host slots, in no cache map until landed.
    for (const auto& [hash, lookup] : remote_.lookups) {
      if (lookup.host_slot < 0) continue;
      if (t.hash_of.contains(lookup.host_slot)) {
        return absl::InternalError(absl::StrCat("host slot ", lookup.host_slot, " is cached while a remote lookup fills it"));
      }
      held(lookup.host_slot);
    }
  }
  if (tier == Tier::kHost) {
    for (const auto& [slot, ticket] : copies_.writeback_slots) {
      if (t.hash_of.contains(slot)) {
        return absl::InternalError(absl::StrCat("host slot ", slot, " is cached while its copy is in flight"));
      }
      held(slot);
    }
  }
  if (jobs != nullptr) {
    absl::Status status;
    auto fail = [&](std::string message) {
      if (status.ok()) status = absl::InternalError(std::move(message));
    };
    if (tier == Tier::kHost) {
      // Read-ahead fills held host slots, in no cache map until landed.
      auto read_into = [&](DiskJobId id, int32_t host_slot) {
        if (t.hash_of.contains(host_slot)) fail(absl::StrCat("host slot ", host_slot, " is cached while read job ", id.seq, " fills it"));
        held(host_slot);
      };
      jobs->ForEach<PrefixReadJob>([&](DiskJobId id, const PrefixReadJob& r) { read_into(id, r.host_slot); });
      jobs->ForEach<SwapReadJob>([&](DiskJobId id, const SwapReadJob& r) { read_into(id, r.host_slot); });
      // A write-back's host source stays cached until its write lands.
      jobs->ForEach<WriteBackJob>([&](DiskJobId id, const WriteBackJob& w) {
        auto source = t.hash_of.find(w.host_slot);
        if (source == t.hash_of.end() || source->second != w.hash) {
          fail(absl::StrCat("host slot ", w.host_slot, " left the host cache while job ", id.seq, " writes it to disk"));
        }
      });
    } else {
      // Slots being written (or about to be: a write-behind copy in flight): held, not
      // cached until landed.
      for (const PendingBatch& batch : copies_.batches) {
        for (const PendingCopy& c : batch.copies) {
          if (c.kind != PendingKind::kPersistToDisk) continue;
          if (t.hash_of.contains(c.slot)) fail(absl::StrCat("disk slot ", c.slot, " is cached while a write-behind copy fills it"));
          held(c.slot);
        }
      }
      auto written = [&](DiskJobId id, int32_t disk_slot) {
        if (t.hash_of.contains(disk_slot)) fail(absl::StrCat("disk slot ", disk_slot, " is cached while job ", id.seq, " writes it"));
        held(disk_slot);
      };
      jobs->ForEach<WriteBackJob>([&](DiskJobId id, const WriteBackJob& w) { written(id, w.disk_slot); });
      jobs->ForEach<DemoteWriteJob>([&](DiskJobId id, const DemoteWriteJob& w) { written(id, w.disk_slot); });
      jobs->ForEach<PersistWriteJob>([&](DiskJobId id, const PersistWriteJob& w) { written(id, w.disk_slot); });
      // Slots of released swaps are held by their jobs until those land.
      jobs->ForEach<SwapWriteJob>([&](DiskJobId, const SwapWriteJob& w) {
        if (!SwapHoldsDiskSlot(w.seq, w.generation, w.index, w.disk_slot)) held(w.disk_slot);
      });
      jobs->ForEach<SwapReadJob>([&](DiskJobId, const SwapReadJob& r) {
        if (!SwapHoldsDiskSlot(r.seq, r.generation, r.index, r.disk_slot)) held(r.disk_slot);
      });
      jobs->ForEach<PrefixReadJob>([&](DiskJobId, const PrefixReadJob& r) {
        if (!t.hash_of.contains(r.disk_slot)) fail(absl::StrCat("disk slot ", r.disk_slot, " left the disk cache while read ahead"));
        ++cached_out_of_lru;
      });
    }
    RETURN_IF_ERROR(status);
  }
  if (t.lru.size() + cached_out_of_lru != static_cast<int64_t>(t.hash_of.size())) {
    return absl::InternalError(absl::StrCat(name, " LRU has ", t.lru.size(), " entries, cache ", t.hash_of.size()));
  }
  for (int32_t s = 0; s < t.pool.num_blocks(); ++s) {
    if (refs[static_cast<size_t>(s)] != t.pool.ref_count(s)) {
      return absl::InternalError(absl::StrCat(name, " slot ", s, " ref count ", t.pool.ref_count(s), " but ",
                                              refs[static_cast<size_t>(s)], " holders"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier
