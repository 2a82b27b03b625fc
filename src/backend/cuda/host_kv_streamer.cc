// HostKvStreamer (see host_kv_streamer.h): staging, the per-layer gathers and their events.
#include "backend/cuda/host_kv_streamer.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_check.h"
#include "common/status_macros.h"

namespace kvtier::cuda {

HostKvStreamer::LayerSlice HostKvStreamer::LayerSegments(const KvLayout& layout, int64_t layer) {
  LayerSlice slice;
  const size_t layer_elements = static_cast<size_t>(layout.ElementsPerBlock() / layout.num_layers);
  const size_t code_bytes = layer_elements * DTypeSize(layout.dtype);
  slice.segments[0] = {static_cast<size_t>(layer) * code_bytes, code_bytes};
  if (layout.has_scales()) {
    const size_t scale_bytes = static_cast<size_t>(layout.ScalesPerBlock() / layout.num_layers) * sizeof(float);
    slice.segments[1] = {layout.ScaleByteOffset(layer, 0, 0, 0), scale_bytes};
    slice.num_segments = 2;
  }
  return slice;
}

int64_t HostKvStreamer::SlotsWanted(const Options& options) {
  const int64_t tokens = options.stream_tokens;
  if (tokens <= 0 || !options.fast_attention) return 0;
  // The gather moves 16-byte pieces: every segment of a layer must start and end on 16.
  for (const HostKvSegment& segment : LayerSegments(options.layout, 0).segments) {
    if (segment.offset % 16 != 0 || segment.bytes % 16 != 0) return 0;
  }
  return (tokens + options.layout.block_tokens - 1) / options.layout.block_tokens;
}

std::string HostKvStreamer::WhyNotRead(const Options& options, bool streams, bool grouped) {
  const std::string groups = "the cuda backend does not read host-resident KV blocks in layer groups";
  if (grouped && streams) {
    return absl::StrCat(groups, "; with kv_layer_groups 0 it streams a long sequence's oldest blocks from the host tier");
  }
  if (grouped && options.stream_tokens <= 0 && options.fast_attention) {
    return absl::StrCat(groups, "; with kv_layer_groups 0 and cuda_host_kv_stream_tokens above 0 it streams a long ",
                        "sequence's oldest blocks from the host tier");
  }
  // Without the fast kernels or mapped host memory no option makes it stream.
  const std::string why = !options.fast_attention     ? "the fast attention kernels do not run this model"
                          : options.stream_tokens <= 0 ? "cuda_host_kv_stream_tokens is 0"
                                                       : "the device cannot read mapped host memory";
  return absl::StrCat("this CUDA backend does not stream host-resident KV blocks (", why, ")");
}

int64_t HostKvStreamer::StagingBytes(const Options& options) {
  return 2 * SlotsWanted(options) * static_cast<int64_t>(options.layout.BlockBytes() / options.layout.num_layers);
}

absl::StatusOr<std::unique_ptr<HostKvStreamer>> HostKvStreamer::Create(const Options& options,
                                                                       DeviceMemoryAccount& memory,
                                                                       CopyStatsBoard* stats) {
  std::unique_ptr<HostKvStreamer> streamer(new HostKvStreamer(options, stats));
  const int64_t slots = SlotsWanted(options);
  if (slots == 0) return streamer;
  // The gather reads host blocks at their host addresses (UVA); a device that cannot gets
  // no streaming, and long sequences stay refused at admission.
  int can_use_host_pointer = 0;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&can_use_host_pointer, cudaDevAttrCanUseHostPointerForRegisteredMem, 0));
  if (can_use_host_pointer == 0) return streamer;
  HostKvStreamer& s = *streamer;
  // A slot is one layer of a block: all its bytes, codes and (fp8) scales alike.
  s.slice_bytes_ = options.layout.BlockBytes() / options.layout.num_layers;
  s.gather_shape_ = DefaultHostKvGatherShape(options.sm_count);
  s.copy_batch_.Reserve(static_cast<size_t>(slots));
  for (void*& buffer : s.staged_) {
    ASSIGN_OR_RETURN(buffer, memory.Allocate(static_cast<size_t>(slots) * s.slice_bytes_, "host KV staging"));
  }
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.aux_.stream, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.aux_.fork, cudaEventDisableTiming));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.aux_.join, cudaEventDisableTiming));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.meta_ready_, cudaEventDisableTiming));
  for (int i = 0; i < 2; ++i) {
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.landed_[i], cudaEventDisableTiming));
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.free_[i], cudaEventDisableTiming));
  }
  s.slots_ = slots;
  RETURN_IF_ERROR(s.MeasureHostLink());
  RETURN_IF_ERROR(s.ChooseGather());
  return streamer;
}

HostKvStreamer::~HostKvStreamer() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (aux_.stream != nullptr) cudaStreamSynchronize(aux_.stream);
  for (cudaEvent_t e : {meta_ready_, landed_[0], landed_[1], free_[0], free_[1], aux_.fork, aux_.join}) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (aux_.stream != nullptr) cudaStreamDestroy(aux_.stream);
}

absl::Status HostKvStreamer::MeasureHostLink() {
  // Pinned host -> device over the copy engine, into staging buffer 0: the bound a step
  // streaming host-resident KV is measured against (kvtier bench W8).
  const size_t bytes = std::min<size_t>(static_cast<size_t>(slots_) * slice_bytes_, size_t{256} << 20);
  void* host = nullptr;
  CUDA_RETURN_IF_ERROR(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  std::memset(host, 0, bytes);
  cudaEvent_t start = nullptr, end = nullptr;
  cudaError_t err = cudaEventCreate(&start);
  if (err == cudaSuccess) err = cudaEventCreate(&end);
  constexpr int kRepeats = 4;
  if (err == cudaSuccess) err = cudaMemcpyAsync(staged_[0], host, bytes, cudaMemcpyHostToDevice, stream_);
  if (err == cudaSuccess) err = cudaEventRecord(start, stream_);
  for (int i = 0; i < kRepeats && err == cudaSuccess; ++i) {
    err = cudaMemcpyAsync(staged_[0], host, bytes, cudaMemcpyHostToDevice, stream_);
  }
  if (err == cudaSuccess) err = cudaEventRecord(end, stream_);
  if (err == cudaSuccess) err = cudaEventSynchronize(end);
  float ms = 0;
  if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, start, end);
  if (start != nullptr) cudaEventDestroy(start);
  if (end != nullptr) cudaEventDestroy(end);
  cudaFreeHost(host);
  CUDA_RETURN_IF_ERROR(err);
  if (ms > 0) {
    stats_->Update([&](BackendCopyStats& s) {
      s.host_link_bytes_per_second = static_cast<double>(bytes) * kRepeats / (ms * 1e-3);
    });
  }
  return absl::OkStatus();
}

void HostKvStreamer::CountStep(const StepLaunch& step) {
  if (step.host_blocks == 0) return;
  stats_->Update([&](BackendCopyStats& s) {
    ++s.host_kv_steps;
    s.host_kv_bytes += static_cast<int64_t>(step.host_blocks) * static_cast<int64_t>(options_.layout.BlockBytes());
  });
}

absl::Status HostKvStreamer::ValidateChunk(const SequenceChunk& chunk, size_t c) const {
  const HostResidentKv& host = chunk.host_kv;
  if (host.empty()) return absl::OkStatus();
  if (slots_ == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "chunk ", c, " reads ", host.num_blocks(), " host-resident KV blocks; this CUDA backend does not stream them ",
        "(cuda host_kv_stream_tokens is 0, the fast attention kernels are off, or the device cannot read mapped host "
        "memory)"));
  }
  if (host.num_blocks() > slots_) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " reads ", host.num_blocks(),
                                                   " host-resident KV blocks; the staging buffers hold ", slots_,
                                                   " (host_kv_stream_tokens)"));
  }
  if (host.first_block < 0 ||
      (host.first_block + host.num_blocks()) * options_.layout.block_tokens > chunk.start_position) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", c, " host-resident blocks [", host.first_block, ", ", host.first_block + host.num_blocks(),
        ") are not all full blocks before its first position ", chunk.start_position));
  }
  for (const void* block : host.blocks) {
    if (block == nullptr || reinterpret_cast<uintptr_t>(block) % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " names a null or unaligned host block"));
    }
  }
  return absl::OkStatus();
}

absl::Status HostKvStreamer::Gather(const StepLaunch& step, int64_t layer, int buffer) {
  HostKvGather gather;
  gather.blocks = reinterpret_cast<const uint64_t*>(options_.meta_device + step.meta.host_blocks);
  // The same addresses as the host wrote them this step (kCopyBatch reads them here).
  gather.host_blocks = reinterpret_cast<const uint64_t*>(options_.meta_host + step.meta.host_blocks);
  gather.num_slices = step.host_blocks;
  const LayerSlice slice = LayerSegments(options_.layout, layer);
  gather.segments[0] = slice.segments[0];
  gather.segments[1] = slice.segments[1];
  gather.num_segments = slice.num_segments;
  gather.staged = staged_[buffer];
  CUDA_RETURN_IF_ERROR(GatherHostKv(gather, gather_shape_, stream_, &copy_batch_, &aux_));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(landed_[buffer], stream_));
  return absl::OkStatus();
}

absl::Status HostKvStreamer::StageFirstLayer(const StepLaunch& step) {
  if (step.host_blocks == 0) return absl::OkStatus();
  // The step's metadata (host addresses) was copied on the compute stream just before.
  CUDA_RETURN_IF_ERROR(cudaEventRecord(meta_ready_, options_.compute));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, meta_ready_, 0));
  return Gather(step, 0, 0);
}

absl::StatusOr<const void*> HostKvStreamer::StageLayer(const StepLaunch& step, int64_t layer) {
  if (step.host_blocks == 0) return nullptr;
  const int64_t next = layer + 1;
  if (next < options_.layout.num_layers) {
    const int b = static_cast<int>(next % 2);
    // Buffer b last held layer - 1, whose attention recorded free_[b] already.
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, free_[b], 0));
    RETURN_IF_ERROR(Gather(step, next, b));
  }
  const int b = static_cast<int>(layer % 2);
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(options_.compute, landed_[b], 0));
  return staged_[b];
}

absl::Status HostKvStreamer::ReleaseLayer(const StepLaunch& step, int64_t layer) {
  if (step.host_blocks == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaEventRecord(free_[layer % 2], options_.compute));
  return absl::OkStatus();
}

}  // namespace kvtier::cuda
