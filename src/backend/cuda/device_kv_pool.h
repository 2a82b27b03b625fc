// DeviceKvPool: where the CUDA backend's device-tier KV blocks live — num_blocks blocks of
// KvLayout::BlockBytes() bytes, then one scratch block that graph padding rows and the
// warm-up write and nobody reads. Plain value (the memory is the DeviceMemoryAccount's).
#ifndef KVTIER_BACKEND_CUDA_DEVICE_KV_POOL_H_
#define KVTIER_BACKEND_CUDA_DEVICE_KV_POOL_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvtier::cuda {

struct DeviceKvPool {
  void* base = nullptr;  // (num_blocks + 1) blocks; null before AllocateKvPool
  size_t block_bytes = 0;
  int64_t num_blocks = 0;
  int32_t scratch_block = -1;  // the block past num_blocks

  void* Block(int32_t block) const { return static_cast<uint8_t*>(base) + static_cast<size_t>(block) * block_bytes; }
  // InvalidArgument unless `block` is one of the num_blocks blocks callers may name.
  absl::Status Validate(int32_t block) const {
    if (block < 0 || block >= num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("block id ", block, " out of range [0, ", num_blocks, ")"));
    }
    return absl::OkStatus();
  }
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_DEVICE_KV_POOL_H_
