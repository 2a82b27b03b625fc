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
        // A swap's transfers: the swap's (kv_cache_swap.cc).
        if constexpr (std::is_same_v<Kind, SwapOutCopy>) {
          LandSwapCopy(t, landed.id.seq, status);
        } else if constexpr (std::is_same_v<Kind, SwapWriteJob>) {
          LandSwapWrite(t, status);
        } else if constexpr (std::is_same_v<Kind, SwapReadJob>) {
          LandSwapRead(t, status);
          // The others: the tier they move a cached block into (a speed probe: the disk's,
          // whose read speed it measures).
        } else if constexpr (std::is_same_v<Kind, HostWriteBackCopy>) {
          host_->Land(landed);
        } else if constexpr (std::is_same_v<Kind, DemoteCopy> || std::is_same_v<Kind, PersistCopy> ||
                             std::is_same_v<Kind, WriteBackJob> || std::is_same_v<Kind, DemoteWriteJob> ||
                             std::is_same_v<Kind, PersistWriteJob> || std::is_same_v<Kind, PrefixReadJob> ||
                             std::is_same_v<Kind, SpeedProbeJob>) {
          disk_->Land(landed);
        } else if constexpr (std::is_same_v<Kind, RemoteGet>) {
          if (remote_ != nullptr) remote_->Land(landed);
        }
        // EvictionWriteJob, StagedReadJob: their callers wait for them and take the result.
        // RenewRecordJob: nothing to land (a slot rewritten meanwhile is NotFound: fine).
        // RemotePutBatch: the put buffer is free again.
      },
      landed.transfer);
}

}  // namespace kvtier
