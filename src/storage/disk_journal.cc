// DiskJournal and its record encoding (disk_journal.h).
#include "storage/disk_journal.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/coding.h"
#include "storage/crc32c.h"

namespace kvtier {
namespace {

constexpr uint32_t kJournalMagic = 0x4A54564Bu;  // "KVTJ" in file order
constexpr uint32_t kJournalVersion = 1;
constexpr size_t kJournalHeaderBytes = 24;
constexpr size_t kRecordBytes = 8 + Sha256Digest::kBytes + 4;

uint32_t RecordCrc(uint64_t generation, const uint8_t* record) {
  uint8_t g[8];
  coding::PutFixed64(g, generation);
  return crc32c::Extend(crc32c::Value(g, sizeof g), record, kRecordBytes - 4);
}

std::string EncodeHeader(uint64_t generation) {
  std::string out(kJournalHeaderBytes, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  coding::PutFixed32(p, kJournalMagic);
  coding::PutFixed32(p + 4, kJournalVersion);
  coding::PutFixed64(p + 8, generation);
  coding::PutFixed32(p + 16, crc32c::Value(p, 16));
  return out;
}

}  // namespace

absl::StatusOr<JournalReplay> DecodeJournal(const std::string& contents, uint64_t generation, int64_t num_slots) {
  const auto* p = reinterpret_cast<const uint8_t*>(contents.data());
  if (contents.size() < kJournalHeaderBytes || coding::GetFixed32(p) != kJournalMagic ||
      coding::GetFixed32(p + 16) != crc32c::Value(p, 16)) {
    return absl::DataLossError("journal: missing or corrupt header");
  }
  if (coding::GetFixed32(p + 4) != kJournalVersion) {
    return absl::DataLossError(absl::StrCat("journal: unknown format version ", coding::GetFixed32(p + 4)));
  }
  if (coding::GetFixed64(p + 8) != generation) {
    return absl::FailedPreconditionError(absl::StrCat("journal generation ", coding::GetFixed64(p + 8),
                                                      " does not follow the index (generation ", generation, ")"));
  }
  JournalReplay replay;
  size_t at = kJournalHeaderBytes;
  for (; at + kRecordBytes <= contents.size(); at += kRecordBytes) {
    const uint8_t* r = p + at;
    if (coding::GetFixed32(r + kRecordBytes - 4) != RecordCrc(generation, r)) break;
    DiskIndexEntry entry;
    entry.slot = static_cast<int64_t>(coding::GetFixed64(r));
    if (entry.slot < 0 || entry.slot >= num_slots) break;
    std::memcpy(entry.key.bytes.data(), r + 8, Sha256Digest::kBytes);
    replay.records.push_back(entry);
  }
  replay.ignored_bytes = static_cast<int64_t>(contents.size() - at);
  return replay;
}

absl::StatusOr<std::unique_ptr<DiskJournal>> DiskJournal::Open(FileIo* io, const std::string& path,
                                                               uint64_t generation) {
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, io->OpenForReadWrite(path, 0));
  std::unique_ptr<DiskJournal> journal(new DiskJournal(std::move(file)));
  RETURN_IF_ERROR(journal->Restart(generation));
  return journal;
}

absl::Status DiskJournal::Restart(uint64_t generation) {
  const std::string header = EncodeHeader(generation);
  RETURN_IF_ERROR(file_->Pwrite(0, header.data(), header.size()));
  RETURN_IF_ERROR(file_->Sync());
  generation_ = generation;
  end_ = static_cast<int64_t>(kJournalHeaderBytes);
  num_records_ = 0;
  return absl::OkStatus();
}

absl::Status DiskJournal::Append(std::span<const DiskIndexEntry> records) {
  if (records.empty()) return absl::OkStatus();
  std::string bytes(records.size() * kRecordBytes, '\0');
  auto* r = reinterpret_cast<uint8_t*>(bytes.data());
  for (const DiskIndexEntry& entry : records) {
    coding::PutFixed64(r, static_cast<uint64_t>(entry.slot));
    std::memcpy(r + 8, entry.key.bytes.data(), Sha256Digest::kBytes);
    coding::PutFixed32(r + kRecordBytes - 4, RecordCrc(generation_, r));
    r += kRecordBytes;
  }
  RETURN_IF_ERROR(file_->Pwrite(end_, bytes.data(), bytes.size()));
  RETURN_IF_ERROR(file_->Sync());
  end_ += static_cast<int64_t>(bytes.size());
  num_records_ += static_cast<int64_t>(records.size());
  return absl::OkStatus();
}

}  // namespace kvtier
