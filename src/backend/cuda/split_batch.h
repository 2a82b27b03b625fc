// SplitBatch: cuts a batch larger than the CUDA backend's workspace into pieces it runs one
// after another. Pure host code, thread-compatible.
#ifndef KVTIER_BACKEND_CUDA_SPLIT_BATCH_H_
#define KVTIER_BACKEND_CUDA_SPLIT_BATCH_H_

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace kvtier::cuda {

// Splits a batch into pieces of at most max_tokens tokens and max_chunks chunks, in order;
// a chunk cut in two keeps its block table, the later piece starting where the earlier
// ended, and only the last piece keeps need_logits. A piece names at most max_host_blocks
// host-resident blocks in all (a chunk with more is left whole, in a piece of its own).
std::vector<ForwardBatch> SplitBatch(const ForwardBatch& batch, int64_t max_tokens, int64_t max_chunks,
                                     int64_t max_host_blocks = INT64_MAX);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_SPLIT_BATCH_H_
