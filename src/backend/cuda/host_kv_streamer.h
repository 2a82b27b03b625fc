// HostKvStreamer: how the CUDA backend reads host-resident KV (docs/LONG_CONTEXT.md, "The
// CUDA part"). A step whose chunks name host-resident blocks (SequenceChunk::host_kv) reads
// them per layer from a device staging buffer: before layer l's attention, a gather on the
// streamer's own stream has copied layer l's slice of every such block (the host tier is
// pinned and mapped, so the device reads it over the link) into buffer l % 2, slot s for the
// step's s-th host block. The block table names slot s as entry -1 - s (kernels.h,
// PagedKv::staged), so the attention kernels run unchanged: same splits, same merge, same
// arithmetic as with every block on the device. Two buffers: the gather of layer l + 1 runs
// while layer l computes.
//
// fp8 KV streams fp8 bytes: a slot holds the layer's codes then that layer's row scales
// (two segments of the block, kv_fp8.cuh), so the host, disk and remote tiers keep the
// block format unchanged.
//
// One thread at a time (the backend's stepping thread).
#ifndef KVTIER_BACKEND_CUDA_HOST_KV_STREAMER_H_
#define KVTIER_BACKEND_CUDA_HOST_KV_STREAMER_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "backend/cuda/copy_stats_board.h"
#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/host_kv_stream.h"
#include "backend/cuda/step_launch.h"
#include "backend/kv_layout.h"

namespace kvtier::cuda {

class HostKvStreamer {
 public:
  struct Options {
    KvLayout layout;
    int64_t stream_tokens = 0;    // CudaOptions::host_kv_stream_tokens
    bool fast_attention = false;  // KernelSelection::fast_attention (the kernels that read staged slots)
    int32_t sm_count = 0;
    cudaStream_t compute = nullptr;  // the forward's stream
    // The step metadata (StepLaunch::meta): its device copy and the host buffer it came from.
    const uint8_t* meta_device = nullptr;
    const uint8_t* meta_host = nullptr;
  };

  // Slots per staging buffer for options.stream_tokens (0 when streaming is off for this
  // layout and shape), and the device bytes of both buffers.
  static int64_t SlotsWanted(const Options& options);
  static int64_t StagingBytes(const Options& options);
  // Why a CUDA backend with this streamer reads no host-resident KV, naming the options that
  // would make it read them where some would: `streams`, slots() > 0; `grouped`, a grouped KV
  // layout, whose group tables it does not stage (CudaBackend::ReadsHostResidentKv).
  static std::string WhyNotRead(const Options& options, bool streams, bool grouped);

  // Allocates the staging buffers, stream and events, measures the host link and picks the
  // fastest gather (stats: host_link_bytes_per_second, host_kv_gather*). Off (slots() 0) where
  // SlotsWanted is 0 or the device cannot read mapped host memory.
  static absl::StatusOr<std::unique_ptr<HostKvStreamer>> Create(const Options& options, DeviceMemoryAccount& memory,
                                                                CopyStatsBoard* stats);
  ~HostKvStreamer();  // waits for its streams
  HostKvStreamer(const HostKvStreamer&) = delete;
  HostKvStreamer& operator=(const HostKvStreamer&) = delete;

  // Host-resident blocks one step may read (0: streaming off).
  int64_t slots() const { return slots_; }
  // Chunk c's host-resident blocks: streaming is on, they fit the staging buffers, and they
  // are full blocks before every position the chunk writes.
  absl::Status ValidateChunk(const SequenceChunk& chunk, size_t c) const;
  // Counts a step's streamed bytes (host_kv_steps, host_kv_bytes).
  void CountStep(const StepLaunch& step);

  // Before the layer loop: the gather of layer 0. At layer `layer`, before its attention:
  // the gather of layer + 1 (once the buffer it overwrites is free), then the compute
  // stream's wait for this layer's slices; returns the staging buffer to read (null for a
  // step without host blocks).
  absl::Status StageFirstLayer(const StepLaunch& step);
  absl::StatusOr<const void*> StageLayer(const StepLaunch& step, int64_t layer);
  // After layer `layer`'s attention: its buffer may be overwritten.
  absl::Status ReleaseLayer(const StepLaunch& step, int64_t layer);

 private:
  // The byte ranges of a block holding `layer` (one for 16-bit KV; codes and scales for fp8).
  struct LayerSlice {
    HostKvSegment segments[2];
    int32_t num_segments = 1;
  };
  static LayerSlice LayerSegments(const KvLayout& layout, int64_t layer);

  HostKvStreamer(const Options& options, CopyStatsBoard* stats) : options_(options), stats_(stats) {}
  // Times pinned host -> device copies into the staging area.
  absl::Status MeasureHostLink();
  // Times each way of gathering host-resident KV on this link and keeps the fastest in
  // gather_shape_ (host_kv_streamer_tuning.cc).
  absl::Status ChooseGather();
  // Enqueues the gather of `layer` into staging buffer `buffer` and records its landing.
  absl::Status Gather(const StepLaunch& step, int64_t layer, int buffer);

  const Options options_;
  CopyStatsBoard* const stats_;
  HostKvGatherShape gather_shape_;
  HostKvCopyBatch copy_batch_;  // kCopyBatch's argument arrays
  HostKvAuxStream aux_;         // kSplit's and kCopyCodes' second stream
  int64_t slots_ = 0;           // per staging buffer (0: streaming off)
  size_t slice_bytes_ = 0;      // one layer of one block
  void* staged_[2] = {nullptr, nullptr};
  cudaStream_t stream_ = nullptr;
  cudaEvent_t meta_ready_ = nullptr;
  cudaEvent_t landed_[2] = {nullptr, nullptr};
  cudaEvent_t free_[2] = {nullptr, nullptr};
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_HOST_KV_STREAMER_H_
