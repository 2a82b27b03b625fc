// The disk tier's slot header: what a slot of the slot file says about the block after it —
// format version, model fingerprint, block size, its own slot number, the block's key, the
// block's token ids and the payload's CRC32C — so that a slot is only ever used for the
// exact block it was written for. Pure encoding; stateless and thread-safe.
#ifndef KVTIER_STORAGE_SLOT_HEADER_H_
#define KVTIER_STORAGE_SLOT_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sha256.h"

namespace kvtier {

inline constexpr uint32_t kSlotMagic = 0x42545642u;  // "BVTB" in file order
// 1: 64-byte header with a 64-bit block hash and no tokens (recognised, never used).
// 2: SHA-256 block key and the block's tokens.
inline constexpr uint32_t kSlotFormatVersion = 2;

struct SlotHeader {
  uint64_t model_fingerprint = 0;
  uint64_t block_bytes = 0;
  int64_t slot = 0;
  Sha256Digest key;             // the block's key (or a swapped block's tag)
  std::vector<int32_t> tokens;  // the block's token ids (none for a swapped block)
  uint32_t payload_crc = 0;
};

// Bytes of a slot header for blocks of up to `block_tokens` tokens (a multiple of 64).
// Layout (little-endian): magic u32, version u32, header bytes u32, token count u32,
// model fingerprint u64, block bytes u64, slot i64, key [32], payload CRC32C u32, 4 zero
// bytes, tokens i32 x token count, header CRC32C u32 of everything before it, zero padding.
size_t SlotHeaderBytes(int64_t block_tokens);

// Encodes h into out[0, header_bytes) (header_bytes from SlotHeaderBytes, with room for
// h.tokens).
void EncodeSlotHeader(const SlotHeader& h, size_t header_bytes, uint8_t* out);

// Decodes a header of header_bytes bytes. DataLoss naming the problem (bad magic: an empty,
// foreign or overwritten slot; checksum mismatch: a torn write or bit rot; bad sizes);
// FailedPrecondition for a slot of an older format version (recognised and ignored).
absl::StatusOr<SlotHeader> DecodeSlotHeader(const uint8_t* p, size_t header_bytes);

}  // namespace kvtier

#endif  // KVTIER_STORAGE_SLOT_HEADER_H_
