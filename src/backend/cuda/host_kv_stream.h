// Streaming host-resident KV (docs/LONG_CONTEXT.md, "The CUDA part"): the gather kernel that
// copies one layer's slice of every host-resident block of a step into a device staging
// buffer, reading the pinned host tier through its mapped (UVA) addresses.
//
// Why a kernel and not cudaMemcpyAsync: a step's host blocks sit in scattered host slots,
// one slice of KvLayout::BlockBytes() / num_layers bytes each (64 KiB for the Llama-3-8B
// shape at 16 tokens per block); thousands of them per layer would each cost a copy call.
// One kernel launch per layer, with many 16-byte loads in flight per SM, keeps the host link
// busy on its own.
//
// A layer of a block is one or two byte ranges (segments) of the block: 16-bit KV keeps a
// layer's K and V contiguous; fp8 KV (kv_fp8.cuh) keeps the layer's codes in one range and
// its row scales in another, after every layer's codes. A staged slot holds the segments
// back to back, in order.
#ifndef KVTIER_BACKEND_CUDA_HOST_KV_STREAM_H_
#define KVTIER_BACKEND_CUDA_HOST_KV_STREAM_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier::cuda {

struct HostKvSegment {
  size_t offset = 0;  // from a block's base (multiple of 16)
  size_t bytes = 0;   // multiple of 16
};

struct HostKvGather {
  // (num_slices) host block base addresses (device-usable: pinned and mapped), in slot order:
  // in device memory for the kernels, and the same addresses in host memory for kCopyBatch.
  const uint64_t* blocks = nullptr;
  const uint64_t* host_blocks = nullptr;
  int32_t num_slices = 0;
  HostKvSegment segments[2];
  int32_t num_segments = 1;
  void* staged = nullptr;  // (num_slices, sum of segment bytes) device destination, slot order
  // Bytes from one slot to the next in `staged`; 0: the sum of the segments' bytes. (Larger
  // when a gather fills only part of each slot.)
  size_t staged_stride = 0;
};

// How the gather moves its bytes. kLoads: every thread issues `loads` 16-byte loads of host
// memory before storing them (ld.global.cs, read once); kLoads256: the same loads with the
// L2::256B fetch hint, which asks the L2 for whole 256-byte lines; kBulk: one thread per CTA
// drives the SM's bulk-copy unit (cp.async.bulk, sm_90+) host -> shared -> device in 16 KiB
// pieces, four in flight per CTA; kCopyBatch: no kernel, the copy engine moves every segment
// as one copy of a cudaMemcpyBatchAsync call (one call per layer); kSplit: the copy engine
// takes the first copy_percent of the slices while a kLoads kernel gathers the rest on a
// second stream, both on the link at once; kCopyCodes (two segments only): the copy engine
// moves every slice's first segment (fp8 codes) while a kLoads kernel gathers the second (the
// small scale ranges, which cost the copy engine far more per byte) on a second stream.
enum class HostKvGatherKind : int32_t {
  kLoads = 0,
  kLoads256 = 1,
  kBulk = 2,
  kCopyBatch = 3,
  kSplit = 4,
  kCopyCodes = 5
};

struct HostKvGatherShape {
  HostKvGatherKind kind = HostKvGatherKind::kLoads;
  int32_t ctas = 66;   // bounds the grid
  int32_t loads = 4;   // 4, 8 or 16 (kLoads, kLoads256, kSplit's kernel)
  int32_t copy_percent = 50;  // kSplit: 1..99
};

// kSplit's second stream and the events that fork it from and join it to the gather's stream.
struct HostKvAuxStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr;
  cudaEvent_t join = nullptr;
};

// The shape the backend streams with, for a device of `sm_count` SMs.
HostKvGatherShape DefaultHostKvGatherShape(int32_t sm_count);

// Host-side argument arrays of kCopyBatch, sized once (Reserve) so that enqueuing a gather
// allocates nothing.
struct HostKvCopyBatch {
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<size_t> sizes;
  void Reserve(size_t slices) {
    dsts.resize(2 * slices);
    srcs.resize(2 * slices);
    sizes.resize(2 * slices);
  }
};

// Enqueues the gather on `stream`. cudaErrorInvalidValue for segments not 16-byte aligned,
// a shape outside the above, a gather too large for 32-bit indexing, or kCopyBatch without
// host_blocks or with `batch` null or too small, kSplit or kCopyCodes without `aux`, kCopyCodes
// with one segment.
cudaError_t GatherHostKv(const HostKvGather& gather, const HostKvGatherShape& shape, cudaStream_t stream,
                         HostKvCopyBatch* batch = nullptr, const HostKvAuxStream* aux = nullptr);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_HOST_KV_STREAM_H_
