// Index snapshot encoding and validation. Stateless; thread-safe.
#include "storage/disk_index.h"

#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "storage/coding.h"
#include "storage/crc32c.h"

namespace kvtier {
namespace {

constexpr uint32_t kIndexMagic = 0x4954564Bu;  // "KVTI" in file order
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8 + 8 + 8 + 8 + 8;
constexpr size_t kEntryBytes = 8 + Sha256Digest::kBytes;
constexpr size_t kCrcBytes = 4;

absl::Status CheckEntries(const DiskGeometry& g, const std::vector<DiskIndexEntry>& entries,
                          absl::Status (*make_error)(absl::string_view)) {
  std::vector<bool> seen(static_cast<size_t>(g.num_slots > 0 ? g.num_slots : 0), false);
  for (size_t i = 0; i < entries.size(); ++i) {
    const DiskIndexEntry& e = entries[i];
    if (e.slot < 0 || e.slot >= g.num_slots) {
      return make_error(absl::StrCat("index entry ", i, ": slot ", e.slot, " outside [0, ", g.num_slots, ")"));
    }
    if (seen[static_cast<size_t>(e.slot)]) {
      return make_error(absl::StrCat("index entry ", i, ": slot ", e.slot, " listed twice"));
    }
    seen[static_cast<size_t>(e.slot)] = true;
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeDiskIndex(const DiskGeometry& g, const DiskIndexSnapshot& snapshot) {
  std::string out(kHeaderBytes + snapshot.entries.size() * kEntryBytes + kCrcBytes, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  coding::PutFixed32(p, kIndexMagic);
  coding::PutFixed32(p + 4, kDiskIndexVersion);
  coding::PutFixed64(p + 8, static_cast<uint64_t>(g.num_slots));
  coding::PutFixed64(p + 16, g.block_bytes);
  coding::PutFixed64(p + 24, static_cast<uint64_t>(g.block_tokens));
  coding::PutFixed64(p + 32, g.model_fingerprint);
  coding::PutFixed64(p + 40, snapshot.journal_generation);
  coding::PutFixed64(p + 48, snapshot.entries.size());
  uint8_t* e = p + kHeaderBytes;
  for (const DiskIndexEntry& entry : snapshot.entries) {
    coding::PutFixed64(e, static_cast<uint64_t>(entry.slot));
    std::memcpy(e + 8, entry.key.bytes.data(), Sha256Digest::kBytes);
    e += kEntryBytes;
  }
  coding::PutFixed32(e, crc32c::Value(p, static_cast<size_t>(e - p)));
  return out;
}

absl::StatusOr<DiskIndexSnapshot> DecodeDiskIndex(const std::string& contents, const DiskGeometry& expected) {
  const auto* p = reinterpret_cast<const uint8_t*>(contents.data());
  const size_t size = contents.size();
  if (size < 8) return absl::DataLossError(absl::StrCat("index truncated: ", size, " bytes"));
  if (coding::GetFixed32(p) != kIndexMagic) return absl::DataLossError("index: bad magic");
  // The version first: an older index has another layout (checked no further).
  const uint32_t version = coding::GetFixed32(p + 4);
  if (version < kDiskIndexVersion) {
    return absl::FailedPreconditionError(absl::StrCat("index format version ", version, " is older than ",
                                                      kDiskIndexVersion, ": its blocks are ignored"));
  }
  if (version != kDiskIndexVersion) return absl::DataLossError(absl::StrCat("index: unknown format version ", version));
  if (size < kHeaderBytes + kCrcBytes) return absl::DataLossError(absl::StrCat("index truncated: ", size, " bytes"));
  const uint64_t num_entries = coding::GetFixed64(p + 48);
  if (num_entries > (size - kHeaderBytes - kCrcBytes) / kEntryBytes ||
      size != kHeaderBytes + num_entries * kEntryBytes + kCrcBytes) {
    return absl::DataLossError(
        absl::StrCat("index: ", num_entries, " entries do not fit ", size, " bytes (truncated?)"));
  }
  if (coding::GetFixed32(p + size - kCrcBytes) != crc32c::Value(p, size - kCrcBytes)) {
    return absl::DataLossError("index: checksum mismatch");
  }
  DiskGeometry found;
  found.num_slots = static_cast<int64_t>(coding::GetFixed64(p + 8));
  found.block_bytes = coding::GetFixed64(p + 16);
  found.block_tokens = static_cast<int64_t>(coding::GetFixed64(p + 24));
  found.model_fingerprint = coding::GetFixed64(p + 32);
  if (found.model_fingerprint != expected.model_fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat("index is for model fingerprint ", found.model_fingerprint,
                                                      ", not ", expected.model_fingerprint));
  }
  if (found != expected) {
    return absl::FailedPreconditionError(absl::StrCat(
        "index geometry (", found.num_slots, " slots of ", found.block_bytes, " bytes, ", found.block_tokens,
        " tokens) differs from the store's (", expected.num_slots, " slots of ", expected.block_bytes, " bytes, ",
        expected.block_tokens, " tokens)"));
  }
  DiskIndexSnapshot snapshot;
  snapshot.journal_generation = coding::GetFixed64(p + 40);
  snapshot.entries.resize(static_cast<size_t>(num_entries));
  const uint8_t* e = p + kHeaderBytes;
  for (DiskIndexEntry& entry : snapshot.entries) {
    entry.slot = static_cast<int64_t>(coding::GetFixed64(e));
    std::memcpy(entry.key.bytes.data(), e + 8, Sha256Digest::kBytes);
    e += kEntryBytes;
  }
  if (absl::Status s = CheckEntries(expected, snapshot.entries, &absl::DataLossError); !s.ok()) return s;
  return snapshot;
}

absl::Status ValidateDiskIndexEntries(const DiskGeometry& geometry, const std::vector<DiskIndexEntry>& entries) {
  return CheckEntries(geometry, entries, &absl::InvalidArgumentError);
}

}  // namespace kvtier
