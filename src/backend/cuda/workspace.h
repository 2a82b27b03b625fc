// Workspace: the device buffers one step works in, allocated once when the backend is
// created (through the DeviceMemoryAccount, so inside gpu_mem_limit) and sized for the step
// capacity; a step never allocates. Activations are (tokens, width) row-major for up to
// max_tokens tokens; logits, picks and masks for up to max_chunks rows. Plain buffers, one
// thread at a time (the backend's).
#ifndef KVTIER_BACKEND_CUDA_WORKSPACE_H_
#define KVTIER_BACKEND_CUDA_WORKSPACE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/kernel_selection.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/step_capacity.h"
#include "model/config.h"

namespace kvtier::cuda {

class Workspace {
 public:
  using Raw16 = uint16_t;  // elements of the compute dtype
  // cuBLAS's workspace (cuBLASLt's too: the same stream, in turn).
  static constexpr size_t kCublasBytes = 32 << 20;

  Workspace() = default;
  ~Workspace();  // frees the pinned host ids (device memory is the account's)
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Device bytes of the workspace with `meta_capacity` bytes of step metadata.
  static int64_t Bytes(const ModelConfig& config, const StepCapacity& capacity, const KernelSelection& kernels,
                       size_t meta_capacity);
  // SkinnyGemm's workspace (0 where the skinny kernels do not run).
  static int64_t SkinnyBytes(const StepCapacity& capacity, const KernelSelection& kernels);

  // The activations, logits and picks, the generic attention's partials and cuBLAS's
  // workspace (the first buffers of the workspace, in that order).
  absl::Status AllocateActivations(const ModelConfig& config, const StepCapacity& capacity,
                                   const KernelSelection& kernels, DeviceMemoryAccount& memory);
  // fp8 weights with W8A8: the per-token E4M3 activations, `widest` codes per token.
  absl::Status AllocateFp8Activations(int64_t max_tokens, int64_t widest, DeviceMemoryAccount& memory);
  // The kernels' own scratch (SkinnyGemm, DecodeAttention; zeroed once: every launch leaves
  // it zeroed), the device copy of the step metadata and the pinned host ids.
  absl::Status AllocateKernelScratch(const ModelConfig& config, const StepCapacity& capacity,
                                     const KernelSelection& kernels, size_t meta_capacity, DeviceMemoryAccount& memory);

  float* residual = nullptr;       // (tokens, hidden) fp32 residual stream
  Raw16* normed = nullptr;         // (tokens, hidden)
  Raw16* wide = nullptr;           // (tokens, max(qkv width, 2*intermediate)): qkv, gate|up
  Raw16* q = nullptr;              // (tokens, q_dim) after norm + RoPE
  Raw16* attn = nullptr;           // (tokens, q_dim)
  Raw16* proj = nullptr;           // (tokens, hidden): o_proj / down_proj output
  Raw16* act = nullptr;            // (tokens, intermediate)
  MoeBuffers moe;                  // mixture-of-experts layers only (else empty)
  float* logits = nullptr;         // (logit rows, vocab)
  int32_t* token_ids = nullptr;    // (logit rows) greedy result
  void* argmax_scratch = nullptr;  // ArgmaxScratchBytes(logit rows)
  uint32_t* masks = nullptr;       // (logit rows, ceil(vocab / 32)) a step's grammar masks
  float* partial_out = nullptr;    // generic attention: (slots, num_heads, head_dim)
  float* partial_ml = nullptr;     // generic attention: (slots, num_heads, 2)
  void* cublas = nullptr;          // kCublasBytes
  // fp8 weights with W8A8: the activations of a projection, quantized per token.
  uint8_t* x8 = nullptr;                // (tokens, max(hidden, q_dim, intermediate)) E4M3 codes
  float* x8_scales = nullptr;           // (tokens)
  void* skinny = nullptr;               // SkinnyGemm's tile counters and partials (SkinnyBytes)
  float* decode_partial_out = nullptr;  // DecodeAttention's split partials
  float* decode_partial_ml = nullptr;
  uint32_t* decode_split_counters = nullptr;
  uint8_t* meta = nullptr;      // per-step metadata (device copy of StepPlanner's)
  int32_t* ids_host = nullptr;  // pinned (max_chunks) ids of the last step
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_WORKSPACE_H_
