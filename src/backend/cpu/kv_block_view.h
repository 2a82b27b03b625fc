// KvBlockView: one sequence's paged KV as the CPU backend's attention sees it — logical
// block j resolved to its bytes, in the device pool or, for host-resident blocks
// (host_resident_kv.h), in host memory, read in place. Plain value type.
//
// A block is KvLayout::BlockBytes() bytes in every tier (f32 elements, or E4M3 codes then
// per-row fp32 scales: kv_layout.h), so a host-resident block is decoded by the same row
// loads as a device one. Attention over a view reads every position in the same order
// whatever tier holds it, so a sequence partly on the host computes bit for bit what it
// computes all on the device, in either KV format.
#ifndef KVTIER_BACKEND_CPU_KV_BLOCK_VIEW_H_
#define KVTIER_BACKEND_CPU_KV_BLOCK_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "backend/host_resident_kv.h"
#include "backend/kv_layout.h"

namespace kvtier {

// The KV heads [first, first + count) of a layout: a tensor-parallel rank's share
// (docs/TENSOR_PARALLEL.md). The block keeps every head's place, so a rank writes and reads
// the bytes its heads have at any degree.
struct KvHeadRange {
  int64_t first = 0;
  int64_t count = 0;
};

struct KvBlockView {
  const KvLayout* layout = nullptr;
  void* pool = nullptr;                   // num_blocks x layout->BlockBytes() bytes: device tier
  std::span<const int32_t> block_table;   // device blocks of the sequence (host_resident_kv.h)
  HostResidentKv host;                    // host-resident blocks, read only
  std::optional<KvHeadRange> heads;       // the heads this view reaches; nullopt: all of them
  // A windowed layer group's table (docs/ARCHITECTURE.md, "Layer groups"): the logical
  // blocks before first_block were dropped and are never read; block_table and host count
  // from first_block on.
  int64_t first_block = 0;

  int64_t FirstKvHead() const { return heads ? heads->first : 0; }
  int64_t NumKvHeads() const { return heads ? heads->count : layout->num_kv_heads; }

  // The bytes of logical block j (at or after first_block).
  const uint8_t* Read(int64_t j) const {
    j -= first_block;
    if (host.Contains(j)) return static_cast<const uint8_t*>(host.blocks[static_cast<size_t>(j - host.first_block)]);
    return DeviceBlock(j);
  }
  // Only device blocks are written (the batch was validated so).
  uint8_t* Write(int64_t j) const { return DeviceBlock(j - first_block); }

 private:
  uint8_t* DeviceBlock(int64_t j) const {
    return static_cast<uint8_t*>(pool) +
           static_cast<size_t>(block_table[static_cast<size_t>(host.DeviceIndex(j))]) * layout->BlockBytes();
  }
};

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_KV_BLOCK_VIEW_H_
