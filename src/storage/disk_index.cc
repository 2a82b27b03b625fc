// Index file encoding and validation. Stateless; thread-safe.
#include "storage/disk_index.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "storage/coding.h"
#include "storage/crc32c.h"

namespace kvtier {
namespace {

constexpr uint32_t kIndexMagic = 0x4954564Bu;  // "KVTI" in file order
constexpr uint32_t kIndexVersion = 1;
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8 + 8 + 8 + 8;
constexpr size_t kEntryBytes = 8 + 8 + 4;
constexpr size_t kCrcBytes = 4;

absl::Status CheckEntries(const DiskGeometry& g, const std::vector<DiskIndexEntry>& entries,
                          absl::Status (*make_error)(absl::string_view)) {
  std::vector<bool> seen(static_cast<size_t>(g.num_slots > 0 ? g.num_slots : 0), false);
  for (size_t i = 0; i < entries.size(); ++i) {
    const DiskIndexEntry& e = entries[i];
    if (e.slot < 0 || e.slot >= g.num_slots) {
      return make_error(absl::StrCat("index entry ", i, ": slot ", e.slot, " outside [0, ",
                                     g.num_slots, ")"));
    }
    if (seen[static_cast<size_t>(e.slot)]) {
      return make_error(absl::StrCat("index entry ", i, ": slot ", e.slot, " listed twice"));
    }
    seen[static_cast<size_t>(e.slot)] = true;
    if (e.token_count < 0 || (g.block_tokens > 0 && e.token_count > g.block_tokens)) {
      return make_error(absl::StrCat("index entry ", i, ": token count ", e.token_count,
                                     " outside [0, ", g.block_tokens, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeDiskIndex(const DiskGeometry& g, const std::vector<DiskIndexEntry>& entries) {
  std::string out(kHeaderBytes + entries.size() * kEntryBytes + kCrcBytes, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  coding::PutFixed32(p, kIndexMagic);
  coding::PutFixed32(p + 4, kIndexVersion);
  coding::PutFixed64(p + 8, static_cast<uint64_t>(g.num_slots));
  coding::PutFixed64(p + 16, g.block_bytes);
  coding::PutFixed64(p + 24, static_cast<uint64_t>(g.block_tokens));
  coding::PutFixed64(p + 32, g.model_fingerprint);
  coding::PutFixed64(p + 40, entries.size());
  uint8_t* e = p + kHeaderBytes;
  for (const DiskIndexEntry& entry : entries) {
    coding::PutFixed64(e, static_cast<uint64_t>(entry.slot));
    coding::PutFixed64(e + 8, entry.block_hash);
    coding::PutFixed32(e + 16, static_cast<uint32_t>(entry.token_count));
    e += kEntryBytes;
  }
  coding::PutFixed32(e, crc32c::Value(p, static_cast<size_t>(e - p)));
  return out;
}

absl::StatusOr<std::vector<DiskIndexEntry>> DecodeDiskIndex(const std::string& contents,
                                                            const DiskGeometry& expected) {
  const auto* p = reinterpret_cast<const uint8_t*>(contents.data());
  const size_t size = contents.size();
  if (size < kHeaderBytes + kCrcBytes) {
    return absl::DataLossError(absl::StrCat("index truncated: ", size, " bytes"));
  }
  if (coding::GetFixed32(p) != kIndexMagic) return absl::DataLossError("index: bad magic");
  const uint64_t num_entries = coding::GetFixed64(p + 40);
  if (num_entries > (size - kHeaderBytes - kCrcBytes) / kEntryBytes ||
      size != kHeaderBytes + num_entries * kEntryBytes + kCrcBytes) {
    return absl::DataLossError(absl::StrCat("index: ", num_entries, " entries do not fit ",
                                            size, " bytes (truncated?)"));
  }
  const uint32_t stored_crc = coding::GetFixed32(p + size - kCrcBytes);
  const uint32_t actual_crc = crc32c::Value(p, size - kCrcBytes);
  if (stored_crc != actual_crc) return absl::DataLossError("index: checksum mismatch");
  const uint32_t version = coding::GetFixed32(p + 4);
  if (version != kIndexVersion) {
    return absl::DataLossError(absl::StrCat("index: unknown format version ", version));
  }
  DiskGeometry found;
  found.num_slots = static_cast<int64_t>(coding::GetFixed64(p + 8));
  found.block_bytes = coding::GetFixed64(p + 16);
  found.block_tokens = static_cast<int64_t>(coding::GetFixed64(p + 24));
  found.model_fingerprint = coding::GetFixed64(p + 32);
  if (found.model_fingerprint != expected.model_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat("index is for model fingerprint ", found.model_fingerprint, ", not ",
                     expected.model_fingerprint));
  }
  if (found != expected) {
    return absl::FailedPreconditionError(absl::StrCat(
        "index geometry (", found.num_slots, " slots of ", found.block_bytes, " bytes, ",
        found.block_tokens, " tokens) differs from the store's (", expected.num_slots,
        " slots of ", expected.block_bytes, " bytes, ", expected.block_tokens, " tokens)"));
  }
  std::vector<DiskIndexEntry> entries(static_cast<size_t>(num_entries));
  const uint8_t* e = p + kHeaderBytes;
  for (DiskIndexEntry& entry : entries) {
    entry.slot = static_cast<int64_t>(coding::GetFixed64(e));
    entry.block_hash = coding::GetFixed64(e + 8);
    entry.token_count = static_cast<int32_t>(coding::GetFixed32(e + 16));
    e += kEntryBytes;
  }
  if (absl::Status s = CheckEntries(expected, entries, &absl::DataLossError); !s.ok()) return s;
  return entries;
}

absl::Status ValidateDiskIndexEntries(const DiskGeometry& geometry,
                                      const std::vector<DiskIndexEntry>& entries) {
  return CheckEntries(geometry, entries, &absl::InvalidArgumentError);
}

}  // namespace kvtier
