// Slot header encoding (slot_header.h). Stateless; thread-safe.
#include "storage/slot_header.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "storage/coding.h"
#include "storage/crc32c.h"

namespace kvtier {
namespace {

constexpr size_t kMagicAt = 0;
constexpr size_t kVersionAt = 4;
constexpr size_t kHeaderBytesAt = 8;
constexpr size_t kTokenCountAt = 12;
constexpr size_t kFingerprintAt = 16;
constexpr size_t kBlockBytesAt = 24;
constexpr size_t kSlotAt = 32;
constexpr size_t kKeyAt = 40;
constexpr size_t kPayloadCrcAt = 72;
constexpr size_t kTokensAt = 80;
constexpr size_t kSlotCrcBytes = 4;

}  // namespace

size_t SlotHeaderBytes(int64_t block_tokens) {
  const size_t raw = kTokensAt + 4 * static_cast<size_t>(block_tokens > 0 ? block_tokens : 0) + kSlotCrcBytes;
  return (raw + 63) / 64 * 64;
}

void EncodeSlotHeader(const SlotHeader& h, size_t header_bytes, uint8_t* p) {
  std::memset(p, 0, header_bytes);
  coding::PutFixed32(p + kMagicAt, kSlotMagic);
  coding::PutFixed32(p + kVersionAt, kSlotFormatVersion);
  coding::PutFixed32(p + kHeaderBytesAt, static_cast<uint32_t>(header_bytes));
  coding::PutFixed32(p + kTokenCountAt, static_cast<uint32_t>(h.tokens.size()));
  coding::PutFixed64(p + kFingerprintAt, h.model_fingerprint);
  coding::PutFixed64(p + kBlockBytesAt, h.block_bytes);
  coding::PutFixed64(p + kSlotAt, static_cast<uint64_t>(h.slot));
  std::memcpy(p + kKeyAt, h.key.bytes.data(), Sha256Digest::kBytes);
  coding::PutFixed32(p + kPayloadCrcAt, h.payload_crc);
  uint8_t* t = p + kTokensAt;
  for (int32_t token : h.tokens) {
    coding::PutFixed32(t, static_cast<uint32_t>(token));
    t += 4;
  }
  coding::PutFixed32(t, crc32c::Value(p, static_cast<size_t>(t - p)));
}

absl::StatusOr<SlotHeader> DecodeSlotHeader(const uint8_t* p, size_t header_bytes) {
  if (coding::GetFixed32(p + kMagicAt) != kSlotMagic) {
    return absl::DataLossError("bad magic (empty, foreign or overwritten slot)");
  }
  const uint32_t version = coding::GetFixed32(p + kVersionAt);
  if (version < kSlotFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("slot format version ", version, " is older than ",
                                                      kSlotFormatVersion, ": ignored"));
  }
  if (version != kSlotFormatVersion) return absl::DataLossError(absl::StrCat("unknown format version ", version));
  if (coding::GetFixed32(p + kHeaderBytesAt) != header_bytes) {
    return absl::DataLossError(absl::StrCat("header of ", coding::GetFixed32(p + kHeaderBytesAt), " bytes, not ",
                                            header_bytes));
  }
  const uint32_t token_count = coding::GetFixed32(p + kTokenCountAt);
  if (token_count > (header_bytes - kTokensAt - kSlotCrcBytes) / 4) {
    return absl::DataLossError(absl::StrCat("token count ", token_count, " does not fit the header"));
  }
  const size_t crc_at = kTokensAt + 4 * static_cast<size_t>(token_count);
  if (coding::GetFixed32(p + crc_at) != crc32c::Value(p, crc_at)) {
    return absl::DataLossError("header checksum mismatch");
  }
  SlotHeader h;
  h.model_fingerprint = coding::GetFixed64(p + kFingerprintAt);
  h.block_bytes = coding::GetFixed64(p + kBlockBytesAt);
  h.slot = static_cast<int64_t>(coding::GetFixed64(p + kSlotAt));
  std::memcpy(h.key.bytes.data(), p + kKeyAt, Sha256Digest::kBytes);
  h.payload_crc = coding::GetFixed32(p + kPayloadCrcAt);
  h.tokens.resize(token_count);
  for (uint32_t i = 0; i < token_count; ++i) {
    h.tokens[i] = static_cast<int32_t>(coding::GetFixed32(p + kTokensAt + 4 * static_cast<size_t>(i)));
  }
  return h;
}

}  // namespace kvtier
