// KvCacheManager::Land: the one landing function of every transfer (transfers.h) — where
// a finished copy, disk write or read, or remote get takes effect, by its kind, through
// the tier that owns it. Stepping thread.
#include <type_traits>
#include <variant>

#include "kv/kv_cache_manager.h"

namespace kvtier {

void KvCacheManager::Land(Transfers::Landed& landed) {
  const absl::Status& status = landed.status;
  std::visit(
      [&](auto& t) {
        using Kind = std::decay_t<decltype(t)>;
        if constexpr (std::is_same_v<Kind, HostWriteBackCopy>) {
          host_->LandWriteBack(t, status);
        } else if constexpr (std::is_same_v<Kind, SwapOutCopy>) {
          LandSwapCopy(t, landed.id.seq, status);
        } else if constexpr (std::is_same_v<Kind, DemoteCopy>) {
          disk_->LandDemoteCopy(t, status);
        } else if constexpr (std::is_same_v<Kind, PersistCopy>) {
          disk_->LandPersistCopy(t, status);
        } else if constexpr (std::is_same_v<Kind, WriteBackJob>) {
          disk_->LandWriteBack(t, status);
        } else if constexpr (std::is_same_v<Kind, SwapWriteJob>) {
          LandSwapWrite(t, status);
        } else if constexpr (std::is_same_v<Kind, DemoteWriteJob>) {
          disk_->LandDemoteWrite(t, status);
        } else if constexpr (std::is_same_v<Kind, PersistWriteJob>) {
          disk_->LandPersistWrite(t, status);
        } else if constexpr (std::is_same_v<Kind, PrefixReadJob>) {
          disk_->LandPrefixRead(t, status);
        } else if constexpr (std::is_same_v<Kind, SwapReadJob>) {
          LandSwapRead(t, status);
        } else if constexpr (std::is_same_v<Kind, RemoteGet>) {
          if (remote_ != nullptr) remote_->LandGet(t, status);
        }
        // EvictionWriteJob, StagedReadJob: their callers wait for them and take the result.
        // RenewRecordJob: nothing to land (a slot rewritten meanwhile is NotFound: fine).
        // SpeedProbeJob: what it measured is in the store's counters.
        // RemotePutBatch: the put buffer is free again.
      },
      landed.transfer);
}

}  // namespace kvtier
