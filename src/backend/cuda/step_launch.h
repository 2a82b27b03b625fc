// StepLaunch: everything the CUDA forward needs to enqueue one prepared step — where each
// per-step metadata array sits, the step's row counts, its attention path and what it hands
// back. Written by StepPlanner, read by ForwardPass and HostKvStreamer. Plain value.
#ifndef KVTIER_BACKEND_CUDA_STEP_LAUNCH_H_
#define KVTIER_BACKEND_CUDA_STEP_LAUNCH_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cuda/prefill_attention.h"
#include "backend/token_masks.h"

namespace kvtier::cuda {

// Rounds a byte count up to the 256-byte alignment every step-metadata array keeps.
constexpr size_t AlignMetaBytes(size_t x) { return (x + 255) & ~size_t{255}; }

// Offsets of the per-step metadata inside the host and device metadata buffers. The
// block-table indices come last: a step copies only the bytes it uses, and a captured
// decode graph, whose arrays sit at fixed offsets for its batch bucket, reads tables of
// any length. With layer groups (kv_grouping.h) every group has its own indptr array, group
// g's at indptr + g * indptr_stride, all pointing into the one indices array. A windowed
// group's table holds, per chunk, only the blocks from its WindowTableFirst on
// (window_table_span.h): indices[indptr[c] + j] is logical block j's entry for those j, so
// indptr[c] may be negative (the kernels add it, a signed 32-bit offset, to `indices` and
// index with the blocks of positions they read), and indptr[c + 1] - indptr[c] is no block
// count.
struct MetaLayout {
  size_t ids = 0, pos = 0, chunk = 0, rows = 0, logit_rows = 0, indptr = 0, indptr_stride = 0, num_splits = 0,
         partial_base = 0, items = 0, tiles = 0, sampling = 0, mask_slots = 0, host_blocks = 0, indices = 0, bytes = 0;

  size_t GroupIndptr(int64_t group) const { return indptr + static_cast<size_t>(group) * indptr_stride; }
};

// How a step's attention runs: decode rows on DecodeAttention and multi-token chunks on
// PrefillAttention (kFast), or everything on the generic PagedAttention (kGeneric, for
// shapes the fast kernels do not support).
enum class AttentionPath { kFast, kGeneric };

// A pure function of the batch bucket for graph steps.
struct StepLaunch {
  MetaLayout meta;
  int32_t rows = 0;  // step tokens incl. padding
  int32_t logit_rows = 0;
  int32_t decode_rows = 0;  // kFast: 1-token chunks (meta.rows)
  int32_t decode_splits = 1;
  int32_t prefill_tiles = 0;  // kFast: tiles at meta.tiles
  // kFast: the multi-token chunks the tiles cover (host; the planner's, valid until its next
  // Prepare), for a prefill attention that runs chunk by chunk (CudnnPrefill).
  std::span<const PrefillChunk> prefill_chunks;
  AttentionPath path = AttentionPath::kFast;
  // kGeneric: the attention plan's items (at meta.items), query rows per CTA, and whether
  // any item is split (AttentionPlan).
  int32_t generic_items = 0;
  int32_t generic_max_rows = 0;
  bool generic_any_split = false;
  bool greedy = false;   // ids picked on the device (argmax, or sampled), to the host ids
  bool sampled = false;  // SampleRows with meta.sampling instead of the argmax
  // Grammar masks of some logits rows (never in a graph step): slots first_slot ..
  // first_slot + num_slots of `masks` go to the device, meta.mask_slots maps the rows.
  const TokenMasks* masks = nullptr;
  int32_t first_slot = 0, num_slots = 0;
  // Host-resident blocks the step streams (meta.host_blocks: their host addresses, in
  // staging-slot order; block-table entry -1 - s names slot s).
  int32_t host_blocks = 0;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_STEP_LAUNCH_H_
