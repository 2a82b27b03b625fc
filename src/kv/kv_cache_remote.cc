// KvCacheManager's remote tier (Redis, shared by every process of a service): blocks
// computed here are put there after the step that filled them, and a prompt's blocks that
// no local tier holds are looked up there, on the store's I/O thread (RemoteBlockStore),
// before the prefix match uses them: into host slots where the host tier has room (pinned,
// in place, with no wait for this thread; held there until the match copies them to the
// device), else into buffers of their own, bounded by remote_kv_max_bytes_in_flight. Before a load
// plan counts on the remote tier, one pipelined EXISTS says which blocks it really holds
// (and so which of the blocks the plan computes need no put). Same keys as the other tiers (namespace included),
// the disk slot format as the value, checked before use: a corrupt, foreign or
// other-token value is a miss, and the block is recomputed.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "common/status_macros.h"
#include "kv/copy_timer.h"
#include "kv/kv_cache_manager.h"
#include "remote/redis_address.h"
#include "remote/remote_block_store.h"

namespace kvtier {
namespace {

// Blocks put per step at most (one device -> host copy batch).
constexpr int64_t kRemotePutBlocks = 32;
// Landed lookups nobody took are forgotten after this many steps.
constexpr int64_t kRemoteLookupSteps = 32;
// Lookups in flight into host slots: at most this share of the host tier's slots (the
// rest stay for swaps, write-backs and disk read-ahead).
constexpr int64_t kRemoteHostShareDivisor = 2;

}  // namespace

absl::Status KvCacheManager::OpenRemoteTier() {
  const RemoteTierOptions& remote = options_.remote;
  if (remote.url.empty()) return absl::OkStatus();
  RemoteStoreOptions store;
  ASSIGN_OR_RETURN(store.nodes, ParseRemoteKvUrl(remote.url));
  store.format = {options_.model_fingerprint, block_bytes_, options_.block_tokens};
  store.ttl_seconds = remote.ttl_seconds;
  store.max_bytes_in_flight = remote.max_bytes_in_flight;
  store.timeout = std::chrono::milliseconds(std::max<int64_t>(remote.timeout_ms, 1));
  store.retry = std::chrono::milliseconds(std::max<int64_t>(remote.retry_ms, 0));
  store.get_connections = static_cast<int>(std::clamp<int64_t>(remote.connections, 1, 64));
  // The device -> host copies of the blocks put: at most a step's puts, within the bound.
  remote_.put_buffer_blocks = std::clamp<int64_t>(remote.max_bytes_in_flight / static_cast<int64_t>(block_bytes_), 1,
                                                  kRemotePutBlocks);
  ASSIGN_OR_RETURN(void* memory,
                   backend_->AllocateHostMemory(static_cast<size_t>(remote_.put_buffer_blocks) * block_bytes_));
  remote_.put_buffer = static_cast<uint8_t*>(memory);
  remote_.store = std::make_unique<RemoteBlockStore>(std::move(store));
  return absl::OkStatus();
}

void KvCacheManager::QueueRemotePut(BlockId block, BlockHash hash) {
  if (remote_.store == nullptr) return;
  remote_.put_queue.push_back({block, hash});
  ++counters_.remote_puts_queued;
  // Bounded as write-behind's queue: the oldest are not shared when the tier falls behind.
  if (static_cast<int64_t>(remote_.put_queue.size()) > 2 * pool(Tier::kDevice).num_blocks()) {
    remote_.put_queue.pop_front();
  }
}

void KvCacheManager::StartRemotePuts() {
  if (remote_.store == nullptr) return;
  LandRemoteLookups(/*expire=*/true);
  while (!remote_.put_queue.empty()) {
    // The put buffer is free again once the lane has encoded what was staged in it.
    if (remote_.store->staged_puts() > 0) return;
    // The queued blocks still cached with the key they had (a block evicted and reused
    // since is skipped), copied to the host buffer in one batch.
    std::vector<BlockCopy> copies;
    std::vector<BlockHash> hashes;
    while (!remote_.put_queue.empty() && static_cast<int64_t>(copies.size()) < remote_.put_buffer_blocks) {
      const auto [block, hash] = remote_.put_queue.front();
      remote_.put_queue.pop_front();
      auto cached = state(Tier::kDevice).hash_of.find(block);
      if (cached == state(Tier::kDevice).hash_of.end() || cached->second != hash) continue;
      if (remote_.store->KnownPresent(hash.digest)) continue;  // found there (or put) already: no copy
      copies.push_back({block, remote_.put_buffer + copies.size() * block_bytes_});
      hashes.push_back(hash);
    }
    if (copies.empty()) return;
    absl::Status copied;
    {
      CopyTimer timer(&counters_.copy_seconds);
      counters_.swap_bytes_timed += static_cast<int64_t>(copies.size() * block_bytes_);
      copied = backend_->CopyBlocksToHost(copies);
    }
    if (!copied.ok()) {
      ++counters_.io_errors;
      return;
    }
    for (size_t i = 0; i < copies.size(); ++i) {
      const absl::Status put = remote_.store->PutStaged(
          hashes[i].digest, StoredTokens(Tier::kDevice, copies[i].device_block), static_cast<const uint8_t*>(copies[i].host));
      if (absl::IsResourceExhausted(put)) {
        // Full: the rest wait for a later step, in order.
        for (size_t j = copies.size(); j-- > i;) remote_.put_queue.push_front({copies[j].device_block, hashes[j]});
        return;
      }
      if (!put.ok()) {  // off: nothing is queued until it comes back
        remote_.put_queue.clear();
        return;
      }
    }
  }
}

void KvCacheManager::DrainRemotePutQueue(absl::FunctionRef<bool()> buffer_free) {
  while (!remote_.put_queue.empty() && buffer_free()) {
    const size_t queued = remote_.put_queue.size();
    StartRemotePuts();
    if (remote_.put_queue.size() == queued) break;
  }
}

void KvCacheManager::FlushRemotePuts() {
  if (remote_.store == nullptr) return;
  // Each wait: the put buffer's last batch encoded and sent, room for the next.
  DrainRemotePutQueue([&] {
    remote_.store->Flush();
    return true;
  });
  remote_.store->Flush();
}

void KvCacheManager::LandRemoteLookups(bool expire) {
  if (remote_.store == nullptr) return;
  if (expire) ++remote_.step;
  for (RemoteBlockStore::GetResult& result : remote_.store->TakeFinished()) {
    const BlockHash hash{result.key};
    auto it = remote_.lookups.find(hash);
    if (it == remote_.lookups.end() || it->second.landed) continue;
    ++remote_.landed_total;
    if (const int32_t slot = it->second.host_slot; slot >= 0) {
      if (result.status.ok()) {
        // Received in its host slot: held there (in no cache map, so nothing evicts it)
        // until its match copies it to the device, or it expires.
        ++counters_.remote_landed_in_host;
      } else {
        pool(Tier::kHost).Release(slot);
        it->second.host_slot = -1;
        --remote_.host_slot_lookups;
      }
    }
    if (absl::IsUnavailable(result.status) || absl::IsDeadlineExceeded(result.status)) {
      remote_.lookups.erase(it);  // the tier failed: asked again once it is back
      continue;
    }
    RemoteLookup& lookup = it->second;
    lookup.landed = true;
    lookup.status = std::move(result.status);
    lookup.bytes = std::move(result.bytes);
    lookup.landed_step = remote_.step;
    remote_.landed_bytes += static_cast<int64_t>(lookup.bytes.size());
    if (!lookup.status.ok() && !absl::IsNotFound(lookup.status)) {
      ++counters_.corrupt_blocks_detected;  // a corrupt, foreign or other-token value
    }
  }
  if (!expire) return;
  for (auto it = remote_.lookups.begin(); it != remote_.lookups.end();) {
    auto here = it++;
    if (here->second.landed && remote_.step - here->second.landed_step > kRemoteLookupSteps) {
      remote_.landed_bytes -= static_cast<int64_t>(here->second.bytes.size());
      if (here->second.host_slot >= 0) {
        pool(Tier::kHost).Release(here->second.host_slot);
        --remote_.host_slot_lookups;
      }
      remote_.lookups.erase(here);
    }
  }
}

bool KvCacheManager::LookUpRemote(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t first,
                                  int64_t max_blocks, bool back_first) {
  bool in_flight = false;
  std::vector<int64_t> to_look_up;
  for (int64_t i = first; i < max_blocks; ++i) {
    const BlockHash& hash = keys->Key(tokens, options_.block_tokens, i);
    if (auto it = remote_.lookups.find(hash); it != remote_.lookups.end()) {
      if (!it->second.landed) in_flight = true;
      if (it->second.landed && !it->second.status.ok()) break;  // the chain ends there
      continue;
    }
    // Computed here meanwhile, or cached on the host.
    if (state(Tier::kDevice).by_hash.contains(hash) || state(Tier::kHost).by_hash.contains(hash)) continue;
    to_look_up.push_back(i);
  }
  if (back_first) std::reverse(to_look_up.begin(), to_look_up.end());
  for (const int64_t i : to_look_up) {
    const BlockHash hash = keys->Key(tokens, options_.block_tokens, i);
    // Into a host slot (held until used or expired) while the host tier lends them: pinned,
    // landing with no copy.
    if (remote_.host_slot_lookups < pool(Tier::kHost).num_blocks() / kRemoteHostShareDivisor) {
      if (const std::optional<int32_t> slot = AllocateSlot(Tier::kHost, /*may_wait=*/false)) {
        if (!remote_.store->Get(hash.digest, BlockTokens(tokens, i), HostSlot(*slot)).ok()) {
          pool(Tier::kHost).Release(*slot);
          break;
        }
        RemoteLookup lookup;
        lookup.host_slot = *slot;
        remote_.lookups[hash] = std::move(lookup);
        ++remote_.host_slot_lookups;
        in_flight = true;
        continue;
      }
    }
    // Landed bytes wait for their match: they count toward the bound too.
    if (remote_.landed_bytes + static_cast<int64_t>(block_bytes_) > options_.remote.max_bytes_in_flight &&
        remote_.landed_bytes > 0) {
      break;
    }
    if (!remote_.store->Get(hash.digest, BlockTokens(tokens, i)).ok()) break;
    remote_.lookups[hash] = RemoteLookup{};
    in_flight = true;
  }
  return in_flight;
}

const KvCacheManager::RemoteLookup* KvCacheManager::RemoteHit(std::span<const int32_t> tokens, BlockKeyChain* keys,
                                                              int64_t i, int64_t max_blocks) {
  if (remote_.store == nullptr) return nullptr;
  const BlockHash hash = keys->Key(tokens, options_.block_tokens, i);
  LandRemoteLookups();
  if (!remote_.lookups.contains(hash)) LookUpRemote(tokens, keys, i, max_blocks);
  auto it = remote_.lookups.find(hash);
  if (it == remote_.lookups.end()) return nullptr;  // refused: off, or the bound
  // Waits while lookups keep landing, at most timeout_ms without one: a slow or dead Redis
  // costs a prefix match one timeout, never more.
  const auto timeout = std::chrono::milliseconds(std::max<int64_t>(options_.remote.timeout_ms, 1));
  while (it != remote_.lookups.end() && !it->second.landed) {
    remote_.store->WaitForGets(std::chrono::steady_clock::now() + timeout);
    const int64_t landed_before = remote_.landed_total;
    LandRemoteLookups();
    it = remote_.lookups.find(hash);
    if (remote_.landed_total == landed_before) {
      ++counters_.remote_lookup_timeouts;
      return nullptr;
    }
  }
  return it != remote_.lookups.end() && it->second.status.ok() ? &it->second : nullptr;
}

const KvCacheManager::RemoteLookup* KvCacheManager::LandedRemoteHit(const BlockHash& hash) const {
  if (remote_.store == nullptr) return nullptr;
  auto it = remote_.lookups.find(hash);
  return it != remote_.lookups.end() && it->second.landed && it->second.status.ok() ? &it->second : nullptr;
}

int64_t KvCacheManager::ProbeRemoteRun(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t first,
                                       int64_t max_blocks) {
  if (remote_.store == nullptr || first >= max_blocks) return 0;
  std::vector<Sha256Digest> digests;
  digests.reserve(static_cast<size_t>(max_blocks - first));
  for (int64_t i = first; i < max_blocks; ++i) digests.push_back(keys->Key(tokens, options_.block_tokens, i).digest);
  const auto timeout = std::chrono::milliseconds(std::max<int64_t>(options_.remote.timeout_ms, 1));
  const absl::StatusOr<std::vector<bool>> present =
      remote_.store->Probe(digests, std::chrono::steady_clock::now() + timeout);
  if (!present.ok()) {
    if (absl::IsDeadlineExceeded(present.status())) ++counters_.remote_lookup_timeouts;
    return 0;  // unknown: counted on for nothing (computed)
  }
  int64_t run = 0;
  while (run < static_cast<int64_t>(present->size()) && (*present)[static_cast<size_t>(run)]) ++run;
  ++counters_.remote_probes;
  counters_.remote_probe_blocks += run;
  return run;
}

bool KvCacheManager::RemoteReadAhead(SequenceId seq, std::span<const int32_t> tokens, BlockKeyChain* keys) {
  if (remote_.store == nullptr || !options_.prefix_cache || tokens.size() < 2) return false;
  if (swapped_.contains(seq)) return false;
  if (auto held = sequences_.find(seq); held != sequences_.end() && (!held->second.table.empty() || !held->second.host_slots.empty())) {
    return false;
  }
  LandRemoteLookups();
  std::optional<BlockKeyChain> own_keys;
  if (keys == nullptr) keys = &own_keys.emplace(default_scope_);
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / options_.block_tokens;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const BlockHash& hash = keys->Key(tokens, options_.block_tokens, i);
    const bool local = state(Tier::kDevice).by_hash.contains(hash) || state(Tier::kHost).by_hash.contains(hash) ||
                       state(Tier::kDisk).by_hash.contains(hash) ||
                       (disk_tier_.jobs != nullptr && disk_tier_.jobs->PrefixReadOf(hash).has_value());
    if (!local) return LookUpRemote(tokens, keys, i, max_blocks);
  }
  return false;
}

}  // namespace kvtier
