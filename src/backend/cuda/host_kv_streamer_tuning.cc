// HostKvStreamer::ChooseGather: which way of moving host-resident KV (host_kv_stream.h,
// HostKvGatherKind) the backend streams with, measured on this machine's link when the
// backend is created.
//
// Why measure instead of fixing one: how fast SMs reading mapped host memory, the SMs' bulk
// copy unit or the copy engine move many scattered 64 KiB slices depends on the GPU, the
// PCIe generation and the host's IOMMU; every candidate writes the same bytes to the same
// slots, so the choice changes the speed of a step and never its results.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/host_kv_stream.h"
#include "backend/cuda/host_kv_streamer.h"
#include "common/status_macros.h"

namespace kvtier::cuda {
namespace {

std::vector<HostKvGatherShape> Candidates(int32_t sm_count) {
  std::vector<HostKvGatherShape> out;
  auto add = [&](HostKvGatherKind kind, int32_t loads, int32_t ctas) {
    HostKvGatherShape shape;
    shape.kind = kind;
    shape.loads = loads;
    shape.ctas = std::max(1, ctas);
    out.push_back(shape);
  };
  out.push_back(DefaultHostKvGatherShape(sm_count));
  add(HostKvGatherKind::kLoads, 8, sm_count);
  add(HostKvGatherKind::kLoads, 8, 2 * sm_count);
  add(HostKvGatherKind::kLoads, 16, sm_count);
  add(HostKvGatherKind::kLoads256, 8, sm_count);
  add(HostKvGatherKind::kCopyBatch, 0, 1);
  // Two segments (fp8): the copy engine on the codes, a kernel on the small scale ranges.
  add(HostKvGatherKind::kCopyCodes, 8, sm_count);
  return out;
}

std::string ShapeName(const HostKvGatherShape& shape) {
  switch (shape.kind) {
    case HostKvGatherKind::kLoads:
      return absl::StrCat("loads ", shape.loads, " x ", shape.ctas, " CTAs");
    case HostKvGatherKind::kLoads256:
      return absl::StrCat("loads+L2::256B ", shape.loads, " x ", shape.ctas, " CTAs");
    case HostKvGatherKind::kBulk:
      return absl::StrCat("bulk copy x ", shape.ctas, " CTAs");
    case HostKvGatherKind::kCopyBatch:
      return "copy engine (cudaMemcpyBatchAsync)";
    case HostKvGatherKind::kCopyCodes:
      return absl::StrCat("copy engine (codes) + loads ", shape.loads, " x ", shape.ctas, " CTAs (scales)");
    case HostKvGatherKind::kSplit:
      return absl::StrCat("copy engine ", shape.copy_percent, "% + loads ", shape.loads, " x ", shape.ctas, " CTAs");
  }
  return "?";
}

}  // namespace

absl::Status HostKvStreamer::ChooseGather() {
  // A layer of `n` scattered blocks (every other slot of a scratch pinned buffer, in a
  // shuffled order), gathered into staging buffer 0; the device copy of their addresses sits
  // in staging buffer 1 (free until the first step).
  const LayerSlice layer = LayerSegments(options_.layout, 0);
  const size_t slot_bytes = slice_bytes_;
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(slots_, (size_t{128} << 20) / slot_bytes));
  uint8_t* host = nullptr;
  CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(reinterpret_cast<void**>(&host), 2 * slot_bytes * static_cast<size_t>(n), cudaHostAllocMapped));
  std::vector<uint64_t> addresses(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    // A fixed odd stride through the slots: no two neighbours adjacent in host memory.
    const int64_t slot = (i * 7919) % n;
    addresses[static_cast<size_t>(i)] = reinterpret_cast<uint64_t>(host + 2 * slot_bytes * static_cast<size_t>(slot));
  }
  HostKvGather gather;
  gather.blocks = static_cast<const uint64_t*>(staged_[1]);
  gather.host_blocks = addresses.data();
  gather.num_slices = static_cast<int32_t>(n);
  gather.segments[0] = {0, layer.segments[0].bytes};
  gather.segments[1] = {layer.segments[0].bytes, layer.segments[1].bytes};
  gather.num_segments = layer.num_segments;
  gather.staged = staged_[0];
  cudaEvent_t start = nullptr, end = nullptr;
  cudaError_t err =
      cudaMemcpy(staged_[1], addresses.data(), addresses.size() * sizeof(uint64_t), cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaEventCreate(&start);
  if (err == cudaSuccess) err = cudaEventCreate(&end);
  double best = 0;
  HostKvGatherShape chosen = DefaultHostKvGatherShape(options_.sm_count);
  constexpr int kRepeats = 3;
  for (const HostKvGatherShape& shape : Candidates(options_.sm_count)) {
    if (err != cudaSuccess) break;
    // A candidate the launcher or driver refuses is skipped (its error is not sticky).
    cudaError_t tried = GatherHostKv(gather, shape, stream_, &copy_batch_, &aux_);
    if (tried == cudaSuccess) tried = cudaEventRecord(start, stream_);
    for (int r = 0; r < kRepeats && tried == cudaSuccess; ++r) {
      tried = GatherHostKv(gather, shape, stream_, &copy_batch_, &aux_);
    }
    if (tried == cudaSuccess) tried = cudaEventRecord(end, stream_);
    if (tried == cudaSuccess) tried = cudaEventSynchronize(end);
    float ms = 0;
    if (tried == cudaSuccess) tried = cudaEventElapsedTime(&ms, start, end);
    if (tried != cudaSuccess) {
      cudaGetLastError();
      err = cudaStreamSynchronize(stream_);  // a sticky error ends the search
      continue;
    }
    const double rate = static_cast<double>(slot_bytes) * static_cast<double>(n) * kRepeats / (ms * 1e-3);
    if (rate > best) {
      best = rate;
      chosen = shape;
    }
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (end != nullptr) cudaEventDestroy(end);
  cudaFreeHost(host);
  CUDA_RETURN_IF_ERROR(err);
  gather_shape_ = chosen;
  stats_->Update([&](BackendCopyStats& s) {
    s.host_kv_gather_bytes_per_second = best;
    s.host_kv_gather = ShapeName(chosen);
  });
  return absl::OkStatus();
}

}  // namespace kvtier::cuda
