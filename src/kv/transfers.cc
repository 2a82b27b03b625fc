// Implementation of Transfers (transfers.h).
#include "kv/transfers.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "common/clock.h"
#include "remote/remote_block_store.h"

namespace kvtier {
Transfers::Transfers(Backend* backend, KvCacheCounters* counters, size_t block_bytes)
    : backend_(backend), counters_(counters), block_bytes_(block_bytes) {}

Transfers::~Transfers() { CloseDisk(); }

void Transfers::OpenDisk(DiskBlockStore* store) {
  writer_ = std::make_unique<DiskIoThread>(store, 1);
  reader_ = std::make_unique<DiskIoThread>(store, kReaderThreads);
}

void Transfers::CloseDisk() {
  reader_.reset();
  writer_.reset();
}

void Transfers::Register(TransferId id, Transfer transfer) {
  Index(id, transfer, /*add=*/true);
  if (std::holds_alternative<EvictionWriteJob>(transfer) || std::holds_alternative<StagedReadJob>(transfer)) {
    awaited_[id] = std::nullopt;
  }
  registry_.emplace(id, std::move(transfer));
  ++num_in_flight_[static_cast<int>(id.lane)];
}

void Transfers::Index(TransferId id, const Transfer& transfer, bool add) {
  auto set = [&](auto& map, const auto& key) {
    if (add) {
      map[key] = id;
    } else if (auto it = map.find(key); it != map.end() && it->second == id) {
      map.erase(it);
    }
  };
  if (const auto* t = std::get_if<WriteBackJob>(&transfer)) set(write_back_by_host_slot_, t->host_slot);
  if (const auto* t = std::get_if<SwapWriteJob>(&transfer)) set(swap_write_by_slot_, t->disk_slot);
  if (const auto* t = std::get_if<DemoteWriteJob>(&transfer)) set(demote_write_by_hash_, t->hash);
  if (const auto* t = std::get_if<PersistWriteJob>(&transfer)) set(persist_write_by_hash_, t->hash);
  if (const auto* t = std::get_if<PrefixReadJob>(&transfer)) {
    set(read_by_slot_, t->disk_slot);
    set(prefix_read_by_hash_, t->hash);
  }
  if (const auto* t = std::get_if<SwapReadJob>(&transfer)) set(read_by_slot_, t->disk_slot);
  if (const auto* t = std::get_if<RemoteGet>(&transfer)) set(remote_get_by_hash_, t->hash);
}

absl::StatusOr<int64_t> Transfers::StartCopies(std::vector<Copy> copies) {
  std::vector<BlockCopy> blocks;
  blocks.reserve(copies.size());
  for (const Copy& c : copies) blocks.push_back({c.block, c.destination});
  absl::StatusOr<int64_t> ticket;
  {
    // Host time only (enqueueing, on backends with copy engines); the cost model's
    // bandwidth is what the host pays per byte, which is what it weighs against recompute.
    const auto start = std::chrono::steady_clock::now();
    ticket = backend_->StartCopiesToHost(blocks);
    counters_->copy_seconds += SecondsSince(start);
  }
  if (!ticket.ok()) return ticket.status();
  counters_->swap_bytes_timed += static_cast<int64_t>(copies.size() * block_bytes_);
  ++counters_->async_copy_batches;
  const int64_t batch = ++copy_batch_seq_;
  for (size_t i = 0; i < copies.size(); ++i) {
    reading_batch_[copies[i].block] = batch;
    Register(TransferId{Lane::kCopy, batch, static_cast<int32_t>(i)}, std::move(copies[i].transfer));
  }
  copy_batches_.push_back({batch, *ticket});
  return batch;
}

std::optional<int64_t> Transfers::ReadingBatch(BlockId block) const {
  auto it = reading_batch_.find(block);
  if (it == reading_batch_.end()) return std::nullopt;
  return it->second;
}

TransferId Transfers::SubmitDiskWrite(Transfer transfer, int32_t disk_slot, const Sha256Digest& key,
                                      std::span<const int32_t> tokens, const void* data) {
  const auto content = std::holds_alternative<SwapWriteJob>(transfer)     ? DiskBlockStore::Content::kPrivate
                       : std::holds_alternative<RenewRecordJob>(transfer) ? DiskBlockStore::Content::kRecordOnly
                                                                          : DiskBlockStore::Content::kCached;
  const TransferId id{Lane::kDiskWrite, writer_->SubmitWrite(disk_slot, key, tokens, data, content), 0};
  Register(id, std::move(transfer));
  return id;
}

TransferId Transfers::SubmitDiskRead(Transfer transfer, int32_t disk_slot, const Sha256Digest& key,
                                     std::span<const int32_t> tokens, void* dest) {
  const TransferId id{Lane::kDiskRead, reader_->SubmitRead(disk_slot, key, tokens, dest), 0};
  Register(id, std::move(transfer));
  return id;
}

TransferId Transfers::SubmitDiskProbe(int32_t disk_slot) {
  const TransferId id{Lane::kDiskRead, reader_->SubmitProbe(disk_slot), 0};
  Register(id, SpeedProbeJob{});
  return id;
}

absl::Status Transfers::SubmitRemoteGet(RemoteGet get, std::span<const int32_t> tokens, uint8_t* destination) {
  const absl::Status queued = remote_->Get(get.hash.digest, tokens, destination);
  if (!queued.ok()) return queued;
  Register(TransferId{Lane::kRemoteGet, ++remote_seq_, 0}, std::move(get));
  return absl::OkStatus();
}

void Transfers::NoteRemotePutBatch(int64_t blocks) {
  Register(TransferId{Lane::kRemotePut, ++remote_seq_, 0}, RemotePutBatch{blocks});
}

void Transfers::LandOne(TransferId id, absl::Status status, RemoteBlockBytes bytes) {
  auto it = registry_.find(id);
  if (it == registry_.end()) return;
  Index(id, it->second, /*add=*/false);
  if (auto awaited = awaited_.find(id); awaited != awaited_.end()) awaited->second = status;
  Landed landed{id, std::move(it->second), std::move(status)};
  if (auto* get = std::get_if<RemoteGet>(&landed.transfer)) get->bytes = std::move(bytes);
  registry_.erase(it);
  --num_in_flight_[static_cast<int>(id.lane)];
  if (land_) land_(landed);
}

void Transfers::LandCopiesUpTo(int64_t batch, const absl::Status& status) {
  while (!copy_batches_.empty() && copy_batches_.front().id <= batch) {
    const int64_t landing = copy_batches_.front().id;
    copy_batches_.pop_front();
    // The batch's copies, in batch order.
    std::vector<TransferId> ids;
    for (auto it = registry_.lower_bound(CopyBatch(landing));
         it != registry_.end() && it->first.lane == Lane::kCopy && it->first.seq == landing; ++it) {
      ids.push_back(it->first);
    }
    for (const TransferId& id : ids) {
      const BlockId block = std::visit(
          [](const auto& t) -> BlockId {
            if constexpr (requires { t.block; }) {
              return t.block;
            } else {
              return -1;
            }
          },
          registry_.at(id));
      if (auto r = reading_batch_.find(block); r != reading_batch_.end() && r->second <= landing) {
        reading_batch_.erase(r);
      }
      LandOne(id, status);
    }
  }
}

void Transfers::LandCopies() {
  while (!copy_batches_.empty()) {
    const CopyBatchTicket oldest = copy_batches_.front();
    const absl::StatusOr<bool> done = backend_->CopiesDone(oldest.ticket);
    if (done.ok() && !*done) break;
    LandCopiesUpTo(oldest.id, done.status());
  }
}

void Transfers::LandDisk(Lane lane) {
  DiskIoThread* thread = lane == Lane::kDiskWrite ? writer_.get() : reader_.get();
  if (thread == nullptr) return;
  for (DiskIoThread::Finished& done : thread->TakeFinished()) {
    LandOne(TransferId{lane, done.job, 0}, std::move(done.status));
  }
}

void Transfers::LandRemote() {
  if (remote_ == nullptr) return;
  for (RemoteBlockStore::GetResult& result : remote_->TakeFinished()) {
    const std::optional<TransferId> id = RemoteGetOf(BlockHash{result.key});
    if (id.has_value()) LandOne(*id, std::move(result.status), std::move(result.bytes));
  }
}

void Transfers::Land(Lanes lanes) {
  if (lanes & LaneBit(Lane::kCopy)) LandCopies();
  if (lanes & LaneBit(Lane::kDiskWrite)) LandDisk(Lane::kDiskWrite);
  if (lanes & LaneBit(Lane::kDiskRead)) LandDisk(Lane::kDiskRead);
  if (lanes & LaneBit(Lane::kRemoteGet)) LandRemote();
  if ((lanes & LaneBit(Lane::kRemotePut)) && remote_ != nullptr && remote_->staged_puts() == 0) {
    std::vector<TransferId> batches;
    ForEach<RemotePutBatch>([&](TransferId id, const RemotePutBatch&) { batches.push_back(id); });
    for (const TransferId& id : batches) LandOne(id, absl::OkStatus());
  }
}

void Transfers::Await(std::optional<TransferId> id) {
  if (!id.has_value()) return;
  if (id->lane == Lane::kCopy) {
    // The wait first, then what else has finished (in batch order either way).
    if (!copy_batches_.empty() && copy_batches_.front().id <= id->seq) {
      // The newest batch up to it (batches complete in order).
      int64_t ticket = copy_batches_.front().ticket;
      for (const CopyBatchTicket& b : copy_batches_) {
        if (b.id > id->seq) break;
        ticket = b.ticket;
      }
      const auto start = std::chrono::steady_clock::now();
      const absl::Status waited = backend_->WaitForCopies(ticket);
      const double seconds = SecondsSince(start);
      counters_->copy_seconds += seconds;
      counters_->copy_stall_seconds += seconds;
      LandCopiesUpTo(id->seq, waited);
    }
    LandCopies();
    return;
  }
  if (id->lane != Lane::kDiskWrite && id->lane != Lane::kDiskRead) return;
  const Lanes lane = LaneBit(id->lane);
  Land(lane);
  // Still in flight after landing what is done: only then does the host wait (and count it).
  if (!InFlight(*id)) return;
  const auto start = std::chrono::steady_clock::now();
  (id->lane == Lane::kDiskRead ? reader_ : writer_)->Wait(id->seq);
  const double seconds = SecondsSince(start);
  if (id->lane == Lane::kDiskRead) {
    counters_->disk.read_ahead_wait_seconds += seconds;
    ++counters_->disk.read_ahead_waits;
  } else {
    counters_->disk.write_wait_seconds += seconds;
    ++counters_->disk.write_waits;
  }
  Land(lane);
}

absl::Status Transfers::AwaitResult(TransferId id) {
  if (InFlight(id)) {
    (id.lane == Lane::kDiskRead ? reader_ : writer_)->Wait(id.seq);
    Land(LaneBit(id.lane));
  }
  auto it = awaited_.find(id);
  if (it == awaited_.end() || !it->second.has_value()) return absl::InternalError("kv cache: transfer not reported");
  absl::Status result = std::move(*it->second);
  awaited_.erase(it);
  return result;
}

bool Transfers::AwaitRemoteGet(std::chrono::steady_clock::time_point deadline) {
  if (remote_ == nullptr) return false;
  const int64_t before = num_in_flight(Lane::kRemoteGet);
  remote_->WaitForGets(deadline);
  Land(LaneBit(Lane::kRemoteGet));
  return num_in_flight(Lane::kRemoteGet) < before;
}

std::optional<TransferId> Transfers::last(Lane lane) const {
  switch (lane) {
    case Lane::kCopy:
      if (copy_batches_.empty()) return std::nullopt;
      return CopyBatch(copy_batches_.back().id);
    case Lane::kDiskWrite:
      if (writer_ == nullptr || writer_->last_submitted() == 0) return std::nullopt;
      return TransferId{lane, writer_->last_submitted(), 0};
    case Lane::kDiskRead:
      if (reader_ == nullptr || reader_->last_submitted() == 0) return std::nullopt;
      return TransferId{lane, reader_->last_submitted(), 0};
    case Lane::kRemoteGet:
    case Lane::kRemotePut:
      break;
  }
  return std::nullopt;
}

absl::Status Transfers::VerifyIntegrity() const {
  int64_t in_flight[kNumLanes] = {};
  size_t indexed = 0;
  for (const auto& entry : registry_) {
    // Not a structured binding: clang 14 cannot capture one in the lambda below.
    const TransferId id = entry.first;
    const Transfer& transfer = entry.second;
    ++in_flight[static_cast<int>(id.lane)];
    auto indexed_as = [&](const auto& map, const auto& key) -> absl::Status {
      auto it = map.find(key);
      if (it == map.end() || !(it->second == id)) {
        return absl::InternalError(absl::StrCat("transfer ", static_cast<int>(id.lane), ":", id.seq, " (kind ",
                                                transfer.index(), ") is missing from its index"));
      }
      ++indexed;
      return absl::OkStatus();
    };
    absl::Status s;
    if (const auto* t = std::get_if<WriteBackJob>(&transfer)) s = indexed_as(write_back_by_host_slot_, t->host_slot);
    if (const auto* t = std::get_if<SwapWriteJob>(&transfer)) s = indexed_as(swap_write_by_slot_, t->disk_slot);
    if (const auto* t = std::get_if<DemoteWriteJob>(&transfer)) s = indexed_as(demote_write_by_hash_, t->hash);
    if (const auto* t = std::get_if<PersistWriteJob>(&transfer)) s = indexed_as(persist_write_by_hash_, t->hash);
    if (const auto* t = std::get_if<PrefixReadJob>(&transfer)) {
      s = indexed_as(read_by_slot_, t->disk_slot);
      if (s.ok()) s = indexed_as(prefix_read_by_hash_, t->hash);
    }
    if (const auto* t = std::get_if<SwapReadJob>(&transfer)) s = indexed_as(read_by_slot_, t->disk_slot);
    if (const auto* t = std::get_if<RemoteGet>(&transfer)) s = indexed_as(remote_get_by_hash_, t->hash);
    if (!s.ok()) return s;
    if (id.lane == Lane::kCopy && std::none_of(copy_batches_.begin(), copy_batches_.end(),
                                               [&](const CopyBatchTicket& b) { return b.id == id.seq; })) {
      return absl::InternalError(absl::StrCat("copy of batch ", id.seq, " is registered but its batch is not"));
    }
  }
  const size_t index_entries = write_back_by_host_slot_.size() + swap_write_by_slot_.size() +
                               demote_write_by_hash_.size() + persist_write_by_hash_.size() + read_by_slot_.size() +
                               prefix_read_by_hash_.size() + remote_get_by_hash_.size();
  if (indexed != index_entries) {
    return absl::InternalError(
        absl::StrCat("transfer indexes hold ", index_entries, " entries for ", indexed, " indexed transfers"));
  }
  for (int lane = 0; lane < kNumLanes; ++lane) {
    if (in_flight[lane] != num_in_flight_[lane]) {
      return absl::InternalError(absl::StrCat("lane ", lane, " counts ", num_in_flight_[lane], " transfers in flight, ",
                                              in_flight[lane], " registered"));
    }
  }
  for (size_t i = 1; i < copy_batches_.size(); ++i) {
    if (copy_batches_[i - 1].id >= copy_batches_[i].id) return absl::InternalError("copy batches are out of order");
  }
  for (const auto& [id, result] : awaited_) {
    if (result.has_value()) {
      return absl::InternalError(absl::StrCat("the result of transfer ", id.seq, " outlived the call awaiting it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier
