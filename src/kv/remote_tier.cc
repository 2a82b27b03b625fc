// Implementation of RemoteTier (remote_tier.h).
#include "kv/remote_tier.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "backend/backend.h"
#include "common/status_macros.h"
#include "kv/copy_timer.h"
#include "kv/host_tier.h"
#include "remote/redis_address.h"
#include "remote/remote_block_store.h"

namespace kvtier {
namespace {

// Blocks put per step at most (one device -> host copy batch).
constexpr int64_t kRemotePutBlocks = 32;
// Landed lookups nobody took are forgotten after this many steps.
constexpr int64_t kRemoteLookupSteps = 32;
// Lookups in flight into host slots: at most this share of the host tier's slots (the rest
// stay for swaps, write-backs and disk read-ahead).
constexpr int64_t kRemoteHostShareDivisor = 2;
// Load bandwidth assumed until the tier has delivered enough blocks here (bytes/second),
// above what one Redis node gave on the same host (2.2-2.5 GB/s, 2 MiB values): a guess
// above the real speed costs little under a load plan (the front computes on until it
// meets the loads), one below computes blocks that would have loaded.
constexpr double kGuessedRemoteBytesPerSecond = 4e9;
// Block bytes delivered before the measured bandwidth replaces the guess: a few blocks
// measure mostly round trips, a few dozen the bandwidth.
constexpr int64_t kRemoteBytesMeasured = 32ll << 20;

}  // namespace

RemoteTier::RemoteTier(KvContext* ctx, HostTier* host) : ctx_(ctx), host_(host) {}

absl::StatusOr<std::unique_ptr<RemoteTier>> RemoteTier::Create(KvContext* ctx, HostTier* host) {
  const RemoteTierOptions& remote = ctx->options.remote;
  if (remote.url.empty()) return nullptr;
  std::unique_ptr<RemoteTier> tier(new RemoteTier(ctx, host));
  RemoteStoreOptions store;
  ASSIGN_OR_RETURN(store.nodes, ParseRemoteKvUrl(remote.url));
  store.format = {ctx->options.model_fingerprint, ctx->block_bytes, ctx->options.block_tokens};
  store.ttl_seconds = remote.ttl_seconds;
  store.max_bytes_in_flight = remote.max_bytes_in_flight;
  store.timeout = std::chrono::milliseconds(std::max<int64_t>(remote.timeout_ms, 1));
  store.retry = std::chrono::milliseconds(std::max<int64_t>(remote.retry_ms, 0));
  store.get_connections = static_cast<int>(std::clamp<int64_t>(remote.connections, 1, 64));
  // The device -> host copies of the blocks put: at most a step's puts, within the bound.
  tier->put_buffer_blocks_ =
      std::clamp<int64_t>(remote.max_bytes_in_flight / static_cast<int64_t>(ctx->block_bytes), 1, kRemotePutBlocks);
  ASSIGN_OR_RETURN(void* memory,
                   ctx->backend->AllocateHostMemory(static_cast<size_t>(tier->put_buffer_blocks_) * ctx->block_bytes));
  tier->put_buffer_ = static_cast<uint8_t*>(memory);
  tier->store_ = std::make_unique<RemoteBlockStore>(std::move(store));
  ctx->transfers.OpenRemote(tier->store_.get());
  return tier;
}

RemoteTier::~RemoteTier() {
  // Blocks computed here reach the tier for the other processes (each batch bounded by its
  // timeout).
  if (store_ != nullptr) FlushPuts();
  ctx_->transfers.OpenRemote(nullptr);
  store_.reset();
  if (put_buffer_ != nullptr) ctx_->backend->FreeHostMemory(put_buffer_);
}

// ---------------------------------------------------------------- look up

LowerTier::Presence RemoteTier::Find(const BlockHash& hash) const {
  if (auto it = landed_.find(hash); it != landed_.end()) {
    return it->second.status.ok() ? Presence::kLanded : Presence::kAbsent;
  }
  return ctx_->transfers.RemoteGetOf(hash) ? Presence::kLoading : Presence::kUnknown;
}

int64_t RemoteTier::ProbeRun(const BlockChain& chain, int64_t first, int64_t max) {
  if (first >= max) return 0;
  std::vector<Sha256Digest> digests;
  digests.reserve(static_cast<size_t>(max - first));
  for (int64_t i = first; i < max; ++i) digests.push_back(chain.Key(i).digest);
  const auto timeout = std::chrono::milliseconds(std::max<int64_t>(ctx_->options.remote.timeout_ms, 1));
  const absl::StatusOr<std::vector<bool>> present = store_->Probe(digests, std::chrono::steady_clock::now() + timeout);
  if (!present.ok()) {
    if (absl::IsDeadlineExceeded(present.status())) ++ctx_->counters.remote.lookup_timeouts;
    return 0;  // unknown: counted on for nothing (computed)
  }
  int64_t run = 0;
  while (run < static_cast<int64_t>(present->size()) && (*present)[static_cast<size_t>(run)]) ++run;
  ++ctx_->counters.remote.probes;
  ctx_->counters.remote.probe_blocks += run;
  return run;
}

double RemoteTier::SecondsPerBlock() const {
  double bandwidth = kGuessedRemoteBytesPerSecond;
  const RemoteBlockStore::Counters c = store_->counters();
  // A few blocks measure mostly the round trips: the guess serves until enough landed.
  if (c.get_bytes >= kRemoteBytesMeasured && c.get_seconds > 0) {
    bandwidth = static_cast<double>(c.get_bytes) / c.get_seconds;
  }
  return static_cast<double>(ctx_->block_bytes) / bandwidth;
}

const RemoteTier::Landed* RemoteTier::LandedHit(const BlockHash& hash) const {
  auto it = landed_.find(hash);
  return it != landed_.end() && it->second.status.ok() ? &it->second : nullptr;
}

std::vector<int64_t> RemoteTier::ToLookUp(const BlockChain& chain, int64_t first, int64_t max_blocks) const {
  std::vector<int64_t> blocks;
  for (int64_t i = first; i < max_blocks; ++i) {
    const BlockHash hash = chain.Key(i);
    if (auto it = landed_.find(hash); it != landed_.end()) {
      if (!it->second.status.ok()) break;  // a known miss: the chain ends there
      continue;
    }
    if (ctx_->transfers.RemoteGetOf(hash)) continue;
    // Computed here meanwhile, or cached on the host.
    if (ctx_->DeviceCaches(chain, i) || host_->cache().Contains(hash)) continue;
    blocks.push_back(i);
  }
  return blocks;
}

bool RemoteTier::LookUp(const BlockChain& chain, std::span<const int64_t> blocks) {
  bool started = false;
  for (const int64_t i : blocks) {
    const BlockHash hash = chain.Key(i);
    // Into a host slot (held until used or expired) while the host tier lends them: pinned,
    // landing with no copy.
    if (host_slot_lookups_ < host_->num_blocks() / kRemoteHostShareDivisor) {
      if (const std::optional<int32_t> slot = host_->TakeSlot(/*may_wait=*/false)) {
        if (!ctx_->transfers.SubmitRemoteGet(RemoteGet{hash, *slot, {}}, chain.Tokens(i), host_->bytes(*slot)).ok()) {
          host_->cache().pool().Release(*slot);
          break;
        }
        ++host_slot_lookups_;
        started = true;
        continue;
      }
    }
    // Landed bytes wait for their match: they count toward the bound too.
    if (landed_bytes_ + static_cast<int64_t>(ctx_->block_bytes) > ctx_->options.remote.max_bytes_in_flight &&
        landed_bytes_ > 0) {
      break;
    }
    if (!ctx_->transfers.SubmitRemoteGet(RemoteGet{hash, -1, {}}, chain.Tokens(i), nullptr).ok()) break;
    started = true;
  }
  return started;
}

const RemoteTier::Landed* RemoteTier::Hit(const BlockChain& chain, int64_t i, int64_t max_blocks) {
  const BlockHash hash = chain.Key(i);
  Transfers& transfers = ctx_->transfers;
  transfers.Land(LaneBit(Lane::kRemoteGet));
  if (!landed_.contains(hash) && !transfers.RemoteGetOf(hash)) {
    const std::vector<int64_t> blocks = ToLookUp(chain, i, max_blocks);
    LookUp(chain, blocks);
  }
  // Waits while lookups keep landing, at most the timeout without one: a slow or dead Redis
  // costs a prefix match one timeout, never more.
  const auto timeout = std::chrono::milliseconds(std::max<int64_t>(ctx_->options.remote.timeout_ms, 1));
  while (transfers.RemoteGetOf(hash)) {
    if (!transfers.AwaitRemoteGet(std::chrono::steady_clock::now() + timeout)) {
      ++ctx_->counters.remote.lookup_timeouts;
      return nullptr;
    }
  }
  return LandedHit(hash);  // nullptr: refused (off, or the bound), a miss, or unusable
}

// ---------------------------------------------------------------- read into the device

LowerTier::ClaimResult RemoteTier::ClaimForLoad(const BlockChain& chain, int64_t i, int64_t max_blocks,
                                                bool landed_only, Claim* claim) {
  const BlockHash hash = chain.Key(i);
  const Landed* hit = landed_only ? LandedHit(hash) : Hit(chain, i, max_blocks);
  if (hit == nullptr) return ClaimResult::kMiss;
  // Received in a host slot (pinned), or into bytes of its own.
  *claim = Claim{hash, -1, hit->host_slot >= 0 ? host_->bytes(hit->host_slot) : hit->bytes.data()};
  return ClaimResult::kHit;
}

absl::Status RemoteTier::StartLoad(const Claim& claim, std::span<const int32_t>, BlockId block) {
  loads_.push_back({block, claim.bytes, claim.hash});
  return absl::OkStatus();
}

std::vector<absl::Status> RemoteTier::FinishLoads() {
  if (loads_.empty()) return {};
  std::vector<BlockCopy> copies;
  for (const Load& load : loads_) copies.push_back({load.block, const_cast<uint8_t*>(load.bytes)});
  absl::Status copied;
  {
    CopyTimer timer(&ctx_->counters.copy_seconds);
    ctx_->counters.swap_bytes_timed += static_cast<int64_t>(copies.size() * ctx_->block_bytes);
    copied = ctx_->backend->CopyBlocksFromHost(copies);
  }
  if (copied.ok()) {
    for (const Load& load : loads_) Drop(load.hash);  // used: the landed bytes are not needed any more
  } else {
    ++ctx_->counters.io_errors;
  }
  std::vector<absl::Status> results(loads_.size(), copied);
  loads_.clear();
  return results;
}

int64_t RemoteTier::ReadAhead(const BlockChain& chain, std::span<const int64_t> blocks,
                              const ReadAheadOptions& options) {
  std::vector<int64_t> order(blocks.begin(), blocks.end());
  if (options.back_first) std::reverse(order.begin(), order.end());
  const int64_t before = ctx_->transfers.num_in_flight(Lane::kRemoteGet);
  LookUp(chain, order);
  return ctx_->transfers.num_in_flight(Lane::kRemoteGet) - before;
}

void RemoteTier::Land(Transfers::Landed& landed) {
  RemoteGet& get = std::get<RemoteGet>(landed.transfer);
  const absl::Status& status = landed.status;
  if (get.host_slot >= 0) {
    if (status.ok()) {
      // Received in its host slot: held there (in no cache map, so nothing evicts it)
      // until its match copies it to the device, or it expires.
      ++ctx_->counters.remote.landed_in_host;
    } else {
      host_->cache().pool().Release(get.host_slot);
      get.host_slot = -1;
      --host_slot_lookups_;
    }
  }
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) return;  // the tier failed: asked again later
  if (!status.ok() && !absl::IsNotFound(status)) {
    ++ctx_->counters.corrupt_blocks_detected;  // a corrupt, foreign or other-token value
  }
  landed_bytes_ += static_cast<int64_t>(get.bytes.size());
  landed_[get.hash] = Landed{status, std::move(get.bytes), step_, get.host_slot};
}

void RemoteTier::Drop(const BlockHash& hash) {
  auto it = landed_.find(hash);
  if (it == landed_.end()) return;
  landed_bytes_ -= static_cast<int64_t>(it->second.bytes.size());
  if (it->second.host_slot >= 0) {
    host_->cache().pool().Release(it->second.host_slot);
    --host_slot_lookups_;
  }
  landed_.erase(it);
}

void RemoteTier::Expire() {
  ++step_;
  std::vector<BlockHash> expired;
  for (const auto& [hash, lookup] : landed_) {
    if (step_ - lookup.landed_step > kRemoteLookupSteps) expired.push_back(hash);
  }
  for (const BlockHash& hash : expired) Drop(hash);
}

// ---------------------------------------------------------------- write from the device

void RemoteTier::QueueWrite(BlockId block, const BlockHash& hash, bool computed) {
  if (!computed) return;  // a block loaded from a tier is there already, or was
  put_queue_.push_back({block, hash});
  ++ctx_->counters.remote.puts_queued;
  // Bounded as write-behind's queue: the oldest are not shared when the tier falls behind.
  if (static_cast<int64_t>(put_queue_.size()) > 2 * ctx_->device.num_blocks()) put_queue_.pop_front();
}

void RemoteTier::StartWrites(WritePhase phase) {
  switch (phase) {
    case WritePhase::kBeforeForward:
      return;
    case WritePhase::kStepEnd:
      StartPuts();  // the blocks this step computed, to the put lane
      return;
    case WritePhase::kIdleStep: {
      StartPuts();
      // The rest of the queue too (a batch per put buffer), within the budget, so that an
      // idle context's blocks reach the tier before its next request.
      const auto deadline = std::chrono::steady_clock::now() + ctx_->options.idle_drain_budget;
      DrainPutQueue([&] { return store_->WaitForPutRoom(deadline); });
      return;
    }
    case WritePhase::kIdlePump:
      // A batch per put buffer while the put lane has room; nothing is waited for.
      DrainPutQueue([&] { return store_->WaitForPutRoom(std::chrono::steady_clock::now()); });
      return;
  }
}

int64_t RemoteTier::PendingWrites() const {
  return static_cast<int64_t>(put_queue_.size()) + store_->puts_pending();
}

void RemoteTier::StartPuts() {
  Transfers& transfers = ctx_->transfers;
  transfers.Land(LaneBit(Lane::kRemoteGet));
  Expire();
  while (!put_queue_.empty()) {
    // The put buffer is free again once the lane has encoded what was staged in it.
    transfers.Land(LaneBit(Lane::kRemotePut));
    if (transfers.num_in_flight(Lane::kRemotePut) > 0) return;
    // The staleness fence: the queued blocks still cached with the key they had (a block
    // evicted since and written for another key, group or prefix is skipped), copied to the
    // put buffer in one batch, which the put lane encodes from; the block itself is never
    // read after this.
    std::vector<BlockCopy> copies;
    std::vector<BlockHash> hashes;
    std::vector<Tokens> tokens;
    while (!put_queue_.empty() && static_cast<int64_t>(copies.size()) < put_buffer_blocks_) {
      const auto [block, hash] = put_queue_.front();
      put_queue_.pop_front();
      const std::optional<DeviceEntry> cached = ctx_->DeviceEntryOf(block);
      if (!cached.has_value() || cached->key != hash) {
        ++ctx_->counters.remote.puts_stale;
        continue;
      }
      if (store_->KnownPresent(hash.digest)) continue;  // found there (or put) already: no copy
      copies.push_back({block, put_buffer_ + copies.size() * ctx_->block_bytes});
      hashes.push_back(hash);
      tokens.emplace_back(cached->tokens.begin(), cached->tokens.end());
    }
    if (copies.empty()) return;
    absl::Status copied;
    {
      CopyTimer timer(&ctx_->counters.copy_seconds);
      ctx_->counters.swap_bytes_timed += static_cast<int64_t>(copies.size() * ctx_->block_bytes);
      copied = ctx_->backend->CopyBlocksToHost(copies);
    }
    if (!copied.ok()) {
      ++ctx_->counters.io_errors;
      return;
    }
    int64_t staged = 0;
    for (size_t i = 0; i < copies.size(); ++i) {
      const absl::Status put =
          store_->PutStaged(hashes[i].digest, tokens[i], static_cast<const uint8_t*>(copies[i].host));
      if (absl::IsResourceExhausted(put)) {
        // Full: the rest wait for a later step, in order.
        for (size_t j = copies.size(); j-- > i;) put_queue_.push_front({copies[j].device_block, hashes[j]});
        break;
      }
      if (!put.ok()) {  // off: nothing is queued until it comes back
        put_queue_.clear();
        break;
      }
      ++staged;
    }
    if (staged > 0) transfers.NoteRemotePutBatch(staged);
    if (staged < static_cast<int64_t>(copies.size())) return;
  }
}

void RemoteTier::DrainPutQueue(absl::FunctionRef<bool()> buffer_free) {
  while (!put_queue_.empty() && buffer_free()) {
    const size_t queued = put_queue_.size();
    StartPuts();
    if (put_queue_.size() == queued) break;
  }
}

void RemoteTier::FlushPuts() {
  // Each wait: the put buffer's last batch encoded and sent, room for the next.
  DrainPutQueue([&] {
    store_->Flush();
    return true;
  });
  store_->Flush();
  ctx_->transfers.Land(LaneBit(Lane::kRemotePut));
}

}  // namespace kvtier
