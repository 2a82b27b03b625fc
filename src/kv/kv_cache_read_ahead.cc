// KvCacheManager's disk -> host read-ahead on an I/O thread (the contract is at the top of
// kv_cache_manager.h): what is read ahead, how finished reads land, and how a step that
// needs a block still being read waits for it.
#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "remote/remote_block_store.h"
#include "storage/disk_block_store.h"

namespace kvtier {
namespace {

// Load bandwidth assumed until the remote tier has delivered enough blocks here
// (bytes/second), above what one Redis node gave on the same host (2.2-2.5 GB/s, 2 MiB
// values): a guess above the real speed costs little under a load plan (the front computes
// on until it meets the loads), one below computes blocks that would have loaded (as the
// disk tier's, KvCacheManager::kGuessedDiskBytesPerSecond).
constexpr double kGuessedRemoteBytesPerSecond = 4e9;
// Block bytes delivered before the measured bandwidth replaces the guess: a few blocks
// measure mostly round trips, a few dozen the bandwidth, early in a plan's front.
constexpr int64_t kRemoteBytesMeasured = 32ll << 20;

}  // namespace

bool KvCacheManager::ReadAhead(SequenceId seq, std::span<const int32_t> tokens, BlockKeyChain* keys) {
  std::optional<BlockKeyChain> own_keys;
  if (keys == nullptr) keys = &own_keys.emplace(default_scope_);
  const bool disk = DiskReadAhead(seq, tokens, keys);
  const bool remote = RemoteReadAhead(seq, tokens, keys);  // the blocks no local tier holds
  return disk || remote;
}

int64_t KvCacheManager::ReadAheadBudget() const {
  return std::min<int64_t>(WriteBackBudget(), pool(Tier::kHost).num_blocks() / 4 - num_disk_reads_in_flight());
}

std::optional<int32_t> KvCacheManager::TakeHostSlotForRead(int64_t* budget) {
  if (*budget <= 0) return std::nullopt;
  std::optional<int32_t> slot = AllocateSlot(Tier::kHost, /*may_wait=*/false);
  if (slot) --*budget;
  return slot;
}

bool KvCacheManager::DiskReadAhead(SequenceId seq, std::span<const int32_t> tokens, BlockKeyChain* keys) {
  if (disk_tier_.jobs == nullptr || pool(Tier::kHost).num_blocks() == 0) return false;
  // Landed reads are host copies (and free read budget): a waiting sequence whose prefix
  // reads have finished is admitted this step, not the next.
  LandDiskJobs(DiskThreads::kReader);
  DiskJobs& jobs = *disk_tier_.jobs;
  int64_t budget = ReadAheadBudget();

  if (auto it = swapped_.find(seq); it != swapped_.end()) {
    // Only once the swap-out has landed: its disk blocks are written when its copies land.
    if (it->second.last_ticket != 0 || !it->second.failed.ok()) return false;
    // The blocks to read, taken first: a host slot's eviction below changes no swap.
    const uint64_t generation = it->second.generation;
    std::vector<std::pair<size_t, int32_t>> to_read;  // (block index, disk slot)
    for (size_t i = 0; i < it->second.slots.size(); ++i) {
      const SlotRef ref = it->second.slots[i];
      // Not already being read, and written (a write in flight lands first).
      if (ref.tier == Tier::kDisk && !jobs.ReadOnSlot(ref.slot) && !jobs.SwapWriteOnSlot(ref.slot)) {
        to_read.emplace_back(i, ref.slot);
      }
    }
    for (const auto& [index, disk_slot] : to_read) {
      const std::optional<int32_t> host_slot = TakeHostSlotForRead(&budget);
      if (!host_slot) break;
      jobs.SubmitRead(SwapReadJob{disk_slot, *host_slot, seq, generation, index}, disk_slot,
                      SwapTag(seq, generation, index), {}, HostSlot(*host_slot));
    }
    return false;
  }

  // Prefix blocks, for a sequence that holds none yet: the chain up to the first block not
  // cached anywhere (as MatchPrefix walks it).
  if (!options_.prefix_cache || tokens.size() < 2) return false;
  if (auto held = sequences_.find(seq);
      held != sequences_.end() && (!held->second.table.empty() || !held->second.host_slots.empty())) {
    return false;
  }
  return ReadPrefixAhead(tokens, keys, 0, (static_cast<int64_t>(tokens.size()) - 1) / options_.block_tokens);
}

bool KvCacheManager::ReadPrefixAhead(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t from, int64_t to,
                                     bool back_first, int64_t budget) {
  if (disk_tier_.jobs == nullptr || pool(Tier::kHost).num_blocks() == 0) return false;
  DiskJobs& jobs = *disk_tier_.jobs;
  // The chain's blocks only the disk holds, up to the first block no tier holds. A block
  // still being written to disk since its device eviction ends the chain here: MatchPrefix
  // waits for that write.
  bool reading = false;  // some block of the chain is being read
  std::vector<int64_t> to_read;
  for (int64_t i = from; i < to; ++i) {
    const BlockHash& hash = keys->Key(tokens, options_.block_tokens, i);
    if (jobs.PrefixReadOf(hash)) {
      reading = true;
      continue;
    }
    if (state(Tier::kDevice).by_hash.contains(hash) || state(Tier::kHost).by_hash.contains(hash)) continue;
    if (!state(Tier::kDisk).by_hash.contains(hash)) break;
    to_read.push_back(i);
  }
  if (back_first) std::reverse(to_read.begin(), to_read.end());
  if (budget < 0) budget = ReadAheadBudget();
  for (const int64_t i : to_read) {
    const BlockHash hash = keys->Key(tokens, options_.block_tokens, i);
    const std::optional<int32_t> host_slot = TakeHostSlotForRead(&budget);
    if (!host_slot) break;
    auto on_disk = state(Tier::kDisk).by_hash.find(hash);  // the host eviction may have dropped it
    if (on_disk == state(Tier::kDisk).by_hash.end()) {
      pool(Tier::kHost).Release(*host_slot);
      break;
    }
    const int32_t disk_slot = on_disk->second;
    lru(Tier::kDisk).Erase(disk_slot);  // neither evicted nor reused while read
    // The host slot is the read's alone until it lands: its tokens are those the read checks.
    const std::span<const int32_t> block_tokens = BlockTokens(tokens, i);
    SetStoredTokens(Tier::kHost, *host_slot, block_tokens);
    jobs.SubmitRead(PrefixReadJob{disk_slot, *host_slot, hash}, disk_slot, hash.digest, block_tokens,
                    HostSlot(*host_slot));
    reading = true;
  }
  return reading;
}

double KvCacheManager::DiskSecondsPerBlock() const {
  const DiskStoreCounters disk = disk_store_counters();
  // (Reads in progress advance read_seconds before they count their bytes.)
  const double bandwidth = disk.read_seconds > 0 && disk.bytes_read > 0
                               ? static_cast<double>(disk.bytes_read) / disk.read_seconds
                               : kGuessedDiskBytesPerSecond;
  return static_cast<double>(block_bytes_) / bandwidth;
}

double KvCacheManager::RemoteSecondsPerBlock() const {
  double bandwidth = kGuessedRemoteBytesPerSecond;
  if (remote_.store != nullptr) {
    const RemoteBlockStore::Counters c = remote_.store->counters();
    // A few blocks measure mostly the round trips: the guess serves until enough landed.
    if (c.get_bytes >= kRemoteBytesMeasured && c.get_seconds > 0) {
      bandwidth = static_cast<double>(c.get_bytes) / c.get_seconds;
    }
  }
  return static_cast<double>(block_bytes_) / bandwidth;
}

KvCacheManager::LoadFrontier KvCacheManager::ProbeLoadFrontier(std::span<const int32_t> tokens, BlockKeyChain* keys,
                                                               int64_t from, int64_t to) {
  std::optional<BlockKeyChain> own_keys;
  if (keys == nullptr) keys = &own_keys.emplace(default_scope_);
  to = std::min(to, (static_cast<int64_t>(tokens.size()) - 1) / options_.block_tokens);
  LoadFrontier frontier;
  frontier.landed_from = std::max(from, to);
  if (from >= to) return frontier;
  if (disk_tier_.jobs != nullptr) LandDiskJobs(DiskThreads::kReader);
  if (remote_.store != nullptr) LandRemoteLookups();
  auto landed = [&](const BlockHash& hash) {
    return state(Tier::kDevice).by_hash.contains(hash) || state(Tier::kHost).by_hash.contains(hash) ||
           LandedRemoteHit(hash) != nullptr;
  };
  while (frontier.landed_from > from && landed(keys->Key(tokens, options_.block_tokens, frontier.landed_from - 1))) {
    --frontier.landed_from;
  }
  frontier.landed = to - frontier.landed_from;
  bool disk = false, remote = false;  // reads, lookups in flight before the landed run
  for (int64_t i = from; i < frontier.landed_from; ++i) {
    const BlockHash& hash = keys->Key(tokens, options_.block_tokens, i);
    disk = disk || (disk_tier_.jobs != nullptr && disk_tier_.jobs->PrefixReadOf(hash).has_value());
    const auto lookup = remote_.lookups.find(hash);
    remote = remote || (lookup != remote_.lookups.end() && !lookup->second.landed);
    if (landed(hash)) ++frontier.landed;
  }
  frontier.loading = disk || remote;
  frontier.load_seconds_per_block =
      std::max(disk ? DiskSecondsPerBlock() : 0.0, remote ? RemoteSecondsPerBlock() : 0.0);
  return frontier;
}

KvCacheManager::SlowPrefix KvCacheManager::ProbeSlowPrefix(SequenceId seq, std::span<const int32_t> tokens,
                                                             BlockKeyChain* keys) {
  SlowPrefix probe;
  if (!options_.prefix_cache || tokens.size() < 2) return probe;
  int64_t first = 0;
  if (auto held = sequences_.find(seq); held != sequences_.end()) {
    if (!held->second.host_slots.empty() || held->second.hashes.size() != held->second.table.size()) return probe;
    first = static_cast<int64_t>(held->second.table.size());
  }
  std::optional<BlockKeyChain> own_keys;
  if (keys == nullptr) keys = &own_keys.emplace(default_scope_);
  LandRemoteLookups();
  const bool remote_on = remote_.store != nullptr && remote_.store->counters().on;
  int64_t on_disk = 0, remote = 0;
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / options_.block_tokens;
  int64_t remote_from = -1, remote_run = 0;  // the blocks Redis holds in a row from remote_from (EXISTS)
  for (int64_t i = first; i < max_blocks; ++i) {
    const BlockHash& hash = keys->Key(tokens, options_.block_tokens, i);
    const bool fast = state(Tier::kDevice).by_hash.contains(hash) || state(Tier::kHost).by_hash.contains(hash) ||
                      (disk_tier_.jobs != nullptr && disk_tier_.jobs->PrefixReadOf(hash).has_value());
    if (fast) {
      if (on_disk + remote > 0) break;  // the slow run ends at a fast block
      ++probe.fast_blocks;
      continue;
    }
    if (state(Tier::kDisk).by_hash.contains(hash)) {
      ++on_disk;
      continue;
    }
    if (!remote_on) break;
    if (auto known = remote_.lookups.find(hash); known != remote_.lookups.end()) {
      if (known->second.landed && !known->second.status.ok()) break;  // a known miss
    }
    if (remote_from < 0) {
      remote_from = i;
      remote_run = ProbeRemoteRun(tokens, keys, i, max_blocks);
    }
    if (i >= remote_from + remote_run) break;  // not in Redis: the slow run ends
    ++remote;
  }
  probe.slow_blocks = on_disk + remote;
  if (probe.slow_blocks == 0) return probe;
  probe.load_seconds_per_block = (static_cast<double>(on_disk) * DiskSecondsPerBlock() +
                                  (remote > 0 ? static_cast<double>(remote) * RemoteSecondsPerBlock() : 0.0)) /
                                 static_cast<double>(probe.slow_blocks);
  // Disk blocks load on the reader thread only into host slots (read-ahead); without a
  // host tier they are read when attached, after the front computed.
  probe.overlap = on_disk == 0 || (pool(Tier::kHost).num_blocks() > 0 && disk_tier_.jobs != nullptr);
  return probe;
}

int64_t KvCacheManager::LoadPrefixAhead(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t from,
                                        int64_t to) {
  std::optional<BlockKeyChain> own_keys;
  if (keys == nullptr) keys = &own_keys.emplace(default_scope_);
  to = std::min(to, (static_cast<int64_t>(tokens.size()) - 1) / options_.block_tokens);
  if (from >= to) return 0;
  LandDiskJobs(DiskThreads::kReader);
  const int64_t reads_before = num_disk_reads_in_flight();
  // Back first: the compute meets the loads wherever they have come to (Scheduler::Attach).
  // All at once: a read that waits for a later step's budget lands too late to be used.
  ReadPrefixAhead(tokens, keys, from, to, /*back_first=*/true, /*budget=*/to - from);
  const int64_t reads = num_disk_reads_in_flight() - reads_before;
  if (remote_.store == nullptr) return reads;
  // The first block of the range no local tier holds: the remote tier may, from there on.
  for (int64_t i = from; i < to; ++i) {
    const BlockHash& hash = keys->Key(tokens, options_.block_tokens, i);
    const bool local = state(Tier::kDevice).by_hash.contains(hash) || state(Tier::kHost).by_hash.contains(hash) ||
                       state(Tier::kDisk).by_hash.contains(hash) ||
                       (disk_tier_.jobs != nullptr && disk_tier_.jobs->PrefixReadOf(hash).has_value());
    if (!local) {
      LandRemoteLookups();
      LookUpRemote(tokens, keys, i, to, /*back_first=*/true);  // as the disk reads
      return reads;
    }
  }
  return reads;
}

}  // namespace kvtier
