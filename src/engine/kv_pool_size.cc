// DeviceKvBytes and ModelSizedKvBytes (kv_pool_size.h).
#include "engine/kv_pool_size.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "common/byte_size.h"

namespace kvtier {
namespace {

// Kept free under gpu_mem_limit for the CUDA context's own allocations inside the cap.
constexpr int64_t kCudaRuntimeMargin = 256ll << 20;

}  // namespace

int64_t ModelSizedKvBytes(const KvPoolSizing& s) {
  const int64_t context_blocks = (s.context_tokens + s.block_tokens - 1) / s.block_tokens;
  const int64_t blocks = context_blocks + std::max<int64_t>(s.max_running - 1, 0);
  int64_t bytes = blocks * s.block_bytes;
  if (s.memory_bytes > 0) {
    const double share = s.device ? kDeviceKvPoolShare : kHostKvPoolShare;
    bytes = std::min(bytes, static_cast<int64_t>(static_cast<double>(s.memory_bytes) * share));
  }
  return bytes / s.block_bytes * s.block_bytes;
}

absl::StatusOr<int64_t> DeviceKvBytes(const EngineOptions& options, const Backend& backend, int64_t context_tokens,
                                      int64_t group_blocks_per_block) {
  if (options.gpu_kv_bytes.has_value() && *options.gpu_kv_bytes > 0) return *options.gpu_kv_bytes;
  const int64_t block_bytes = static_cast<int64_t>(backend.kv_layout().BlockBytes());
  const bool cuda = backend.name() == "cuda";
  // What the cap leaves after weights and workspace (no cap: no limit).
  int64_t cap_leaves = INT64_MAX;
  if (options.gpu_mem_limit > 0) {
    cap_leaves = options.gpu_mem_limit - backend.device_bytes_in_use() - (cuda ? kCudaRuntimeMargin : 0);
    if (cap_leaves < block_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("gpu_mem_limit ", options.gpu_mem_limit, " leaves ", cap_leaves,
                                                       " bytes for KV after ", backend.device_bytes_in_use(),
                                                       " bytes of weights and workspace"));
    }
  }
  if (options.gpu_kv_bytes.has_value()) return cap_leaves;  // 0: what the cap leaves (Validate: there is one)
  KvPoolSizing sizing;
  sizing.context_tokens = context_tokens;
  sizing.block_tokens = options.block_tokens;
  sizing.block_bytes = block_bytes * std::max<int64_t>(group_blocks_per_block, 1);
  sizing.max_running = options.max_running;
  sizing.memory_bytes = backend.MemoryForKvPool();
  sizing.device = cuda;
  const int64_t bytes = std::min(ModelSizedKvBytes(sizing), cap_leaves);
  if (bytes < block_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no gpu_kv_bytes given, and ", cuda ? "90% of the device's free memory (" : "a quarter of physical memory (",
        FormatByteSize(sizing.memory_bytes), ") holds no KV block of ", block_bytes, " bytes"));
  }
  return bytes;
}

}  // namespace kvtier
