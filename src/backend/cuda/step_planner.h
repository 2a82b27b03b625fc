// StepPlanner: turns one piece of a batch into the step's metadata (token ids, positions,
// chunk and logits rows, block tables, attention work, sampling parameters, mask slots,
// host-resident block addresses), written into a pinned host buffer that the step copies to
// the device in one transfer, and says how to launch it (StepLaunch). Graph steps pad their
// chunks up to the bucket with one-token chunks on the scratch block, so their arrays sit at
// offsets fixed for the bucket. With layer groups, one indptr array per group into one
// indices array. A windowed group's table holds, per chunk, only the entries some kernel can
// read (window_table_span.h: from a few blocks before the window's first key), its indptr
// entry shifted so that indices[indptr[c] + j] is still logical block j's (indptr may be
// negative); those before the table's first block name the scratch block, which the kernels
// read only masked: its values are finite (zeroed at allocation), so a zero weight keeps them
// out. One thread at a time (the backend's).
#ifndef KVTIER_BACKEND_CUDA_STEP_PLANNER_H_
#define KVTIER_BACKEND_CUDA_STEP_PLANNER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "backend/cuda/attention_plan.h"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/step_capacity.h"
#include "backend/cuda/step_launch.h"
#include "backend/cuda/step_spec.h"

namespace kvtier::cuda {

class StepPlanner {
 public:
  struct Shape {
    StepCapacity capacity;
    int64_t block_tokens = 0;
    bool fast_attention = false;
    int32_t prefill_tile_tokens = 0;
    int32_t num_kv_heads = 0;
    int32_t decode_wave_ctas = 0;  // KernelSelection::decode_wave_ctas
    // KvGrouping::group_window: each group's window (nullopt: full attention); empty
    // without groups (one full-attention table).
    std::vector<std::optional<int64_t>> group_window;
  };
  // Block-table entries the largest step writes over every group: a full-attention group's
  // capacity.max_table_entries, a windowed group's at most its window's span per chunk
  // (WindowTableEntries) over the step's chunks and tokens.
  static int64_t MaxTableEntries(const StepCapacity& capacity, std::span<const std::optional<int64_t>> group_window,
                                 int64_t block_tokens);
  // Bytes of metadata the largest step takes (the host and device buffers' size), with at
  // most host_kv_slots host-resident blocks and a table per group (MaxTableEntries).
  static size_t MetaCapacity(const StepCapacity& capacity, int64_t host_kv_slots,
                             std::span<const std::optional<int64_t>> group_window, int64_t block_tokens);
  // Allocates the pinned host buffer of meta_capacity bytes.
  static absl::StatusOr<std::unique_ptr<StepPlanner>> Create(const Shape& shape, size_t meta_capacity);
  ~StepPlanner();
  StepPlanner(const StepPlanner&) = delete;
  StepPlanner& operator=(const StepPlanner&) = delete;

  // Writes the step's metadata into meta_host() (padding chunks up to `padded_chunks` with
  // one-token chunks on `scratch_block`) and returns how to launch it. With groups, a chunk's
  // group_tables (empty: block_table in every group, as the warm-up's chunks).
  absl::StatusOr<StepLaunch> Prepare(const ForwardBatch& piece, int64_t padded_chunks, int32_t scratch_block,
                                     const StepSpec& spec);

  const uint8_t* meta_host() const { return meta_host_; }

 private:
  // Logical blocks [first, end) of a chunk's table in one group that the step writes.
  struct TableSpan {
    int64_t first = 0, end = 0;
  };

  StepPlanner(const Shape& shape, size_t meta_capacity) : shape_(shape), meta_capacity_(meta_capacity) {}
  int64_t num_groups() const { return std::max<int64_t>(1, static_cast<int64_t>(shape_.group_window.size())); }
  TableSpan SpanOf(int64_t group, const SequenceChunk& chunk) const;

  const Shape shape_;
  const size_t meta_capacity_;
  uint8_t* meta_host_ = nullptr;              // pinned, meta_capacity_ bytes
  AttentionPlan plan_;                        // reused every step
  std::vector<ChunkShape> shapes_;            // reused every step
  std::vector<PrefillChunk> prefill_chunks_;  // reused every step
  std::vector<PrefillTile> prefill_tiles_;    // reused every step
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_STEP_PLANNER_H_
