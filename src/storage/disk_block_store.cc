// DiskBlockStore: checked reads and durable writes of slots, and the index's recovery at
// Open, journal appends and compaction. Thread-safe (see the header): counters are atomics (disk_store_counters.h),
// the index and journal are under index_mu_.
#include "storage/disk_block_store.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "storage/crc32c.h"

namespace kvtier {
namespace {

// A generation no journal of this file (or of one it replaced) had: random, so that records
// of an earlier journal left past the current end never pass for current ones.
uint64_t NewGeneration(uint64_t current) {
  std::random_device device;
  uint64_t g = (static_cast<uint64_t>(device()) << 32) ^ device();
  g ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return g == current ? g + 1 : g;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiskBlockStore>> DiskBlockStore::Open(const DiskStoreOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("disk store: empty path");
  if (options.num_slots <= 0 || options.block_bytes == 0 || options.block_tokens <= 0 ||
      options.block_tokens > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk store ", options.path, ": need num_slots > 0, block_bytes > 0 and block_tokens in [1, 2^20] (got ",
        options.num_slots, " slots of ", options.block_bytes, " bytes, block_tokens ", options.block_tokens, ")"));
  }
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  const uint64_t raw = SlotHeaderBytes(options.block_tokens) + static_cast<uint64_t>(options.block_bytes);
  const uint64_t slot_bytes = (raw + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  if (options.block_bytes > kMax / 2 || slot_bytes > kMax / static_cast<uint64_t>(options.num_slots)) {
    return absl::InvalidArgumentError(absl::StrCat("disk store ", options.path, ": ", options.num_slots,
                                                   " slots of ", options.block_bytes, " bytes overflow"));
  }
  DiskGeometry geometry;
  geometry.num_slots = options.num_slots;
  geometry.block_bytes = options.block_bytes;
  geometry.block_tokens = options.block_tokens;
  geometry.model_fingerprint = options.model_fingerprint;
  FileIo* io = options.io != nullptr ? options.io : DefaultFileIo();
  const bool existed = io->Exists(options.path);
  const int64_t reserved_slots =
      std::clamp<int64_t>(options.slots_reserved_at_open.value_or(options.num_slots), 0, options.num_slots);
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                   io->OpenForReadWrite(options.path, static_cast<int64_t>(slot_bytes) * reserved_slots));
  ASSIGN_OR_RETURN(const int64_t file_size, file->Size());
  std::unique_ptr<DiskBlockStore> store(new DiskBlockStore(options.path, geometry, io, std::move(file)));
  store->direct_reads_ = options.direct_reads;
  store->counters_.set_clock(options.clock);
  store->slots_in_file_at_open_ = std::min<int64_t>(options.num_slots, file_size / static_cast<int64_t>(slot_bytes));
  store->Recover(existed);
  // A fresh snapshot of what was recovered, and a journal to continue it. Failing that the
  // store still works; what it writes is found again only after a later compaction.
  (void)store->Compact();
  return store;
}

DiskBlockStore::DiskBlockStore(std::string path, const DiskGeometry& geometry, FileIo* io,
                               std::unique_ptr<RandomAccessFile> file)
    : path_(std::move(path)),
      geometry_(geometry),
      header_bytes_(SlotHeaderBytes(geometry.block_tokens)),
      slot_bytes_(SlotBytes(static_cast<size_t>(geometry.block_bytes), geometry.block_tokens)),
      io_(io),
      file_(std::move(file)) {}

DiskBlockStore::~DiskBlockStore() = default;

void DiskBlockStore::Ignore(const std::string& what, const absl::Status& status) {
  if (IsIoError(status)) DiskStoreCounters::Add(counters_.io_errors);
  DiskStoreCounters::Add(counters_.index_ignored);
  if (!index_ignored_reason_.empty()) index_ignored_reason_ += "; ";
  absl::StrAppend(&index_ignored_reason_, what, ": ", status.message());
  Log(LogLevel::kWarn, "disk tier: ", what, ": ", status.message(), "; the cached blocks it lists are not used");
}

void DiskBlockStore::Recover(bool existed) {
  std::lock_guard<std::mutex> lock(index_mu_);
  // The snapshot. Missing or unreadable: the slot headers say what the file holds. Of
  // another model, geometry or an older format: nothing in the file is ours.
  bool scan = existed;
  const std::string index = index_path();
  absl::StatusOr<std::string> contents = io_->Exists(index) ? io_->ReadWholeFile(index) : absl::NotFoundError("");
  if (contents.ok()) {
    absl::StatusOr<DiskIndexSnapshot> snapshot = DecodeDiskIndex(*contents, geometry_);
    if (snapshot.ok()) {
      scan = false;
      generation_ = snapshot->journal_generation;
      for (const DiskIndexEntry& e : snapshot->entries) Record(e);
    } else {
      if (absl::IsFailedPrecondition(snapshot.status())) scan = false;
      Ignore(index, snapshot.status());
    }
  } else if (!absl::IsNotFound(contents.status())) {
    Ignore(index, contents.status());
  }
  // The journal of the snapshot's generation: what was written since.
  const std::string journal = journal_path();
  if (!scan && contents.ok() && counters_.index_ignored.load() == 0 && io_->Exists(journal)) {
    absl::StatusOr<std::string> records = io_->ReadWholeFile(journal);
    absl::StatusOr<JournalReplay> replay =
        records.ok() ? DecodeJournal(*records, generation_, geometry_.num_slots) : records.status();
    if (replay.ok()) {
      for (const DiskIndexEntry& e : replay->records) Record(e);
      counters_.journal_replayed = static_cast<int64_t>(replay->records.size());
    } else if (!absl::IsFailedPrecondition(replay.status())) {
      // Its records are lost (another generation is not: the snapshot holds it already).
      Ignore(journal, replay.status());
      scan = true;
    }
  }
  if (scan) {
    index_.clear();
    ScanSlots();
  }
  recovered_ = IndexInWriteOrder();
}

void DiskBlockStore::ScanSlots() {
  std::vector<uint8_t> header(header_bytes_);
  // The slots the file holds (a file still being prepared has none past its end).
  for (int64_t slot = 0; slot < slots_in_file_at_open_; ++slot) {
    if (!file_->Pread(slot * slot_bytes_, header_bytes_, header.data()).ok()) {
      DiskStoreCounters::Add(counters_.io_errors);
      continue;
    }
    ++counters_.slots_scanned;
    absl::StatusOr<SlotHeader> h = DecodeSlotHeader(header.data(), header_bytes_);
    if (absl::IsFailedPrecondition(h.status())) ++counters_.older_format_slots;
    // Cached blocks only (a swapped block has no tokens); the payload is checked on read.
    if (!h.ok() || h->model_fingerprint != geometry_.model_fingerprint || h->block_bytes != geometry_.block_bytes ||
        h->slot != slot || static_cast<int64_t>(h->tokens.size()) != geometry_.block_tokens) {
      continue;
    }
    Record({slot, h->key});  // slot order: their age is not known
  }
  if (counters_.older_format_slots > 0) {
    Ignore(path_, absl::FailedPreconditionError(absl::StrCat(counters_.older_format_slots, " slots of an older format version")));
  }
}

absl::Status DiskBlockStore::CheckSlot(int64_t slot) const {
  if (slot < 0 || slot >= geometry_.num_slots) {
    return absl::InvalidArgumentError(absl::StrCat("disk slot ", slot, " outside [0, ", geometry_.num_slots, ")"));
  }
  return absl::OkStatus();
}

absl::Status DiskBlockStore::CountIo(absl::Status status) {
  if (IsIoError(status)) DiskStoreCounters::Add(counters_.io_errors);
  return status;
}

absl::Status DiskBlockStore::PreallocateSlots(int64_t begin, int64_t end) {
  if (begin < 0 || end > geometry_.num_slots || begin > end) {
    return absl::InvalidArgumentError(absl::StrCat("disk slots [", begin, ", ", end, ") outside [0, ",
                                                   geometry_.num_slots, "]"));
  }
  return CountIo(file_->Allocate(begin * slot_bytes_, (end - begin) * slot_bytes_));
}

absl::Status DiskBlockStore::Write(int64_t slot, const Sha256Digest& key, std::span<const int32_t> tokens,
                                   const void* data, Content content) {
  const WriteRequest request{slot, key, tokens, data, content};
  return WriteBatch(std::span<const WriteRequest>(&request, 1)).front();
}

std::vector<absl::Status> DiskBlockStore::WriteBatch(std::span<const WriteRequest> requests) {
  std::vector<absl::Status> results(requests.size());
  const size_t n = block_bytes();
  for (size_t i = 0; i < requests.size(); ++i) {
    const WriteRequest& r = requests[i];
    results[i] = CheckSlot(r.slot);
    if (r.content == Content::kRecordOnly) continue;
    if (results[i].ok() && r.data == nullptr) results[i] = absl::InvalidArgumentError("disk write: null data");
    if (results[i].ok() && static_cast<int64_t>(r.tokens.size()) > geometry_.block_tokens) {
      results[i] = absl::InvalidArgumentError(absl::StrCat("disk slot ", r.slot, ": ", r.tokens.size(),
                                                           " tokens, more than a block's ", geometry_.block_tokens));
    }
  }
  {
    // The slots are about to hold something else: out of the index first, so that a
    // compaction meanwhile never records them with their old keys.
    std::lock_guard<std::mutex> lock(index_mu_);
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!results[i].ok()) continue;
      if (requests[i].content != Content::kRecordOnly) {
        index_.erase(requests[i].slot);
      } else if (auto it = index_.find(requests[i].slot); it == index_.end() || it->second.key != requests[i].key) {
        results[i] = absl::NotFoundError(absl::StrCat("disk slot ", requests[i].slot, " no longer holds the block"));
      }
    }
  }
  std::vector<uint8_t> header(header_bytes_);
  bool any = false;
  bool renew = false;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!results[i].ok()) continue;
    const WriteRequest& r = requests[i];
    if (r.content == Content::kRecordOnly) {
      renew = true;
      continue;
    }
    SlotHeader h;
    h.model_fingerprint = geometry_.model_fingerprint;
    h.block_bytes = n;
    h.slot = r.slot;
    h.key = r.key;
    h.tokens.assign(r.tokens.begin(), r.tokens.end());
    h.payload_crc = crc32c::Value(r.data, n);
    EncodeSlotHeader(h, header_bytes_, header.data());
    const int64_t offset = r.slot * slot_bytes_;
    results[i] = CountIo(file_->Pwrite(offset + static_cast<int64_t>(header_bytes_), r.data, n));
    if (results[i].ok()) results[i] = CountIo(file_->Pwrite(offset, header.data(), header_bytes_));
    any = any || results[i].ok();
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (IsIoError(results[i])) {
      Log(LogLevel::kWarn, "disk tier: write of slot ", requests[i].slot, " to ", path_,
          " failed: ", results[i].message(), "; the block is not kept on disk");
    }
  }
  if (!any && !renew) return results;
  // One sync for them all: each is durable only once it returned.
  if (any) {
    if (const absl::Status synced = CountIo(file_->Sync()); !synced.ok()) {
      Log(LogLevel::kWarn, "disk tier: syncing ", path_, " failed: ", synced.message(),
          "; the blocks just written are not kept on disk");
      for (size_t i = 0; i < requests.size(); ++i) {
        if (results[i].ok() && requests[i].content != Content::kRecordOnly) results[i] = synced;
      }
    }
  }
  std::vector<DiskIndexEntry> records;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!results[i].ok()) continue;
    if (requests[i].content != Content::kRecordOnly) {
      DiskStoreCounters::Add(counters_.writes);
      DiskStoreCounters::Add(counters_.bytes_written, static_cast<int64_t>(n));
    }
    if (requests[i].content != Content::kPrivate) records.push_back({requests[i].slot, requests[i].key});
  }
  if (records.empty()) return results;
  std::lock_guard<std::mutex> lock(index_mu_);
  for (const DiskIndexEntry& e : records) Record(e);
  if (journal_current_ && journal_ != nullptr) {
    if (CountIo(journal_->Append(records)).ok()) {
      DiskStoreCounters::Add(counters_.journal_records, static_cast<int64_t>(records.size()));
    } else {
      journal_current_ = false;  // the next compaction records them
    }
  }
  // Compaction when the journal outgrows the index (amortised: a snapshot per index-size
  // records), or at once when the journal missed records.
  const int64_t journaled = journal_ != nullptr ? journal_->num_records() : 0;
  if (!journal_current_ || journaled > 1024 + 2 * static_cast<int64_t>(index_.size())) (void)CompactLocked();
  return results;
}

// Runs the store's read clock while it lives: the clock advances while at least one Read is
// in progress, so concurrent Reads count their overlapping time once.
absl::Status DiskBlockStore::CheckHeader(int64_t slot, const Sha256Digest& key, std::span<const int32_t> tokens,
                                         const uint8_t* header, uint32_t* payload_crc) {
  auto corrupt = [&](absl::string_view what) {
    DiskStoreCounters::Add(counters_.corrupt_detected);
    absl::Status status = absl::DataLossError(absl::StrCat("slot ", slot, " of ", path_, ": ", what));
    Log(LogLevel::kWarn, "disk tier: corrupt block detected: ", status.message(),
        "; not used (a miss: the tokens are recomputed)");
    return status;
  };
  absl::StatusOr<SlotHeader> h = DecodeSlotHeader(header, header_bytes_);
  if (!h.ok()) return corrupt(h.status().message());
  if (h->model_fingerprint != geometry_.model_fingerprint) {
    return corrupt(absl::StrCat("written for model fingerprint ", h->model_fingerprint, ", not ",
                                geometry_.model_fingerprint));
  }
  if (h->block_bytes != geometry_.block_bytes) {
    return corrupt(absl::StrCat("holds a block of ", h->block_bytes, " bytes, not ", geometry_.block_bytes));
  }
  if (h->slot != slot) return corrupt(absl::StrCat("header names slot ", h->slot));
  if (h->key != key) {
    DiskStoreCounters::Add(counters_.stale_detected);
    return absl::NotFoundError(absl::StrCat("slot ", slot, " of ", path_, " holds block ", h->key.Hex().substr(0, 16),
                                            ", not ", key.Hex().substr(0, 16)));
  }
  if (!std::equal(h->tokens.begin(), h->tokens.end(), tokens.begin(), tokens.end())) {
    DiskStoreCounters::Add(counters_.token_mismatches);
    Log(LogLevel::kWarn, "disk tier: slot ", slot, " of ", path_, " holds the block's key with other tokens; refused");
    return absl::FailedPreconditionError(absl::StrCat("slot ", slot, " of ", path_, " holds block ",
                                                      key.Hex().substr(0, 16), " with other tokens: refused"));
  }
  *payload_crc = h->payload_crc;
  return absl::OkStatus();
}

absl::Status DiskBlockStore::PayloadCorrupt(int64_t slot) {
  DiskStoreCounters::Add(counters_.corrupt_detected);
  absl::Status status = absl::DataLossError(absl::StrCat("slot ", slot, " of ", path_, ": payload checksum mismatch"));
  Log(LogLevel::kWarn, "disk tier: corrupt block detected: ", status.message(),
      "; not used (a miss: the tokens are recomputed)");
  return status;
}

absl::StatusOr<uint8_t*> DiskBlockStore::ThreadSlotBuffer() const {
  // One per reader thread, kept for the thread's life: slots of 2 MiB blocks would
  // otherwise cost an allocation (and its page faults) per read.
  static thread_local std::unique_ptr<uint8_t, decltype(&std::free)> buffer(nullptr, &std::free);
  static thread_local size_t buffer_bytes = 0;
  const size_t bytes = static_cast<size_t>(slot_bytes_);
  if (buffer_bytes < bytes) {
    buffer.reset(static_cast<uint8_t*>(std::aligned_alloc(RandomAccessFile::kDirectReadAlignment, bytes)));
    buffer_bytes = buffer != nullptr ? bytes : 0;
    if (buffer == nullptr) return absl::ResourceExhaustedError(absl::StrCat("disk read: no buffer of ", bytes, " bytes"));
  }
  return buffer.get();
}

absl::Status DiskBlockStore::ReadFile(int64_t offset, size_t n, void* out, bool direct) {
  const Clock::TimePoint start = counters_.Now();
  absl::Status status = CountIo(direct ? file_->PreadDirect(offset, n, out) : file_->Pread(offset, n, out));
  counters_.AddFileReadTime(counters_.Now() - start);
  return status;
}

absl::Status DiskBlockStore::ProbeRead(int64_t slot) {
  RETURN_IF_ERROR(CheckSlot(slot));
  const DiskStoreCounters::ReadTiming timing(&counters_);
  ASSIGN_OR_RETURN(uint8_t* const buffer, ThreadSlotBuffer());
  const int64_t offset = slot * slot_bytes_;
  if (direct_reads_) {
    RETURN_IF_ERROR(ReadFile(offset, static_cast<size_t>(slot_bytes_), buffer, /*direct=*/true));
  } else {
    RETURN_IF_ERROR(
        ReadFile(offset + static_cast<int64_t>(header_bytes_), geometry_.block_bytes, buffer, /*direct=*/false));
  }
  DiskStoreCounters::Add(counters_.bytes_read, static_cast<int64_t>(geometry_.block_bytes));
  return absl::OkStatus();
}

absl::Status DiskBlockStore::Read(int64_t slot, const Sha256Digest& key, std::span<const int32_t> tokens, void* out) {
  RETURN_IF_ERROR(CheckSlot(slot));
  if (out == nullptr) return absl::InvalidArgumentError("disk read: null output");
  const DiskStoreCounters::ReadTiming timing(&counters_);
  const int64_t offset = slot * slot_bytes_;
  const size_t n = geometry_.block_bytes;
  uint32_t payload_crc = 0;
  if (direct_reads_) {
    // The whole slot in one aligned read (slots are whole multiples of the alignment), into
    // this thread's buffer: the header's checks, then the payload's CRC, while its bytes are
    // still in the CPU's cache, then the copy out.
    ASSIGN_OR_RETURN(uint8_t* const buffer, ThreadSlotBuffer());
    const size_t bytes = static_cast<size_t>(slot_bytes_);
    RETURN_IF_ERROR(ReadFile(offset, bytes, buffer, /*direct=*/true));
    RETURN_IF_ERROR(CheckHeader(slot, key, tokens, buffer, &payload_crc));
    const uint8_t* payload = buffer + header_bytes_;
    if (crc32c::Value(payload, n) != payload_crc) return PayloadCorrupt(slot);
    std::memcpy(out, payload, n);
  } else {
    std::vector<uint8_t> header(header_bytes_);
    RETURN_IF_ERROR(ReadFile(offset, header_bytes_, header.data(), /*direct=*/false));
    RETURN_IF_ERROR(CheckHeader(slot, key, tokens, header.data(), &payload_crc));
    RETURN_IF_ERROR(ReadFile(offset + static_cast<int64_t>(header_bytes_), n, out, /*direct=*/false));
    if (crc32c::Value(out, n) != payload_crc) return PayloadCorrupt(slot);
  }
  DiskStoreCounters::Add(counters_.reads);
  DiskStoreCounters::Add(counters_.bytes_read, static_cast<int64_t>(n));
  return absl::OkStatus();
}

void DiskBlockStore::Forget(int64_t slot) {
  std::lock_guard<std::mutex> lock(index_mu_);
  index_.erase(slot);
}

void DiskBlockStore::Record(const DiskIndexEntry& entry) { index_[entry.slot] = {entry.key, next_order_++}; }

std::vector<DiskIndexEntry> DiskBlockStore::IndexInWriteOrder() const {
  std::vector<std::pair<uint64_t, DiskIndexEntry>> ordered;
  ordered.reserve(index_.size());
  for (const auto& [slot, block] : index_) ordered.push_back({block.order, {slot, block.key}});
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<DiskIndexEntry> entries;
  entries.reserve(ordered.size());
  for (const auto& [order, entry] : ordered) entries.push_back(entry);
  return entries;
}

absl::Status DiskBlockStore::Compact() {
  std::lock_guard<std::mutex> lock(index_mu_);
  return CompactLocked();
}

absl::Status DiskBlockStore::CompactLocked() {
  // Snapshot first, with the next generation: until the journal is restarted, its records
  // (of the old generation) are ignored next to it, and the snapshot holds them all.
  DiskIndexSnapshot snapshot;
  snapshot.journal_generation = NewGeneration(generation_);
  snapshot.entries = IndexInWriteOrder();
  if (absl::Status saved = CountIo(io_->WriteFileAtomically(index_path(), EncodeDiskIndex(geometry_, snapshot)));
      !saved.ok()) {
    Log(LogLevel::kWarn, "disk tier: saving the index ", index_path(), " failed: ", saved.message(),
        "; the journal keeps what was written since the last save");
    return saved;
  }
  DiskStoreCounters::Add(counters_.compactions);
  generation_ = snapshot.journal_generation;
  absl::Status restarted;
  if (journal_ == nullptr) {
    absl::StatusOr<std::unique_ptr<DiskJournal>> opened = DiskJournal::Open(io_, journal_path(), generation_);
    if (opened.ok()) journal_ = std::move(*opened);
    restarted = opened.status();
  } else {
    restarted = journal_->Restart(generation_);
  }
  journal_current_ = CountIo(restarted).ok();
  return restarted;
}

DiskStoreCounts DiskBlockStore::counters() const {
  DiskStoreCounts c = counters_.Snapshot();
  c.recovered_blocks = static_cast<int64_t>(recovered_.size());
  return c;
}

}  // namespace kvtier
