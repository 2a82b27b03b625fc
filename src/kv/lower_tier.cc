// SlotTier (lower_tier.h): taking a slot of the host or disk tier, evicting its least
// recently used cached entry one tier down when none is free.
#include "kv/lower_tier.h"

namespace kvtier {

std::optional<int32_t> SlotTier::TakeSlot(bool may_wait) {
  BlockPool& slots = cache_.pool();
  if (slots.num_blocks() == 0) return std::nullopt;
  // Slots prepared since the last step count too; those still being prepared do not (as
  // if the tier were full: the caller falls back, nothing waits).
  if (slots.num_free() == 0 && slots.num_available() < slots.num_blocks()) AdmitPreparedSlots();
  if (auto id = slots.Allocate()) return id;
  std::optional<int32_t> victim = may_wait ? cache_.lru().PopFront() : PopVictimWithoutWaiting();
  if (!victim) return std::nullopt;
  Evict(*victim);
  ctx_->Uncache(cache_, *victim);
  slots.Release(*victim);
  return slots.Allocate();
}

std::optional<int32_t> SlotTier::PopVictimWithoutWaiting() {
  // Writes that have finished make their blocks evictable at once.
  ctx_->transfers.Land(LaneBit(Lane::kDiskWrite));
  std::optional<int32_t> victim;
  int64_t scanned = 0;
  cache_.lru().ForEachInEvictionOrder([&](int32_t slot) {
    if (EvictsWithoutWaiting(slot)) {
      victim = slot;
      return false;
    }
    return ++scanned < kVictimsScanned;
  });
  if (!victim) {
    ++ctx_->counters.reads_without_host_slot;
    return std::nullopt;
  }
  cache_.lru().Erase(*victim);
  return victim;
}

void SlotTier::NotePreparationEnd(const absl::Status& status) {
  // Noted once: its error kept for the statistics (why the tier stopped short of its
  // budget), and a disk one counted as an I/O error.
  preparation_ended_ = true;
  if (status.ok()) return;
  preparation_error_ = std::string(status.message());
  if (tier() == Tier::kDisk) ++ctx_->counters.io_errors;
}

}  // namespace kvtier
