// The disk store's index snapshot: which slot holds which block, with the geometry and model
// it was written for (so that a different model or geometry never uses the blocks) and the
// generation of the journal that continues it (disk_journal.h). Pure encoding; stateless and
// thread-safe.
#ifndef KVTIER_STORAGE_DISK_INDEX_H_
#define KVTIER_STORAGE_DISK_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sha256.h"

namespace kvtier {

// One disk slot's content as recorded in the index: the key of the block it holds.
struct DiskIndexEntry {
  int64_t slot = 0;
  Sha256Digest key;

  friend bool operator==(const DiskIndexEntry&, const DiskIndexEntry&) = default;
};

// What an index was written for. Two stores may share blocks only when all of it is equal.
struct DiskGeometry {
  int64_t num_slots = 0;
  uint64_t block_bytes = 0;
  int64_t block_tokens = 0;
  uint64_t model_fingerprint = 0;

  friend bool operator==(const DiskGeometry&, const DiskGeometry&) = default;
};

struct DiskIndexSnapshot {
  uint64_t journal_generation = 0;  // the journal whose records follow this snapshot
  std::vector<DiskIndexEntry> entries;  // oldest written first
};

// 1: 64-bit block hashes (recognised, never used). 2: SHA-256 block keys and a journal.
inline constexpr uint32_t kDiskIndexVersion = 2;

// Layout (little-endian): magic "KVTI", version u32, num_slots i64, block_bytes u64,
// block_tokens i64, model_fingerprint u64, journal generation u64, num_entries u64,
// entries {slot i64, key [32]} x num_entries, CRC32C u32 of everything before it.
std::string EncodeDiskIndex(const DiskGeometry& geometry, const DiskIndexSnapshot& snapshot);

// DataLoss naming the problem when `contents` is not a well-formed index (truncated, bad
// magic/CRC, unknown version, entries out of range or duplicated); FailedPrecondition when
// it is well-formed but for another geometry or model, or of an older format version.
absl::StatusOr<DiskIndexSnapshot> DecodeDiskIndex(const std::string& contents, const DiskGeometry& expected);

// InvalidArgument unless every entry's slot is in [0, num_slots) and no slot repeats.
absl::Status ValidateDiskIndexEntries(const DiskGeometry& geometry, const std::vector<DiskIndexEntry>& entries);

}  // namespace kvtier

#endif  // KVTIER_STORAGE_DISK_INDEX_H_
