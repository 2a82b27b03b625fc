// DeviceKvBytes: the device tier's KV budget a context is created with. The options give it
// in bytes, or as 0 (what gpu_mem_limit leaves after weights and workspace), or not at all:
// then the pool is sized from the model — room for one sequence of the model's whole
// context plus one block for each other sequence that may run at once (max_running), so
// that a small model gets a small pool and a large one what its context needs — within a
// share of the memory the pool draws on: a quarter of the physical memory on the CPU, 90%
// of the device's free memory on CUDA (and what gpu_mem_limit leaves when one is set).
// Stateless; thread-safe.
#ifndef KVTIER_ENGINE_KV_POOL_SIZE_H_
#define KVTIER_ENGINE_KV_POOL_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/engine_options.h"

namespace kvtier {

class Backend;

// What a model-sized pool is computed from.
struct KvPoolSizing {
  int64_t context_tokens = 0;  // the model's max_position_embeddings
  int64_t block_tokens = 0;
  int64_t block_bytes = 0;
  int64_t max_running = 0;
  int64_t memory_bytes = 0;    // what the pool draws on (Backend::MemoryForKvPool); 0 = unknown
  bool device = false;         // a GPU's free memory (share 90%) rather than host memory (25%)
};

// The share of KvPoolSizing::memory_bytes a model-sized pool may take.
inline constexpr double kHostKvPoolShare = 0.25;
inline constexpr double kDeviceKvPoolShare = 0.9;

// Bytes of the model-sized pool: whole blocks for the context plus max_running - 1 blocks,
// capped at the share of memory_bytes (not capped when memory_bytes is 0).
int64_t ModelSizedKvBytes(const KvPoolSizing& sizing);

// The device tier's budget for these options on this backend (after its weights and
// workspace are allocated). ResourceExhausted when gpu_mem_limit, or the memory a
// model-sized pool may take, leaves room for no block. `group_blocks_per_block`: the blocks
// of the backend's layout that hold block_tokens positions of every layer (layers /
// layers_per_group with KV layer groups, else 1): a model-sized pool is sized in those, so
// that grouping changes how many blocks the same bytes hold, not the bytes.
absl::StatusOr<int64_t> DeviceKvBytes(const EngineOptions& options, const Backend& backend, int64_t context_tokens,
                                      int64_t group_blocks_per_block = 1);

}  // namespace kvtier

#endif  // KVTIER_ENGINE_KV_POOL_SIZE_H_
