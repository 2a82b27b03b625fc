// DiskTier's reads (the contract is at the top of disk_tier.h): read-ahead into host slots,
// reads at a block's use through staging buffers, and what landing a read-ahead does (the
// load time per block a load plan weighs is in disk_tier_speed.cc).
#include <algorithm>
#include <chrono>
#include <deque>

#include "backend/backend.h"
#include "kv/disk_tier.h"
#include "kv/host_tier.h"

namespace kvtier {

int64_t DiskTier::ReadAheadBudget() const {
  const Transfers& t = ctx_->transfers;
  return std::min<int64_t>(host_->WriteBackBudget(),
                           host_->num_blocks() / 4 - t.Count<PrefixReadJob>() - t.Count<SwapReadJob>());
}

int64_t DiskTier::ReadAhead(const BlockChain& chain, std::span<const int64_t> blocks, const ReadAheadOptions& options) {
  if (!on() || !host_->on()) return 0;
  int64_t budget = options.max_host_slots < 0 ? ReadAheadBudget() : options.max_host_slots;
  std::vector<int64_t> order(blocks.begin(), blocks.end());
  if (options.back_first) std::reverse(order.begin(), order.end());
  int64_t started = 0;
  std::optional<int32_t> previous_slot;
  for (const int64_t i : order) {
    const BlockHash hash = chain.Key(i);
    const std::optional<int32_t> host_slot = host_->TakeSlotForRead(&budget);
    if (!host_slot) break;
    const std::optional<int32_t> disk_slot = cache_.Find(hash);  // the host eviction may have dropped it
    if (!disk_slot) {
      host_->cache().pool().Release(*host_slot);
      break;
    }
    cache_.lru().Erase(*disk_slot);  // neither evicted nor reused while read
    CountFileOrder(previous_slot, *disk_slot);
    previous_slot = disk_slot;
    // The host slot is the read's alone until it lands: its tokens are those the read checks.
    const std::span<const int32_t> tokens = chain.Tokens(i);
    host_->cache().SetTokens(*host_slot, tokens);
    ctx_->transfers.SubmitDiskRead(PrefixReadJob{*disk_slot, *host_slot, hash}, *disk_slot, hash.digest, tokens,
                                   host_->bytes(*host_slot));
    ++started;
  }
  return started;
}

void DiskTier::LandPrefixRead(const PrefixReadJob& job, const absl::Status& status) {
  CountReadFailure(status);
  if (absl::IsDataLoss(status) || absl::IsNotFound(status)) {  // never used as data: forget the slot
    ForgetSlot(job.disk_slot);
  } else {
    cache_.lru().PushBack(job.disk_slot, ctx_->priorities.Of(job.hash));
  }
  TierCache& host = host_->cache();
  if (status.ok() && !host.Contains(job.hash)) {
    host.InsertEvictable(job.host_slot, job.hash, ctx_->priorities.Of(job.hash));  // its tokens were set at submission
    ++ctx_->counters.disk.read_aheads;
  } else {
    host.pool().Release(job.host_slot);
  }
  ObserveReads();
}

void DiskTier::CountFileOrder(std::optional<int32_t> previous_slot, int32_t slot) {
  if (previous_slot && slot == *previous_slot + 1) ++ctx_->counters.disk.reads_in_file_order;
}

void DiskTier::CountReadFailure(const absl::Status& status) {
  if (status.ok()) return;
  if (absl::IsDataLoss(status)) {
    ++ctx_->counters.corrupt_blocks_detected;
  } else if (absl::IsFailedPrecondition(status)) {
    ++ctx_->counters.prefix_token_mismatch;  // the key's slot holds other tokens: refused
  } else if (absl::IsNotFound(status)) {
    ++ctx_->counters.disk.stale_entries;  // the slot holds another block now
  } else {
    ++ctx_->counters.io_errors;
  }
}

std::vector<absl::Status> DiskTier::ReadToDevice(const std::vector<StagedRead>& reads) {
  std::vector<absl::Status> results(reads.size());
  if (reads.empty()) return results;
  ctx_->DrainCopies();
  const auto start = std::chrono::steady_clock::now();
  struct InFlight {
    size_t index;  // into reads
    TransferId id;
    int32_t buffer;
  };
  std::deque<InFlight> in_flight;  // submission order, which is the reader's finishing order
  auto land_oldest = [&] {
    const InFlight r = in_flight.front();
    in_flight.pop_front();
    absl::Status status = ctx_->transfers.AwaitResult(r.id);  // lands any read-ahead finished before it too
    CountReadFailure(status);
    if (status.ok()) {
      const BlockCopy copy{reads[r.index].block, staging(r.buffer)};
      status = ctx_->backend->CopyBlocksFromHost(std::span<const BlockCopy>(&copy, 1));
      if (status.ok()) ++ctx_->counters.disk.staged_reads;
    }
    ReleaseStaging(r.buffer);
    results[r.index] = status;
  };
  for (size_t i = 0; i < reads.size(); ++i) {
    // Out of buffers: the oldest read of ours frees one soonest; else copies or writes do.
    if (staging_.free.empty() && !in_flight.empty()) land_oldest();
    const std::optional<int32_t> buffer = AcquireStaging();
    if (!buffer) {
      results[i] = absl::InternalError("kv cache: no staging buffer for a disk read");
      continue;
    }
    const TransferId id = ctx_->transfers.SubmitDiskRead(StagedReadJob{}, reads[i].disk_slot, reads[i].key,
                                                         reads[i].tokens, staging(*buffer));
    if (i > 0) CountFileOrder(reads[i - 1].disk_slot, reads[i].disk_slot);
    in_flight.push_back({i, id, *buffer});
  }
  while (!in_flight.empty()) land_oldest();
  ctx_->counters.copy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ctx_->counters.swap_bytes_timed += static_cast<int64_t>(reads.size() * ctx_->block_bytes);
  ObserveReads();
  return results;
}

bool DiskTier::LoadsOverlapCompute() const {
  // Disk blocks load on the reader threads only into host slots (read-ahead); without a
  // host tier they are read when attached, after the front computed.
  return host_->on() && on();
}

}  // namespace kvtier
