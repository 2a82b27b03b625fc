// KvCacheManager::VerifyIntegrity (kv_cache_manager.h): every reference count on every tier
// accounted for by exactly its holders — sequences, swaps, the prefix cache, pins and the
// transfers in flight — and the cache maps, LRU sets, staging and write-behind buffers,
// the write-behind queue and the transfer registry in agreement. Tests call it after every
// operation.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kv/kv_cache_manager.h"

namespace kvtier {

absl::Status KvCacheManager::VerifyIntegrity() const {
  if (grouped_) RETURN_IF_ERROR(grouped_->VerifyIntegrity());
  for (const TierCache* cache : ctx_.caches) RETURN_IF_ERROR(cache->VerifyIndex());
  RETURN_IF_ERROR(ctx_.transfers.VerifyIntegrity());
  const TierCache& device_cache = ctx_.device;
  const BlockPool& device = device_cache.pool();
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
      if (slot < 0 || slot >= host_->num_blocks() || blocks.host_data[i] != host_->bytes(slot)) {
        return absl::InternalError(absl::StrCat("sequence ", seq, " host-resident block ", i, " (host slot ", slot,
                                                ") is out of range or points elsewhere"));
      }
    }
    for (size_t g = 0; grouped_ && g < blocks.group_host_data.size(); ++g) {
      const int64_t moved = grouped_->Table(seq, static_cast<int64_t>(g)).host_blocks;
      if (static_cast<int64_t>(blocks.group_host_data[g].size()) != moved) {
        return absl::InternalError(absl::StrCat("sequence ", seq, " group ", g, " has ",
                                                blocks.group_host_data[g].size(),
                                                " host-resident blocks but its table moved ", moved));
      }
    }
    if (blocks.hashes.size() > blocks.host_slots.size() + blocks.table.size() && !swapped_.contains(seq)) {
      return absl::InternalError(absl::StrCat("sequence ", seq, " has more hashes than blocks"));
    }
  }
  for (const auto& [block, hash] : device_cache.entries()) ++device_refs[static_cast<size_t>(block)];
  for (const auto& [hash, block] : pinned_) {
    ++device_refs[static_cast<size_t>(block)];
    if (device_cache.Find(hash) != block) {
      return absl::InternalError(absl::StrCat("pinned block ", block, " is not the cached block of its hash"));
    }
  }
  for (BlockId b = 0; b < device.num_blocks(); ++b) {
    if (device_refs[static_cast<size_t>(b)] != device.ref_count(b)) {
      return absl::InternalError(absl::StrCat("device block ", b, " ref count ", device.ref_count(b), " but ",
                                              device_refs[static_cast<size_t>(b)], " holders"));
    }
    if (device_cache.lru().Contains(b) != (device_cache.IsCached(b) && device.ref_count(b) == 1)) {
      return absl::InternalError(absl::StrCat("device block ", b, " LRU membership wrong"));
    }
  }
  RETURN_IF_ERROR(VerifySlotTier(Tier::kHost));
  RETURN_IF_ERROR(VerifySlotTier(Tier::kDisk));
  RETURN_IF_ERROR(VerifyBuffers());
  if (disk_->write_behind_queued() > 2 * device.num_blocks()) {
    return absl::InternalError(absl::StrCat("the write-behind queue holds ", disk_->write_behind_queued(),
                                            " blocks, more than twice the device tier"));
  }
  return absl::OkStatus();
}

absl::Status KvCacheManager::VerifyBuffers() const {
  // Staging buffers: each free, or held by one copy in flight or one disk write (a read
  // holds one only inside DiskTier::ReadToDevice). Write-behind buffers: each free, or held
  // by one write-behind copy or write.
  const DiskTier::Buffers* pools[2] = {&disk_->staging_buffers(), &disk_->write_behind_buffers()};
  std::vector<int32_t> holders[2];
  for (int p = 0; p < 2; ++p) holders[p].assign(static_cast<size_t>(pools[p]->count), 0);
  auto hold = [&](int p, int32_t buffer) {
    if (buffer >= 0 && buffer < pools[p]->count) ++holders[p][static_cast<size_t>(buffer)];
  };
  for (int p = 0; p < 2; ++p) {
    for (int32_t buffer : pools[p]->free) hold(p, buffer);
  }
  const Transfers& t = ctx_.transfers;
  t.ForEach<SwapOutCopy>([&](TransferId, const SwapOutCopy& c) { hold(0, c.staging); });
  t.ForEach<DemoteCopy>([&](TransferId, const DemoteCopy& c) { hold(0, c.staging); });
  t.ForEach<PersistCopy>([&](TransferId, const PersistCopy& c) { hold(1, c.buffer); });
  t.ForEach<SwapWriteJob>([&](TransferId, const SwapWriteJob& w) { hold(0, w.staging); });
  t.ForEach<DemoteWriteJob>([&](TransferId, const DemoteWriteJob& w) { hold(0, w.staging); });
  t.ForEach<PersistWriteJob>([&](TransferId, const PersistWriteJob& w) { hold(1, w.buffer); });
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

absl::Status KvCacheManager::VerifySlotTier(Tier tier) const {
  const bool host = tier == Tier::kHost;
  const TierCache& c = host ? host_->cache() : disk_->cache();
  const char* name = TierName(tier);
  const Transfers& t = ctx_.transfers;
  std::vector<int32_t> refs(static_cast<size_t>(c.num_blocks()), 0);
  absl::Status status;
  auto fail = [&](std::string message) {
    if (status.ok()) status = absl::InternalError(std::move(message));
  };
  auto held = [&](int32_t slot) {
    if (slot < 0 || slot >= c.num_blocks()) {
      fail(absl::StrCat(name, " slot ", slot, " held out of range"));
      return;
    }
    ++refs[static_cast<size_t>(slot)];
  };
  // A slot being filled is held, in no cache map, until its transfer lands.
  auto filled = [&](int32_t slot, const char* by) {
    if (c.IsCached(slot)) fail(absl::StrCat(name, " slot ", slot, " is cached while ", by, " fills it"));
    held(slot);
  };
  int64_t cached_out_of_lru = 0;
  for (const auto& [slot, hash] : c.entries()) {
    held(slot);
    // A prefix block being read ahead stays cached but out of the disk LRU.
    const bool being_read = !host && t.ReadOnSlot(slot).has_value();
    if (c.lru().Contains(slot) == being_read) {
      return absl::InternalError(
          absl::StrCat(name, " cached slot ", slot, being_read ? " in LRU while read ahead" : " not in LRU"));
    }
  }
  for (const auto& [seq, swap] : swapped_) {
    for (const SlotRef& ref : swap.slots) {
      if (ref.tier == tier) held(ref.slot);
    }
  }
  if (host) {
    // Long sequences' host-resident blocks: private, in no cache map.
    for (const auto& [seq, blocks] : sequences_) {
      for (int32_t slot : blocks.host_slots) filled(slot, "a long sequence");
    }
    if (remote_ != nullptr) remote_->ForEachHeldHostSlot([&](int32_t slot) { filled(slot, "a remote lookup"); });
    t.ForEach<HostWriteBackCopy>([&](TransferId, const HostWriteBackCopy& w) { filled(w.host_slot, "a write-back"); });
    t.ForEach<PrefixReadJob>([&](TransferId, const PrefixReadJob& r) { filled(r.host_slot, "a read-ahead"); });
    t.ForEach<SwapReadJob>([&](TransferId, const SwapReadJob& r) { filled(r.host_slot, "a swap read-ahead"); });
    // A write-back's host source stays cached until its write lands.
    t.ForEach<WriteBackJob>([&](TransferId id, const WriteBackJob& w) {
      const BlockHash* source = c.KeyOf(w.host_slot);
      if (source == nullptr || *source != w.hash) {
        fail(absl::StrCat("host slot ", w.host_slot, " left the host cache while job ", id.seq, " writes it to disk"));
      }
    });
  } else {
    t.ForEach<PersistCopy>([&](TransferId, const PersistCopy& w) { filled(w.disk_slot, "a write-behind copy"); });
    t.ForEach<DemoteCopy>([&](TransferId, const DemoteCopy& w) { filled(w.disk_slot, "a demotion copy"); });
    t.ForEach<WriteBackJob>([&](TransferId, const WriteBackJob& w) { filled(w.disk_slot, "a write-back"); });
    t.ForEach<DemoteWriteJob>([&](TransferId, const DemoteWriteJob& w) { filled(w.disk_slot, "a demotion"); });
    t.ForEach<PersistWriteJob>([&](TransferId, const PersistWriteJob& w) { filled(w.disk_slot, "write-behind"); });
    // Slots of released swaps are held by their transfers until those land.
    t.ForEach<SwapWriteJob>([&](TransferId, const SwapWriteJob& w) {
      if (!SwapHoldsDiskSlot(w.seq, w.generation, w.index, w.disk_slot)) held(w.disk_slot);
    });
    t.ForEach<SwapReadJob>([&](TransferId, const SwapReadJob& r) {
      if (!SwapHoldsDiskSlot(r.seq, r.generation, r.index, r.disk_slot)) held(r.disk_slot);
    });
    t.ForEach<PrefixReadJob>([&](TransferId, const PrefixReadJob& r) {
      if (!c.IsCached(r.disk_slot)) fail(absl::StrCat("disk slot ", r.disk_slot, " left the disk cache while read ahead"));
      ++cached_out_of_lru;
    });
  }
  RETURN_IF_ERROR(status);
  if (c.lru().size() + cached_out_of_lru != c.num_cached()) {
    return absl::InternalError(absl::StrCat(name, " LRU has ", c.lru().size(), " entries, cache ", c.num_cached()));
  }
  for (int32_t s = 0; s < c.num_blocks(); ++s) {
    if (refs[static_cast<size_t>(s)] != c.pool().ref_count(s)) {
      return absl::InternalError(absl::StrCat(name, " slot ", s, " ref count ", c.pool().ref_count(s), " but ",
                                              refs[static_cast<size_t>(s)], " holders"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier
