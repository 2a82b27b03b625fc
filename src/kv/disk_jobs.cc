// Implementation of DiskJobs (disk_jobs.h).
#include "kv/disk_jobs.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kvtier {

DiskJobs::DiskJobs(DiskBlockStore* store)
    : writer_(std::make_unique<DiskIoThread>(store, 1)),
      reader_(std::make_unique<DiskIoThread>(store, kReaderThreads)) {}

DiskJobs::~DiskJobs() {
  reader_.reset();
  writer_.reset();
}

DiskJobId DiskJobs::Register(bool read, int64_t seq, DiskJob job) {
  const DiskJobId id{read, seq};
  Index(id, job, /*add=*/true);
  if (std::holds_alternative<EvictionWriteJob>(job) || std::holds_alternative<StagedReadJob>(job)) {
    awaited_[id] = std::nullopt;
  }
  jobs_.emplace(id, std::move(job));
  ++num_in_flight_[read ? 1 : 0];
  return id;
}

void DiskJobs::Index(DiskJobId id, const DiskJob& job, bool add) {
  auto set = [&](auto& map, const auto& key) {
    if (add) {
      map[key] = id;
    } else if (auto it = map.find(key); it != map.end() && it->second == id) {
      map.erase(it);
    }
  };
  if (const auto* j = std::get_if<WriteBackJob>(&job)) set(write_back_by_host_slot_, j->host_slot);
  if (const auto* j = std::get_if<SwapWriteJob>(&job)) set(swap_write_by_slot_, j->disk_slot);
  if (const auto* j = std::get_if<DemoteWriteJob>(&job)) set(demote_write_by_hash_, j->hash);
  if (const auto* j = std::get_if<PersistWriteJob>(&job)) set(persist_write_by_hash_, j->hash);
  if (const auto* j = std::get_if<PrefixReadJob>(&job)) {
    set(read_by_slot_, j->disk_slot);
    set(prefix_read_by_hash_, j->hash);
  }
  if (const auto* j = std::get_if<SwapReadJob>(&job)) set(read_by_slot_, j->disk_slot);
}

DiskJobId DiskJobs::SubmitWrite(DiskJob job, int32_t disk_slot, const Sha256Digest& key,
                                std::span<const int32_t> tokens, const void* data) {
  const auto content = std::holds_alternative<SwapWriteJob>(job)     ? DiskBlockStore::Content::kPrivate
                       : std::holds_alternative<RenewRecordJob>(job) ? DiskBlockStore::Content::kRecordOnly
                                                                     : DiskBlockStore::Content::kCached;
  return Register(false, writer_->SubmitWrite(disk_slot, key, tokens, data, content), std::move(job));
}

DiskJobId DiskJobs::SubmitRead(DiskJob job, int32_t disk_slot, const Sha256Digest& key,
                               std::span<const int32_t> tokens, void* dest) {
  return Register(true, reader_->SubmitRead(disk_slot, key, tokens, dest), std::move(job));
}

DiskJobId DiskJobs::SubmitProbe(int32_t disk_slot) {
  return Register(true, reader_->SubmitProbe(disk_slot), SpeedProbeJob{});
}

std::vector<DiskJobs::Landed> DiskJobs::TakeFinished(DiskThreads which) {
  std::vector<Landed> landed;
  for (bool read : {false, true}) {
    if (which == (read ? DiskThreads::kWriter : DiskThreads::kReader)) continue;
    for (DiskIoThread::Finished& done : (read ? reader_ : writer_)->TakeFinished()) {
      const DiskJobId id{read, done.job};
      auto it = jobs_.find(id);
      if (it == jobs_.end()) continue;
      Index(id, it->second, /*add=*/false);
      if (auto awaited = awaited_.find(id); awaited != awaited_.end()) awaited->second = done.status;
      landed.push_back({id, std::move(it->second), std::move(done.status)});
      jobs_.erase(it);
      --num_in_flight_[read ? 1 : 0];
    }
  }
  return landed;
}

void DiskJobs::Wait(DiskJobId id) { (id.read ? reader_ : writer_)->Wait(id.seq); }

std::optional<absl::Status> DiskJobs::TakeResult(DiskJobId id) {
  auto it = awaited_.find(id);
  if (it == awaited_.end() || !it->second.has_value()) return std::nullopt;
  std::optional<absl::Status> result = std::move(it->second);
  awaited_.erase(it);
  return result;
}

std::optional<DiskJobId> DiskJobs::last_write() const {
  if (writer_->last_submitted() == 0) return std::nullopt;
  return DiskJobId{false, writer_->last_submitted()};
}

std::optional<DiskJobId> DiskJobs::last_read() const {
  if (reader_->last_submitted() == 0) return std::nullopt;
  return DiskJobId{true, reader_->last_submitted()};
}

absl::Status DiskJobs::VerifyIntegrity() const {
  int64_t in_flight[2] = {0, 0};
  size_t indexed = 0;
  for (const auto& entry : jobs_) {
    // Not a structured binding: clang 14 cannot capture one in the lambda below.
    const DiskJobId id = entry.first;
    const DiskJob& job = entry.second;
    ++in_flight[id.read ? 1 : 0];
    auto indexed_as = [&](const auto& map, const auto& key) -> absl::Status {
      auto it = map.find(key);
      if (it == map.end() || !(it->second == id)) {
        return absl::InternalError(absl::StrCat("disk job ", id.read ? "read " : "write ", id.seq, " (kind ",
                                                job.index(), ") is missing from its index"));
      }
      ++indexed;
      return absl::OkStatus();
    };
    absl::Status s;
    if (const auto* j = std::get_if<WriteBackJob>(&job)) s = indexed_as(write_back_by_host_slot_, j->host_slot);
    if (const auto* j = std::get_if<SwapWriteJob>(&job)) s = indexed_as(swap_write_by_slot_, j->disk_slot);
    if (const auto* j = std::get_if<DemoteWriteJob>(&job)) s = indexed_as(demote_write_by_hash_, j->hash);
    if (const auto* j = std::get_if<PersistWriteJob>(&job)) s = indexed_as(persist_write_by_hash_, j->hash);
    if (const auto* j = std::get_if<PrefixReadJob>(&job)) {
      s = indexed_as(read_by_slot_, j->disk_slot);
      if (s.ok()) s = indexed_as(prefix_read_by_hash_, j->hash);
    }
    if (const auto* j = std::get_if<SwapReadJob>(&job)) s = indexed_as(read_by_slot_, j->disk_slot);
    if (!s.ok()) return s;
  }
  const size_t index_entries = write_back_by_host_slot_.size() + swap_write_by_slot_.size() +
                               demote_write_by_hash_.size() + persist_write_by_hash_.size() + read_by_slot_.size() +
                               prefix_read_by_hash_.size();
  if (indexed != index_entries) {
    return absl::InternalError(absl::StrCat("disk job indexes hold ", index_entries, " entries for ", indexed,
                                            " indexed jobs"));
  }
  if (in_flight[0] != num_in_flight_[0] || in_flight[1] != num_in_flight_[1]) {
    return absl::InternalError("disk job counts disagree with the registry");
  }
  for (const auto& [id, result] : awaited_) {
    if (result.has_value()) {
      return absl::InternalError(absl::StrCat("the result of disk job ", id.seq, " outlived the call awaiting it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier
