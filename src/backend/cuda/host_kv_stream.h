// Streaming host-resident KV (docs/LONG_CONTEXT.md, "The CUDA part"): the gather kernel that
// copies one layer's slice of every host-resident block of a step into a device staging
// buffer, reading the pinned host tier through its mapped (UVA) addresses.
//
// Why a kernel and not cudaMemcpyAsync: a step's host blocks sit in scattered host slots,
// one slice of KvLayout::BlockBytes() / num_layers bytes each (64 KiB for the Llama-3-8B
// shape at 16 tokens per block); thousands of them per layer would each cost a copy call.
// One kernel launch per layer, with many 16-byte loads in flight per SM, keeps the host link
// busy on its own.
#ifndef KVTIER_BACKEND_CUDA_HOST_KV_STREAM_H_
#define KVTIER_BACKEND_CUDA_HOST_KV_STREAM_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kvtier::cuda {

struct HostKvGather {
  // (num_slices) host block base addresses (device-usable: pinned and mapped), in slot order.
  const uint64_t* blocks = nullptr;
  int32_t num_slices = 0;
  size_t slice_bytes = 0;   // bytes of one layer of a block (multiple of 16)
  size_t layer_offset = 0;  // bytes from a block's base to this layer's slice
  void* staged = nullptr;   // (num_slices, slice_bytes) device destination, slot order
};

// Enqueues the gather on `stream`; `ctas` bounds the grid (a few per SM keep enough bytes
// in flight to fill the link while leaving the SMs to the compute stream).
cudaError_t GatherHostKv(const HostKvGather& gather, int32_t ctas, cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_HOST_KV_STREAM_H_
