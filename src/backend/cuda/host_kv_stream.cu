// GatherHostKv (see host_kv_stream.h).
//
// kLoads / kLoads256: each thread issues `loads` independent 16-byte loads of host memory
// before any of their stores, so a CTA of 256 threads keeps loads x 4 KiB of host reads in
// flight; host memory latency over PCIe (~1-2 us) times the link's bandwidth is far less than
// a few such CTAs per SM. kBulk hands the reads to the SM's bulk-copy unit instead, whose
// requests do not depend on how many warps are resident.
#include "backend/cuda/host_kv_stream.h"

#include <algorithm>

#include "backend/cuda/mbarrier.cuh"

namespace kvtier::cuda {
namespace {

constexpr int kThreads = 256;

// One slice's 16-byte vector `within` (of the slot layout) -> its byte offset in the block.
struct SliceMap {
  uint32_t seg0_vectors = 0;  // vectors of segment 0
  uint32_t vectors = 0;       // of the whole slice
  int64_t seg0_offset = 0;
  int64_t seg1_shift = 0;     // segment 1's offset minus segment 0's bytes
  __device__ __forceinline__ int64_t Offset(uint32_t within) const {
    return (within < seg0_vectors ? seg0_offset : seg1_shift) + 16 * static_cast<int64_t>(within);
  }
};

__host__ __device__ inline SliceMap MapOf(const HostKvGather& g) {
  SliceMap m;
  m.seg0_vectors = static_cast<uint32_t>(g.segments[0].bytes / 16);
  const uint32_t seg1 = g.num_segments > 1 ? static_cast<uint32_t>(g.segments[1].bytes / 16) : 0;
  m.vectors = m.seg0_vectors + seg1;
  m.seg0_offset = static_cast<int64_t>(g.segments[0].offset);
  m.seg1_shift = static_cast<int64_t>(g.segments[1].offset) - static_cast<int64_t>(g.segments[0].bytes);
  return m;
}

template <bool kL2Hint>
__device__ __forceinline__ uint4 LoadHost16(const uint8_t* p) {
  if constexpr (kL2Hint) {
    uint4 v;
    asm volatile("ld.global.cs.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
  } else {
    return __ldcs(reinterpret_cast<const uint4*>(p));  // read once: bypass L1
  }
}

template <int kLoads, bool kL2Hint>
__global__ void __launch_bounds__(kThreads) GatherHostKvLoadsKernel(HostKvGather g) {
  // 32-bit index arithmetic (the launcher checks the total fits): a 64-bit division per
  // 16 bytes would cost more than the copy.
  const SliceMap map = MapOf(g);
  const uint32_t total = map.vectors * static_cast<uint32_t>(g.num_slices);
  const uint32_t stride = gridDim.x * kThreads * kLoads;
  const uint32_t dst_stride = g.staged_stride == 0 ? map.vectors : static_cast<uint32_t>(g.staged_stride / 16);
  uint4* dst = static_cast<uint4*>(g.staged);
  for (uint32_t base = blockIdx.x * kThreads * kLoads + threadIdx.x; base < total; base += stride) {
    uint4 v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const uint32_t i = base + static_cast<uint32_t>(u) * kThreads;
      if (i < total) {
        const uint32_t slice = i / map.vectors, within = i - slice * map.vectors;
        v[u] = LoadHost16<kL2Hint>(reinterpret_cast<const uint8_t*>(g.blocks[slice]) + map.Offset(within));
      }
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const uint32_t i = base + static_cast<uint32_t>(u) * kThreads;
      if (i < total) {
        const uint32_t slice = i / map.vectors, within = i - slice * map.vectors;
        dst[static_cast<size_t>(slice) * dst_stride + within] = v[u];
      }
    }
  }
}

// kBulk: pieces of at most kPiece bytes (a segment's tail may be shorter), kStages buffers
// of shared memory per CTA.
constexpr uint32_t kPiece = 8192;
constexpr int kStages = 4;

struct Piece {
  const uint8_t* src;
  uint8_t* dst;
  uint32_t bytes;
};

__device__ __forceinline__ Piece PieceOf(const HostKvGather& g, uint32_t item) {
  const uint32_t seg0_pieces = static_cast<uint32_t>((g.segments[0].bytes + kPiece - 1) / kPiece);
  const uint32_t seg1_pieces =
      g.num_segments > 1 ? static_cast<uint32_t>((g.segments[1].bytes + kPiece - 1) / kPiece) : 0;
  const uint32_t per_slice = seg0_pieces + seg1_pieces;
  const uint32_t slice = item / per_slice, u = item - slice * per_slice;
  const int seg = u < seg0_pieces ? 0 : 1;
  const size_t within = static_cast<size_t>(seg == 0 ? u : u - seg0_pieces) * kPiece;
  const size_t slot_bytes =
      g.staged_stride != 0 ? g.staged_stride : g.segments[0].bytes + (g.num_segments > 1 ? g.segments[1].bytes : 0);
  Piece p;
  p.src = reinterpret_cast<const uint8_t*>(g.blocks[slice]) + g.segments[seg].offset + within;
  p.dst = static_cast<uint8_t*>(g.staged) + slice * slot_bytes + (seg == 0 ? 0 : g.segments[0].bytes) + within;
  p.bytes = static_cast<uint32_t>(min(static_cast<size_t>(kPiece), g.segments[seg].bytes - within));
  return p;
}

__global__ void __launch_bounds__(32) GatherHostKvBulkKernel(HostKvGather g, uint32_t total) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ alignas(128) uint8_t buffer[kStages][kPiece];
  __shared__ alignas(8) uint64_t landed[kStages];
  if (threadIdx.x != 0) return;
  const uint32_t first = blockIdx.x;
  const uint32_t n = total > first ? (total - first + gridDim.x - 1) / gridDim.x : 0;
  uint32_t bar[kStages], buf[kStages];
  for (int s = 0; s < kStages; ++s) {
    bar[s] = static_cast<uint32_t>(__cvta_generic_to_shared(&landed[s]));
    buf[s] = static_cast<uint32_t>(__cvta_generic_to_shared(&buffer[s][0]));
    MbarInit(bar[s], 1);
  }
  MbarInitFence();
  auto issue = [&](uint32_t k) {
    const Piece p = PieceOf(g, first + k * gridDim.x);
    const int s = static_cast<int>(k % kStages);
    MbarExpectTx(bar[s], p.bytes);
    BulkLoad(buf[s], p.src, p.bytes, bar[s]);
  };
  for (uint32_t k = 0; k < n && k < static_cast<uint32_t>(kStages); ++k) issue(k);
  for (uint32_t k = 0; k < n; ++k) {
    const int s = static_cast<int>(k % kStages);
    const uint32_t parity = (k / kStages) & 1u;
    MbarWait(bar[s], parity);
    const Piece p = PieceOf(g, first + k * gridDim.x);
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(p.dst), "r"(buf[s]),
                 "r"(p.bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if (k + kStages < n) {
      // Buffer s is refilled only once the store just issued has read it.
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      issue(k + kStages);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

template <int kLoads>
cudaError_t LaunchLoads(const HostKvGather& g, const HostKvGatherShape& shape, size_t vectors, cudaStream_t stream) {
  const size_t per_cta = static_cast<size_t>(kThreads) * kLoads;
  const size_t needed = (vectors + per_cta - 1) / per_cta;
  const int grid = static_cast<int>(std::max<size_t>(1, std::min<size_t>(needed, static_cast<size_t>(shape.ctas))));
  if (shape.kind == HostKvGatherKind::kLoads256) {
    GatherHostKvLoadsKernel<kLoads, true><<<grid, kThreads, 0, stream>>>(g);
  } else {
    GatherHostKvLoadsKernel<kLoads, false><<<grid, kThreads, 0, stream>>>(g);
  }
  return cudaGetLastError();
}

cudaError_t CopyBatch(const HostKvGather& g, size_t slot_bytes, HostKvCopyBatch* batch, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(g.num_slices) * static_cast<size_t>(g.num_segments);
  if (g.host_blocks == nullptr || batch == nullptr || batch->dsts.size() < n) return cudaErrorInvalidValue;
  size_t c = 0;
  for (int32_t s = 0; s < g.num_slices; ++s) {
    size_t within = 0;
    for (int seg = 0; seg < g.num_segments; ++seg, ++c) {
      batch->dsts[c] = static_cast<uint8_t*>(g.staged) + static_cast<size_t>(s) * slot_bytes + within;
      batch->srcs[c] = reinterpret_cast<const uint8_t*>(g.host_blocks[s]) + g.segments[seg].offset;
      batch->sizes[c] = g.segments[seg].bytes;
      within += g.segments[seg].bytes;
    }
  }
  // The host tier is pinned; its bytes are final before the step is enqueued.
  cudaMemcpyAttributes attributes{};
  attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attributes.flags = cudaMemcpyFlagPreferOverlapWithCompute;  // the layer's compute runs beside it
  size_t first = 0;
  return cudaMemcpyBatchAsync(batch->dsts.data(), batch->srcs.data(), batch->sizes.data(), n, &attributes, &first, 1,
                              stream);
}

}  // namespace

HostKvGatherShape DefaultHostKvGatherShape(int32_t sm_count) {
  HostKvGatherShape shape;
  shape.kind = HostKvGatherKind::kLoads;
  shape.loads = 4;
  shape.ctas = std::max(16, sm_count / 2);
  return shape;
}

cudaError_t GatherHostKv(const HostKvGather& gather, const HostKvGatherShape& shape, cudaStream_t stream,
                         HostKvCopyBatch* batch, const HostKvAuxStream* aux) {
  if (gather.num_slices <= 0) return cudaSuccess;
  if (gather.num_segments < 1 || gather.num_segments > 2 || shape.ctas < 1) return cudaErrorInvalidValue;
  size_t slot_bytes = 0;
  for (int s = 0; s < gather.num_segments; ++s) {
    if (gather.segments[s].bytes % 16 != 0 || gather.segments[s].offset % 16 != 0) return cudaErrorInvalidValue;
    slot_bytes += gather.segments[s].bytes;
  }
  if (slot_bytes == 0 || gather.staged_stride % 16 != 0 || (gather.staged_stride != 0 && gather.staged_stride < slot_bytes)) {
    return cudaErrorInvalidValue;
  }
  const size_t stride = gather.staged_stride != 0 ? gather.staged_stride : slot_bytes;
  const size_t vectors = slot_bytes / 16 * static_cast<size_t>(gather.num_slices);
  if (vectors + static_cast<size_t>(kThreads) * 16 * 2 >= (size_t{1} << 31)) return cudaErrorInvalidValue;
  switch (shape.kind) {
    case HostKvGatherKind::kLoads:
    case HostKvGatherKind::kLoads256:
      if (shape.loads == 4) return LaunchLoads<4>(gather, shape, vectors, stream);
      if (shape.loads == 8) return LaunchLoads<8>(gather, shape, vectors, stream);
      if (shape.loads == 16) return LaunchLoads<16>(gather, shape, vectors, stream);
      return cudaErrorInvalidValue;
    case HostKvGatherKind::kCopyBatch:
      return CopyBatch(gather, stride, batch, stream);
    case HostKvGatherKind::kCopyCodes: {
      if (aux == nullptr || gather.num_segments != 2) return cudaErrorInvalidValue;
      HostKvGather codes = gather, scales = gather;
      codes.num_segments = 1;
      codes.staged_stride = stride;
      scales.segments[0] = gather.segments[1];
      scales.num_segments = 1;
      scales.staged = static_cast<uint8_t*>(gather.staged) + gather.segments[0].bytes;
      scales.staged_stride = stride;
      HostKvGatherShape kernel = shape;
      kernel.kind = HostKvGatherKind::kLoads;
      cudaError_t err = cudaEventRecord(aux->fork, stream);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(aux->stream, aux->fork, 0);
      if (err == cudaSuccess) err = GatherHostKv(scales, kernel, aux->stream);
      if (err == cudaSuccess) err = CopyBatch(codes, stride, batch, stream);
      if (err == cudaSuccess) err = cudaEventRecord(aux->join, aux->stream);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(stream, aux->join, 0);
      return err;
    }
    case HostKvGatherKind::kSplit: {
      if (aux == nullptr || shape.copy_percent < 1 || shape.copy_percent > 99) return cudaErrorInvalidValue;
      const int32_t by_copy = static_cast<int32_t>(static_cast<int64_t>(gather.num_slices) * shape.copy_percent / 100);
      HostKvGather copied = gather, loaded = gather;
      copied.num_slices = by_copy;
      loaded.num_slices = gather.num_slices - by_copy;
      loaded.blocks = gather.blocks + by_copy;
      loaded.host_blocks = gather.host_blocks == nullptr ? nullptr : gather.host_blocks + by_copy;
      loaded.staged = static_cast<uint8_t*>(gather.staged) + static_cast<size_t>(by_copy) * stride;
      HostKvGatherShape kernel = shape;
      kernel.kind = HostKvGatherKind::kLoads;
      cudaError_t err = cudaEventRecord(aux->fork, stream);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(aux->stream, aux->fork, 0);
      if (err == cudaSuccess) err = GatherHostKv(loaded, kernel, aux->stream);
      if (err == cudaSuccess && by_copy > 0) err = CopyBatch(copied, stride, batch, stream);
      if (err == cudaSuccess) err = cudaEventRecord(aux->join, aux->stream);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(stream, aux->join, 0);
      return err;
    }
    case HostKvGatherKind::kBulk: {
      const size_t pieces_per_slice = (gather.segments[0].bytes + kPiece - 1) / kPiece +
                                      (gather.num_segments > 1 ? (gather.segments[1].bytes + kPiece - 1) / kPiece : 0);
      const size_t total = pieces_per_slice * static_cast<size_t>(gather.num_slices);
      const int grid = static_cast<int>(std::max<size_t>(1, std::min<size_t>(total, static_cast<size_t>(shape.ctas))));
      GatherHostKvBulkKernel<<<grid, 32, 0, stream>>>(gather, static_cast<uint32_t>(total));
      return cudaGetLastError();
    }
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvtier::cuda
