// The disk store's index file: which slot holds which block, with the geometry and model it
// was written for, so that a restart finds its blocks again and a different model or geometry
// never uses them. Pure encoding; stateless and thread-safe.
#ifndef KVTIER_STORAGE_DISK_INDEX_H_
#define KVTIER_STORAGE_DISK_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier {

// One disk slot's content as recorded in the index.
struct DiskIndexEntry {
  int64_t slot = 0;
  uint64_t block_hash = 0;
  int32_t token_count = 0;

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

// Layout (little-endian): magic "KVTI", version u32, num_slots i64, block_bytes u64,
// block_tokens i64, model_fingerprint u64, num_entries u64, entries {slot i64, hash u64,
// token_count i32} x num_entries, CRC32C u32 of everything before it.
std::string EncodeDiskIndex(const DiskGeometry& geometry,
                            const std::vector<DiskIndexEntry>& entries);

// DataLoss naming the problem when `contents` is not a well-formed index (truncated, bad
// magic/version/CRC, entries out of range or duplicated); FailedPrecondition when it is
// well-formed but for another geometry or model.
absl::StatusOr<std::vector<DiskIndexEntry>> DecodeDiskIndex(const std::string& contents,
                                                            const DiskGeometry& expected);

// InvalidArgument unless every entry's slot is in [0, num_slots), no slot repeats, and
// 0 <= token_count <= block_tokens (when block_tokens > 0).
absl::Status ValidateDiskIndexEntries(const DiskGeometry& geometry,
                                      const std::vector<DiskIndexEntry>& entries);

}  // namespace kvtier

#endif  // KVTIER_STORAGE_DISK_INDEX_H_
