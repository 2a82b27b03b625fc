// HostResidentKv: the part of one sequence's paged KV that lives in host memory and is read
// in place by attention, for a sequence longer than the device tier (docs/LONG_CONTEXT.md).
// Plain value type; the bytes it points at belong to the KV manager's host tier.
//
// A sequence's logical block j covers positions [j * block_tokens, (j + 1) * block_tokens).
// With n = blocks.size(), the chunk's device block table and this range split them:
//   j <  first_block              -> block_table[j]           (device: attention sinks)
//   first_block <= j < first + n  -> blocks[j - first_block]  (host, KvLayout::BlockBytes() each)
//   j >= first_block + n          -> block_table[j - n]       (device: the recent blocks)
// Host blocks are full and only read: every position a chunk writes is in a device block.
// A backend with a copy engine streams them, layer by layer, into a rotating device staging
// area while the previous layer computes; the CPU backend reads them where they are.
#ifndef KVTIER_BACKEND_HOST_RESIDENT_KV_H_
#define KVTIER_BACKEND_HOST_RESIDENT_KV_H_

#include <cstdint>
#include <span>

namespace kvtier {

struct HostResidentKv {
  int64_t first_block = 0;
  std::span<const void* const> blocks;  // (n) host block pointers, in position order

  int64_t num_blocks() const { return static_cast<int64_t>(blocks.size()); }
  bool empty() const { return blocks.empty(); }
  // Whether logical block j is host-resident.
  bool Contains(int64_t j) const { return j >= first_block && j < first_block + num_blocks(); }
  // Index into the device block table of a logical block that is not host-resident.
  int64_t DeviceIndex(int64_t j) const { return j < first_block ? j : j - num_blocks(); }
};

}  // namespace kvtier

#endif  // KVTIER_BACKEND_HOST_RESIDENT_KV_H_
