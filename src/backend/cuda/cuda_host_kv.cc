// CudaBackend's streaming of host-resident KV (docs/LONG_CONTEXT.md, "The CUDA part").
//
// A step whose chunks name host-resident blocks (SequenceChunk::host_kv) reads them per
// layer from a device staging buffer: before layer l's attention, a gather kernel on
// stage_stream_ has copied layer l's slice of every such block (the host tier is pinned and
// mapped, so the kernel reads it over the link) into buffer l % 2, slot s for the step's s-th
// host block. The block table names slot s as entry -1 - s (kernels.h, PagedKv::staged), so
// the attention kernels run unchanged: same splits, same merge, same arithmetic as with every
// block on the device. Two buffers: the gather of layer l + 1 runs while layer l computes.
//
// fp8 KV streams fp8 bytes: a slot holds the layer's codes then that layer's row scales
// (two segments of the block, kv_fp8.cuh), so the host, disk and remote tiers keep the
// block format unchanged.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/host_kv_stream.h"
#include "common/status_macros.h"

namespace kvtier {

int64_t CudaBackend::HostKvSlotsWanted() const {
  const int64_t tokens = options_.cuda.host_kv_stream_tokens;
  if (tokens <= 0 || !fast_attention_) return 0;
  // The gather moves 16-byte pieces: every segment of a layer must start and end on 16.
  for (const cuda::HostKvSegment& segment : HostKvLayerSegments(0).segments) {
    if (segment.offset % 16 != 0 || segment.bytes % 16 != 0) return 0;
  }
  return (tokens + layout_.block_tokens - 1) / layout_.block_tokens;
}

int64_t CudaBackend::HostKvStagingBytes() const {
  return 2 * HostKvSlotsWanted() * static_cast<int64_t>(layout_.BlockBytes() / layout_.num_layers);
}

CudaBackend::HostKvLayerSlice CudaBackend::HostKvLayerSegments(int64_t layer) const {
  HostKvLayerSlice slice;
  const size_t layer_elements = static_cast<size_t>(layout_.ElementsPerBlock() / layout_.num_layers);
  const size_t code_bytes = layer_elements * DTypeSize(layout_.dtype);
  slice.segments[0] = {static_cast<size_t>(layer) * code_bytes, code_bytes};
  if (layout_.has_scales()) {
    const size_t scale_bytes = static_cast<size_t>(layout_.ScalesPerBlock() / layout_.num_layers) * sizeof(float);
    slice.segments[1] = {layout_.ScaleByteOffset(layer, 0, 0, 0), scale_bytes};
    slice.num_segments = 2;
  }
  return slice;
}

absl::Status CudaBackend::InitHostKvStaging() {
  const int64_t slots = HostKvSlotsWanted();
  if (slots == 0) return absl::OkStatus();
  // The gather reads host blocks at their host addresses (UVA); a device that cannot gets
  // no streaming, and long sequences stay refused at admission.
  int can_use_host_pointer = 0;
  CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&can_use_host_pointer, cudaDevAttrCanUseHostPointerForRegisteredMem, 0));
  if (can_use_host_pointer == 0) return absl::OkStatus();
  // A slot is one layer of a block: all its bytes, codes and (fp8) scales alike.
  host_kv_slice_bytes_ = layout_.BlockBytes() / layout_.num_layers;
  gather_shape_ = cuda::DefaultHostKvGatherShape(sm_count_);
  host_kv_copy_batch_.Reserve(static_cast<size_t>(slots));
  for (void*& buffer : host_kv_staged_) {
    ASSIGN_OR_RETURN(buffer, DeviceAlloc(static_cast<size_t>(slots) * host_kv_slice_bytes_, "host KV staging"));
  }
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stage_stream_, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stage_aux_.stream, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&stage_aux_.fork, cudaEventDisableTiming));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&stage_aux_.join, cudaEventDisableTiming));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&stage_meta_ready_, cudaEventDisableTiming));
  for (int i = 0; i < 2; ++i) {
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&stage_landed_[i], cudaEventDisableTiming));
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&stage_free_[i], cudaEventDisableTiming));
  }
  host_kv_slots_ = slots;
  RETURN_IF_ERROR(MeasureHostLink());
  return ChooseHostKvGather();
}

absl::Status CudaBackend::MeasureHostLink() {
  // Pinned host -> device over the copy engine, into staging buffer 0: the bound a step
  // streaming host-resident KV is measured against (kvtier bench W8).
  const size_t bytes = std::min<size_t>(static_cast<size_t>(host_kv_slots_) * host_kv_slice_bytes_, size_t{256} << 20);
  void* host = nullptr;
  CUDA_RETURN_IF_ERROR(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  std::memset(host, 0, bytes);
  cudaEvent_t start = nullptr, end = nullptr;
  cudaError_t err = cudaEventCreate(&start);
  if (err == cudaSuccess) err = cudaEventCreate(&end);
  constexpr int kRepeats = 4;
  if (err == cudaSuccess) err = cudaMemcpyAsync(host_kv_staged_[0], host, bytes, cudaMemcpyHostToDevice, stage_stream_);
  if (err == cudaSuccess) err = cudaEventRecord(start, stage_stream_);
  for (int i = 0; i < kRepeats && err == cudaSuccess; ++i) {
    err = cudaMemcpyAsync(host_kv_staged_[0], host, bytes, cudaMemcpyHostToDevice, stage_stream_);
  }
  if (err == cudaSuccess) err = cudaEventRecord(end, stage_stream_);
  if (err == cudaSuccess) err = cudaEventSynchronize(end);
  float ms = 0;
  if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, start, end);
  if (start != nullptr) cudaEventDestroy(start);
  if (end != nullptr) cudaEventDestroy(end);
  cudaFreeHost(host);
  CUDA_RETURN_IF_ERROR(err);
  if (ms > 0) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    copy_stats_.host_link_bytes_per_second = static_cast<double>(bytes) * kRepeats / (ms * 1e-3);
  }
  return absl::OkStatus();
}

void CudaBackend::CountHostKvStep(const StepLaunch& step) {
  if (step.host_blocks == 0) return;
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++copy_stats_.host_kv_steps;
  copy_stats_.host_kv_bytes += static_cast<int64_t>(step.host_blocks) * static_cast<int64_t>(layout_.BlockBytes());
}

absl::Status CudaBackend::ValidateHostKv(const SequenceChunk& chunk, size_t c) const {
  const HostResidentKv& host = chunk.host_kv;
  if (host.empty()) return absl::OkStatus();
  if (host_kv_slots_ == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "chunk ", c, " reads ", host.num_blocks(), " host-resident KV blocks; this CUDA backend does not stream them ",
        "(cuda host_kv_stream_tokens is 0, the fast attention kernels are off, or the device cannot read mapped host "
        "memory)"));
  }
  if (host.num_blocks() > host_kv_slots_) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " reads ", host.num_blocks(),
                                                   " host-resident KV blocks; the staging buffers hold ",
                                                   host_kv_slots_, " (host_kv_stream_tokens)"));
  }
  if (host.first_block < 0 || (host.first_block + host.num_blocks()) * layout_.block_tokens > chunk.start_position) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " host-resident blocks [", host.first_block, ", ",
                                                   host.first_block + host.num_blocks(),
                                                   ") are not all full blocks before its first position ",
                                                   chunk.start_position));
  }
  for (const void* block : host.blocks) {
    if (block == nullptr || reinterpret_cast<uintptr_t>(block) % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " names a null or unaligned host block"));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::GatherHostKvLayer(const StepLaunch& step, int64_t layer, int buffer) {
  cuda::HostKvGather gather;
  gather.blocks = reinterpret_cast<const uint64_t*>(ws_.meta + step.meta.host_blocks);
  // The same addresses as the host wrote them this step (kCopyBatch reads them here).
  gather.host_blocks = reinterpret_cast<const uint64_t*>(meta_host_ + step.meta.host_blocks);
  gather.num_slices = step.host_blocks;
  const HostKvLayerSlice slice = HostKvLayerSegments(layer);
  gather.segments[0] = slice.segments[0];
  gather.segments[1] = slice.segments[1];
  gather.num_segments = slice.num_segments;
  gather.staged = host_kv_staged_[buffer];
  CUDA_RETURN_IF_ERROR(cuda::GatherHostKv(gather, gather_shape_, stage_stream_, &host_kv_copy_batch_, &stage_aux_));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(stage_landed_[buffer], stage_stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::StageFirstHostKvLayer(const StepLaunch& step) {
  if (step.host_blocks == 0) return absl::OkStatus();
  // The step's metadata (host addresses) was copied on the compute stream just before.
  CUDA_RETURN_IF_ERROR(cudaEventRecord(stage_meta_ready_, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stage_stream_, stage_meta_ready_, 0));
  return GatherHostKvLayer(step, 0, 0);
}

absl::StatusOr<const void*> CudaBackend::StageHostKvLayer(const StepLaunch& step, int64_t layer) {
  if (step.host_blocks == 0) return nullptr;
  const int64_t next = layer + 1;
  if (next < config_.num_layers) {
    const int b = static_cast<int>(next % 2);
    // Buffer b last held layer - 1, whose attention recorded stage_free_[b] already.
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stage_stream_, stage_free_[b], 0));
    RETURN_IF_ERROR(GatherHostKvLayer(step, next, b));
  }
  const int b = static_cast<int>(layer % 2);
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, stage_landed_[b], 0));
  return host_kv_staged_[b];
}

absl::Status CudaBackend::ReleaseHostKvLayer(const StepLaunch& step, int64_t layer) {
  if (step.host_blocks == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaEventRecord(stage_free_[layer % 2], stream_));
  return absl::OkStatus();
}

}  // namespace kvtier
