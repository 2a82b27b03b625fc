// DiskJournal: the append-only log that keeps the disk index current between snapshots.
// Each block written to the slot file appends one record (slot, key) and syncs it, so a
// crash loses no written block's index entry; the store folds the records into a new
// snapshot (disk_index.h) now and then and at open, and starts the journal over
// (compaction).
// A journal belongs to one snapshot generation (a random number each compaction draws): its
// header and every record's CRC cover the generation, so records left from an earlier
// generation past the current end — the file is rewritten in place, never truncated — fail
// their check and end the replay, as a torn record does.
// Not thread-safe: the store serialises appends.
#ifndef KVTIER_STORAGE_DISK_JOURNAL_H_
#define KVTIER_STORAGE_DISK_JOURNAL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/disk_index.h"
#include "storage/file_io.h"

namespace kvtier {

// What a journal file holds for one generation, up to its first invalid record.
struct JournalReplay {
  std::vector<DiskIndexEntry> records;  // in append order: a later record of a slot wins
  int64_t ignored_bytes = 0;            // past the last valid record (torn tail, older records)
};

// Layout (little-endian): header {magic "KVTJ", version u32, generation u64, CRC32C u32 of
// the 16 bytes before it, 4 zero bytes}, then records {slot i64, key [32], CRC32C u32 of
// (generation u64, slot, key)}.
// DataLoss when the header is missing or corrupt; FailedPrecondition when it belongs to
// another generation (its records are in the snapshot already, or are not its successors).
// Records are read up to the first one that is incomplete, fails its CRC or names a slot
// outside [0, num_slots).
absl::StatusOr<JournalReplay> DecodeJournal(const std::string& contents, uint64_t generation, int64_t num_slots);

class DiskJournal {
 public:
  // Opens (creating) `path` and starts `generation` in it: header written and synced,
  // appends from right after it.
  static absl::StatusOr<std::unique_ptr<DiskJournal>> Open(FileIo* io, const std::string& path,
                                                           uint64_t generation);

  // Appends the records and syncs them: durable when it returns OK. IoError otherwise (the
  // records may or may not be found at the next open).
  absl::Status Append(std::span<const DiskIndexEntry> records);
  // Starts `generation` over the old contents (after a snapshot that holds everything).
  absl::Status Restart(uint64_t generation);

  uint64_t generation() const { return generation_; }
  int64_t num_records() const { return num_records_; }

 private:
  explicit DiskJournal(std::unique_ptr<RandomAccessFile> file) : file_(std::move(file)) {}

  std::unique_ptr<RandomAccessFile> file_;
  uint64_t generation_ = 0;
  int64_t end_ = 0;  // where the next record goes
  int64_t num_records_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_STORAGE_DISK_JOURNAL_H_
