// KvCacheManager's lower tiers joining their pools as they are prepared in the background
// (the contract is at the top of kv_cache_manager.h, "Tier preparation").
#include "kv/kv_cache_manager.h"

namespace kvtier {

void KvCacheManager::AdmitPreparedSlots() {
  if (host_region_ != nullptr) {
    // done() first: a preparation done then has its final ready_bytes() already.
    const bool done = host_region_->done();
    pool(Tier::kHost).MakeAvailable(static_cast<int64_t>(host_region_->ready_bytes() / block_bytes_));
    if (done && !preparation_[static_cast<int>(Tier::kHost)].ended) NotePreparationEnd(Tier::kHost, host_region_->status());
  }
  if (disk_tier_.preparer != nullptr) {
    const bool done = disk_tier_.preparer->done();
    pool(Tier::kDisk).MakeAvailable(disk_tier_.preparer->ready());
    if (done && !preparation_[static_cast<int>(Tier::kDisk)].ended) {
      NotePreparationEnd(Tier::kDisk, disk_tier_.preparer->status());
    }
  }
}

void KvCacheManager::NotePreparationEnd(Tier tier, const absl::Status& status) {
  // Noted once: its error kept for the statistics (why the tier stopped short of its
  // budget), and a disk one counted as an I/O error.
  Preparation& p = preparation_[static_cast<int>(tier)];
  p.ended = true;
  if (status.ok()) return;
  p.error = std::string(status.message());
  if (tier == Tier::kDisk) ++counters_.io_errors;
}

void KvCacheManager::WaitForPreparedTiers() {
  if (host_region_ != nullptr) host_region_->WaitUntilDone();
  if (disk_tier_.preparer != nullptr) disk_tier_.preparer->Wait();
  AdmitPreparedSlots();
}

}  // namespace kvtier
