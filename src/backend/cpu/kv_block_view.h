// KvBlockView: one sequence's paged KV as the CPU backend's attention sees it — logical
// block j resolved to its bytes, in the device pool or, for host-resident blocks
// (host_resident_kv.h), in host memory, read in place. Plain value type.
//
// Attention over a view reads every position in the same order whatever tier holds it,
// so a sequence partly on the host computes bit for bit what it computes all on the device.
#ifndef KVTIER_BACKEND_CPU_KV_BLOCK_VIEW_H_
#define KVTIER_BACKEND_CPU_KV_BLOCK_VIEW_H_

#include <cstdint>
#include <span>

#include "backend/host_resident_kv.h"
#include "backend/kv_layout.h"

namespace kvtier {

struct KvBlockView {
  const KvLayout* layout = nullptr;
  float* pool = nullptr;                  // (num_blocks, ElementsPerBlock()) f32: device tier
  std::span<const int32_t> block_table;   // device blocks of the sequence (host_resident_kv.h)
  HostResidentKv host;                    // host-resident blocks, read only

  const float* Read(int64_t j) const {
    if (host.Contains(j)) return static_cast<const float*>(host.blocks[static_cast<size_t>(j - host.first_block)]);
    return pool + block_table[static_cast<size_t>(host.DeviceIndex(j))] * layout->ElementsPerBlock();
  }
  // Only device blocks are written (the batch was validated so).
  float* Write(int64_t j) const {
    return pool + block_table[static_cast<size_t>(host.DeviceIndex(j))] * layout->ElementsPerBlock();
  }
};

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_KV_BLOCK_VIEW_H_
