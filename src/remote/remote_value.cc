// The remote tier's value format (remote_value.h). Stateless; thread-safe.
#include "remote/remote_value.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/crc32c.h"
#include "storage/slot_header.h"

namespace kvtier {

std::string RemoteKeyOf(const Sha256Digest& key) { return absl::StrCat("kvtier:block:", key.Hex()); }

size_t RemoteValueBytes(const RemoteValueFormat& format) {
  return SlotHeaderBytes(format.block_tokens) + format.block_bytes;
}

std::string EncodeRemoteValue(const RemoteValueFormat& format, const Sha256Digest& key,
                              std::span<const int32_t> tokens, const uint8_t* block) {
  const size_t header_bytes = SlotHeaderBytes(format.block_tokens);
  std::string value(header_bytes + format.block_bytes, '\0');
  SlotHeader h;
  h.model_fingerprint = format.model_fingerprint;
  h.block_bytes = format.block_bytes;
  h.slot = kRemoteValueSlot;
  h.key = key;
  h.tokens.assign(tokens.begin(), tokens.end());
  h.payload_crc = crc32c::Value(block, format.block_bytes);
  uint8_t* p = reinterpret_cast<uint8_t*>(value.data());
  EncodeSlotHeader(h, header_bytes, p);
  std::memcpy(p + header_bytes, block, format.block_bytes);
  return value;
}

size_t RemoteValueHeaderBytes(const RemoteValueFormat& format) { return SlotHeaderBytes(format.block_tokens); }

absl::Status CheckRemoteValue(const RemoteValueFormat& format, std::span<const uint8_t> header,
                              std::span<const uint8_t> payload, const Sha256Digest& key,
                              std::span<const int32_t> tokens) {
  const size_t header_bytes = SlotHeaderBytes(format.block_tokens);
  if (header.size() != header_bytes || payload.size() != format.block_bytes) {
    return absl::DataLossError(absl::StrCat("value of ", header.size() + payload.size(), " bytes, not ",
                                            header_bytes + format.block_bytes));
  }
  absl::StatusOr<SlotHeader> h = DecodeSlotHeader(header.data(), header_bytes);
  if (!h.ok()) return absl::DataLossError(h.status().message());
  if (h->model_fingerprint != format.model_fingerprint) {
    return absl::DataLossError(absl::StrCat("written for model fingerprint ", h->model_fingerprint, ", not ",
                                            format.model_fingerprint));
  }
  if (h->block_bytes != format.block_bytes) {
    return absl::DataLossError(absl::StrCat("holds a block of ", h->block_bytes, " bytes, not ", format.block_bytes));
  }
  if (h->slot != kRemoteValueSlot) return absl::DataLossError(absl::StrCat("header names disk slot ", h->slot));
  if (h->key != key) return absl::DataLossError(absl::StrCat("holds block ", h->key.Hex().substr(0, 16)));
  if (!std::equal(h->tokens.begin(), h->tokens.end(), tokens.begin(), tokens.end())) {
    return absl::FailedPreconditionError("holds the block's key with other tokens");
  }
  if (crc32c::Value(payload.data(), format.block_bytes) != h->payload_crc) {
    return absl::DataLossError("payload checksum mismatch");
  }
  return absl::OkStatus();
}

absl::Status DecodeRemoteValue(const RemoteValueFormat& format, std::string_view value, const Sha256Digest& key,
                               std::span<const int32_t> tokens, uint8_t* out) {
  const size_t header_bytes = SlotHeaderBytes(format.block_tokens);
  if (value.size() != header_bytes + format.block_bytes) {
    return absl::DataLossError(absl::StrCat("value of ", value.size(), " bytes, not ", header_bytes + format.block_bytes));
  }
  const uint8_t* p = reinterpret_cast<const uint8_t*>(value.data());
  RETURN_IF_ERROR(CheckRemoteValue(format, {p, header_bytes}, {p + header_bytes, format.block_bytes}, key, tokens));
  std::memcpy(out, p + header_bytes, format.block_bytes);
  return absl::OkStatus();
}

}  // namespace kvtier
