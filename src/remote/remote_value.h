// The value a block has in the remote tier: the disk tier's slot header (format version,
// model fingerprint, block size, the block's key, its tokens, the payload's CRC32C, the
// header's own CRC32C; slot_header.h) followed by the block's bytes. So a value written by
// another model, format or layout (a foreign value), one truncated or altered in Redis (a
// corrupt one), or one whose tokens differ from the request's is detected, never used.
// Pure encoding; thread-safe.
#ifndef KVTIER_REMOTE_REMOTE_VALUE_H_
#define KVTIER_REMOTE_REMOTE_VALUE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "common/sha256.h"

namespace kvtier {

// What every value of one context's remote tier shares.
struct RemoteValueFormat {
  uint64_t model_fingerprint = 0;
  size_t block_bytes = 0;
  int64_t block_tokens = 0;
};

// The slot number a remote value's header carries (no disk slot: never a valid one).
inline constexpr int64_t kRemoteValueSlot = -1;

// The Redis key of a block: "kvtier:block:" + the hex of its key (which covers the model,
// the KV layout and the cache namespace).
std::string RemoteKeyOf(const Sha256Digest& key);

size_t RemoteValueBytes(const RemoteValueFormat& format);
std::string EncodeRemoteValue(const RemoteValueFormat& format, const Sha256Digest& key,
                              std::span<const int32_t> tokens, const uint8_t* block);

// Checks `value` against the block asked for and copies its bytes to out (block_bytes).
// DataLoss naming the problem for a corrupt or foreign value (wrong size, bad header,
// other fingerprint or block size, another key, bad payload checksum);
// FailedPrecondition when it holds the key with other tokens.
absl::Status DecodeRemoteValue(const RemoteValueFormat& format, std::string_view value, const Sha256Digest& key,
                               std::span<const int32_t> tokens, uint8_t* out);

// The same checks on a value received in two parts, in place (no copy): its header
// (RemoteValueHeaderBytes) and its payload (block_bytes), the block's bytes when OK.
size_t RemoteValueHeaderBytes(const RemoteValueFormat& format);
absl::Status CheckRemoteValue(const RemoteValueFormat& format, std::span<const uint8_t> header,
                              std::span<const uint8_t> payload, const Sha256Digest& key,
                              std::span<const int32_t> tokens);

}  // namespace kvtier

#endif  // KVTIER_REMOTE_REMOTE_VALUE_H_
