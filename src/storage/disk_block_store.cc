// DiskBlockStore: slot header encoding, checked reads and durable writes. Thread-safe (see
// the header): counters are atomics, SaveIndex holds index_mu_.
#include "storage/disk_block_store.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "storage/coding.h"
#include "storage/crc32c.h"

namespace kvtier {
namespace {

constexpr uint32_t kSlotMagic = 0x42545642u;  // "BVTB" in file order
constexpr uint32_t kSlotVersion = 1;

// Header field offsets (little-endian). Bytes [52, 60) are reserved zeros.
constexpr size_t kMagicAt = 0;
constexpr size_t kVersionAt = 4;
constexpr size_t kFingerprintAt = 8;
constexpr size_t kHashAt = 16;
constexpr size_t kBlockBytesAt = 24;
constexpr size_t kSlotAt = 32;
constexpr size_t kTokenCountAt = 40;
constexpr size_t kPayloadCrcAt = 44;
constexpr size_t kHeaderCrcAt = 60;
static_assert(kHeaderCrcAt + 4 == DiskBlockStore::kSlotHeaderBytes);

struct SlotHeader {
  uint64_t fingerprint = 0;
  uint64_t hash = 0;
  uint64_t block_bytes = 0;
  int64_t slot = 0;
  int32_t token_count = 0;
  uint32_t payload_crc = 0;
};

void EncodeHeader(const SlotHeader& h, uint8_t* p) {
  std::memset(p, 0, DiskBlockStore::kSlotHeaderBytes);
  coding::PutFixed32(p + kMagicAt, kSlotMagic);
  coding::PutFixed32(p + kVersionAt, kSlotVersion);
  coding::PutFixed64(p + kFingerprintAt, h.fingerprint);
  coding::PutFixed64(p + kHashAt, h.hash);
  coding::PutFixed64(p + kBlockBytesAt, h.block_bytes);
  coding::PutFixed64(p + kSlotAt, static_cast<uint64_t>(h.slot));
  coding::PutFixed32(p + kTokenCountAt, static_cast<uint32_t>(h.token_count));
  coding::PutFixed32(p + kPayloadCrcAt, h.payload_crc);
  coding::PutFixed32(p + kHeaderCrcAt, crc32c::Value(p, kHeaderCrcAt));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiskBlockStore>> DiskBlockStore::Open(
    const DiskStoreOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("disk store: empty path");
  if (options.num_slots <= 0 || options.block_bytes == 0 || options.block_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk store ", options.path, ": need num_slots > 0 and block_bytes > 0 (got ",
        options.num_slots, " slots of ", options.block_bytes, " bytes, block_tokens ",
        options.block_tokens, ")"));
  }
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  const uint64_t raw = kSlotHeaderBytes + static_cast<uint64_t>(options.block_bytes);
  const uint64_t slot_bytes = (raw + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  if (options.block_bytes > kMax / 2 ||
      slot_bytes > kMax / static_cast<uint64_t>(options.num_slots)) {
    return absl::InvalidArgumentError(absl::StrCat("disk store ", options.path, ": ",
                                                   options.num_slots, " slots of ",
                                                   options.block_bytes, " bytes overflow"));
  }
  DiskGeometry geometry;
  geometry.num_slots = options.num_slots;
  geometry.block_bytes = options.block_bytes;
  geometry.block_tokens = options.block_tokens;
  geometry.model_fingerprint = options.model_fingerprint;
  FileIo* io = options.io != nullptr ? options.io : DefaultFileIo();
  ASSIGN_OR_RETURN(
      std::unique_ptr<RandomAccessFile> file,
      io->OpenForReadWrite(options.path,
                           static_cast<int64_t>(slot_bytes) * options.num_slots));
  std::unique_ptr<DiskBlockStore> store(
      new DiskBlockStore(options.path, geometry, io, std::move(file)));
  store->LoadIndex();
  return store;
}

DiskBlockStore::DiskBlockStore(std::string path, const DiskGeometry& geometry, FileIo* io,
                               std::unique_ptr<RandomAccessFile> file)
    : path_(std::move(path)),
      geometry_(geometry),
      slot_bytes_(SlotBytes(static_cast<size_t>(geometry.block_bytes))),
      io_(io),
      file_(std::move(file)) {}

DiskBlockStore::~DiskBlockStore() = default;

void DiskBlockStore::LoadIndex() {
  const std::string index = index_path();
  if (!io_->Exists(index)) return;
  absl::StatusOr<std::string> contents = io_->ReadWholeFile(index);
  if (absl::IsNotFound(contents.status())) return;  // removed since Exists
  absl::StatusOr<std::vector<DiskIndexEntry>> entries =
      contents.ok() ? DecodeDiskIndex(*contents, geometry_) : contents.status();
  if (entries.ok()) {
    recovered_ = *std::move(entries);
    return;
  }
  if (IsIoError(entries.status())) io_errors_.fetch_add(1, std::memory_order_relaxed);
  index_ignored_.fetch_add(1, std::memory_order_relaxed);
  index_ignored_reason_ = absl::StrCat(index, ": ", entries.status().message());
  Log(LogLevel::kWarn, "disk tier: index ", index_ignored_reason_, "; the cached blocks it listed are not used");
}

absl::Status DiskBlockStore::CheckSlot(int64_t slot) const {
  if (slot < 0 || slot >= geometry_.num_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk slot ", slot, " outside [0, ", geometry_.num_slots, ")"));
  }
  return absl::OkStatus();
}

absl::Status DiskBlockStore::CountIo(absl::Status status) {
  if (IsIoError(status)) io_errors_.fetch_add(1, std::memory_order_relaxed);
  return status;
}

absl::Status DiskBlockStore::Write(int64_t slot, uint64_t block_hash, int32_t token_count,
                                   const void* data) {
  RETURN_IF_ERROR(CheckSlot(slot));
  if (data == nullptr) return absl::InvalidArgumentError("disk write: null data");
  if (token_count < 0 || (geometry_.block_tokens > 0 && token_count > geometry_.block_tokens)) {
    return absl::InvalidArgumentError(absl::StrCat("disk slot ", slot, ": token count ",
                                                   token_count, " outside [0, ",
                                                   geometry_.block_tokens, "]"));
  }
  const size_t n = block_bytes();
  SlotHeader h;
  h.fingerprint = geometry_.model_fingerprint;
  h.hash = block_hash;
  h.block_bytes = n;
  h.slot = slot;
  h.token_count = token_count;
  h.payload_crc = crc32c::Value(data, n);
  uint8_t header[kSlotHeaderBytes];
  EncodeHeader(h, header);
  const int64_t offset = slot * slot_bytes_;
  auto failed = [&](const absl::Status& status) {
    Log(LogLevel::kWarn, "disk tier: write of slot ", slot, " to ", path_, " failed: ", status.message(),
        "; the block is not kept on disk");
    return status;
  };
  absl::Status written = CountIo(file_->Pwrite(offset + static_cast<int64_t>(kSlotHeaderBytes), data, n));
  if (written.ok()) written = CountIo(file_->Pwrite(offset, header, kSlotHeaderBytes));
  if (written.ok()) written = CountIo(file_->Sync());
  if (!written.ok()) return failed(written);
  writes_.fetch_add(1, std::memory_order_relaxed);
  bytes_written_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status DiskBlockStore::Read(int64_t slot, uint64_t expected_hash, void* out) {
  RETURN_IF_ERROR(CheckSlot(slot));
  if (out == nullptr) return absl::InvalidArgumentError("disk read: null output");
  const int64_t offset = slot * slot_bytes_;
  uint8_t header[kSlotHeaderBytes];
  RETURN_IF_ERROR(CountIo(file_->Pread(offset, kSlotHeaderBytes, header)));
  auto corrupt = [&](const std::string& what) {
    corrupt_detected_.fetch_add(1, std::memory_order_relaxed);
    absl::Status status = absl::DataLossError(absl::StrCat("slot ", slot, " of ", path_, ": ", what));
    Log(LogLevel::kWarn, "disk tier: corrupt block detected: ", status.message(),
        "; not used (a miss: the tokens are recomputed)");
    return status;
  };
  if (coding::GetFixed32(header + kMagicAt) != kSlotMagic) {
    return corrupt("bad magic (empty, foreign or overwritten slot)");
  }
  if (coding::GetFixed32(header + kHeaderCrcAt) != crc32c::Value(header, kHeaderCrcAt)) {
    return corrupt("header checksum mismatch");
  }
  const uint32_t version = coding::GetFixed32(header + kVersionAt);
  if (version != kSlotVersion) return corrupt(absl::StrCat("unknown format version ", version));
  const uint64_t fingerprint = coding::GetFixed64(header + kFingerprintAt);
  if (fingerprint != geometry_.model_fingerprint) {
    return corrupt(absl::StrCat("written for model fingerprint ", fingerprint, ", not ",
                                geometry_.model_fingerprint));
  }
  const uint64_t block_bytes = coding::GetFixed64(header + kBlockBytesAt);
  if (block_bytes != geometry_.block_bytes) {
    return corrupt(absl::StrCat("holds a block of ", block_bytes, " bytes, not ",
                                geometry_.block_bytes));
  }
  const auto header_slot = static_cast<int64_t>(coding::GetFixed64(header + kSlotAt));
  if (header_slot != slot) return corrupt(absl::StrCat("header names slot ", header_slot));
  const uint64_t hash = coding::GetFixed64(header + kHashAt);
  if (hash != expected_hash) {
    return corrupt(absl::StrCat("holds block hash ", hash, ", not the expected ", expected_hash));
  }
  const size_t n = block_bytes;
  RETURN_IF_ERROR(CountIo(file_->Pread(offset + static_cast<int64_t>(kSlotHeaderBytes), n, out)));
  if (crc32c::Value(out, n) != coding::GetFixed32(header + kPayloadCrcAt)) {
    return corrupt("payload checksum mismatch");
  }
  reads_.fetch_add(1, std::memory_order_relaxed);
  bytes_read_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status DiskBlockStore::SaveIndex(const std::vector<DiskIndexEntry>& entries) {
  RETURN_IF_ERROR(ValidateDiskIndexEntries(geometry_, entries));
  const std::string contents = EncodeDiskIndex(geometry_, entries);
  absl::MutexLock lock(&index_mu_);
  absl::Status saved = CountIo(io_->WriteFileAtomically(index_path(), contents));
  if (!saved.ok()) {
    Log(LogLevel::kWarn, "disk tier: saving the index ", index_path(), " failed: ", saved.message(),
        "; it is saved again at the next step that changes it");
  }
  return saved;
}

DiskBlockStore::Counters DiskBlockStore::counters() const {
  Counters c;
  c.writes = writes_.load(std::memory_order_relaxed);
  c.reads = reads_.load(std::memory_order_relaxed);
  c.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  c.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  c.corrupt_detected = corrupt_detected_.load(std::memory_order_relaxed);
  c.io_errors = io_errors_.load(std::memory_order_relaxed);
  c.index_ignored = index_ignored_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace kvtier
