// TierPreparationOptions: how much of the host and disk tiers a context prepares before its
// creation returns, and in what steps it prepares the rest in the background (see
// kv_cache_manager.h). Plain value type.
#ifndef KVTIER_KV_TIER_PREPARATION_H_
#define KVTIER_KV_TIER_PREPARATION_H_

#include <cstdint>

namespace kvtier {

struct TierPreparationOptions {
  // Host tier, on backends that pin host memory: all of it is pinned in the background,
  // this much at a time (rounded up to whole pages). A smaller chunk makes the first blocks
  // usable sooner and a context freed meanwhile wait less (for the chunk being pinned).
  // Small, because on CUDA each pin holds the driver's lock: a step's device calls wait
  // for at most one chunk (32 MiB: a few milliseconds).
  int64_t host_chunk_bytes = int64_t{32} << 20;
  // The first this many bytes (whole chunks) are pinned before creation returns, unpaced:
  // nothing steps yet, and the first requests find room for their loads and swaps (a load
  // plan's reads and remote values land in pinned host slots only). 1 GiB took about 50 ms
  // on an H200 machine.
  int64_t host_bytes_at_create = int64_t{1} << 30;
  // The rest at most this fast (0: as fast as the backend pins). Chunks are paged in ahead of
  // their pins, so the pins would come back to back and hold CUDA's driver lock most of the
  // time: a prefill beside them took twice as long on an H200 machine
  // (bench/results/2026-12-02-h200-paced-pinning). At 4 GB/s a pin of 32 MiB (about 1.5 ms
  // there) is followed by about 6.5 ms without one, and 8 GiB are pinned in 2 s.
  double host_pin_bytes_per_second = 4e9;
  // Whether KvCacheManager::Create starts pinning the host tier (before it reads the disk
  // tier's index, so the two overlap); false leaves it to HostTier::StartPinning.
  // The engine pauses the pinning while the backend warms up (HostTier::PausePinning), whose
  // device calls would otherwise wait behind the pins.
  bool pin_host_at_create = true;
  // Disk tier: this much of the file is reserved before creation returns (a small tier
  // entirely: no thread, and a full disk is an error at creation)...
  int64_t disk_bytes_at_create = int64_t{64} << 20;
  // ...and the rest in the background, this much at a time.
  int64_t disk_chunk_bytes = int64_t{1} << 30;
  // Disk tier over a file holding cached blocks: a few of them are read at creation, on the
  // reader threads, to measure the disk's read speed before a load plan needs it (the
  // plan's split depends on it; a guess can be several times off); and again whenever a
  // load plan finds disk blocks slow while the figure is stale (DiskTier::kSpeedStaleAfter).
  bool probe_disk_read_speed = true;
};

}  // namespace kvtier

#endif  // KVTIER_KV_TIER_PREPARATION_H_
