// Workspace (see workspace.h): its size and its allocation.
#include "backend/cuda/workspace.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/skinny_gemm.h"
#include "common/status_macros.h"

namespace kvtier::cuda {

Workspace::~Workspace() {
  if (ids_host != nullptr) cudaFreeHost(ids_host);
}

namespace {

// The decode partials' sizes for the largest split count any decode batch size may pick.
struct DecodeSizes {
  size_t out_floats = 1;
  size_t ml_floats = 1;
  size_t counters = 0;
};

DecodeSizes DecodeSizesFor(const ModelConfig& config, const StepCapacity& capacity, const KernelSelection& kernels) {
  const int32_t heads = static_cast<int32_t>(config.num_heads);
  const int32_t kv_heads = static_cast<int32_t>(config.num_kv_heads);
  const int32_t head_dim = static_cast<int32_t>(config.head_dim);
  DecodeSizes sizes;
  for (int32_t r = 1; r <= capacity.max_chunks; ++r) {
    const int32_t splits = DecodeMaxSplits(r, kv_heads, kernels.decode_wave_ctas);
    sizes.out_floats = std::max(sizes.out_floats, DecodePartialFloats(r, splits, heads, head_dim));
    sizes.ml_floats = std::max(sizes.ml_floats, DecodePartialMlFloats(r, splits, heads));
  }
  sizes.counters = DecodeCounterInts(static_cast<int32_t>(capacity.max_chunks), kv_heads);
  return sizes;
}

}  // namespace

int64_t Workspace::SkinnyBytes(const StepCapacity& capacity, const KernelSelection& kernels) {
  if (kernels.skinny_mode == 0) return 0;
  const int max_m = static_cast<int>(std::min<int64_t>(kSkinnyGemmMaxRows, capacity.max_tokens));
  return static_cast<int64_t>(SkinnyGemmWorkspaceBytes(max_m, kernels.sm_count));
}

int64_t Workspace::Bytes(const ModelConfig& config, const StepCapacity& capacity, const KernelSelection& kernels,
                         size_t meta_capacity) {
  const int64_t t = capacity.max_tokens, h = config.hidden_size, inter = config.intermediate_size;
  const int64_t max_chunks = capacity.max_chunks;
  const int64_t wide = std::max(config.q_dim() + 2 * config.kv_dim(), 2 * inter);
  int64_t decode_bytes = 0;
  if (kernels.fast_attention) {
    const DecodeSizes sizes = DecodeSizesFor(config, capacity, kernels);
    decode_bytes = static_cast<int64_t>((sizes.out_floats + sizes.ml_floats + sizes.counters) * 4);
  }
  // The small terms: the argmax scratch and the alignment of each buffer.
  return decode_bytes + t * h * 4 + t * h * 2 + t * wide * 2 + 2 * t * config.q_dim() * 2 + t * h * 2 + t * inter * 2 +
         max_chunks * config.vocab_size * 4 + max_chunks * 4 + max_chunks * ((config.vocab_size + 31) / 32) * 4 +
         (kernels.fast_attention ? 0 : capacity.partial_slots * config.num_heads * (config.head_dim + 2) * 4) +
         static_cast<int64_t>(kCublasBytes) + static_cast<int64_t>(meta_capacity) + 64 * 256 + 16 * 256 +
         SkinnyBytes(capacity, kernels) +
         MoeBuffers::Bytes(config, t, kernels.moe_library || kernels.moe_skinny, kernels.moe_library_fp8);
}

absl::Status Workspace::AllocateActivations(const ModelConfig& config, const StepCapacity& capacity,
                                            const KernelSelection& kernels, DeviceMemoryAccount& memory) {
  auto alloc_16 = [&](int64_t n, const char* what) -> absl::StatusOr<Raw16*> {
    ASSIGN_OR_RETURN(void* p, memory.Allocate(n * sizeof(Raw16), what));
    return static_cast<Raw16*>(p);
  };
  auto alloc_f32 = [&](int64_t n, const char* what) -> absl::StatusOr<float*> {
    ASSIGN_OR_RETURN(void* p, memory.Allocate(n * sizeof(float), what));
    return static_cast<float*>(p);
  };
  const int64_t h = config.hidden_size, inter = config.intermediate_size, q_dim = config.q_dim();
  const int64_t qkv = q_dim + 2 * config.kv_dim();
  const int64_t t = capacity.max_tokens, max_chunks = capacity.max_chunks;
  const int64_t wide_width = std::max(qkv, 2 * inter);
  ASSIGN_OR_RETURN(residual, alloc_f32(t * h, "residual"));
  ASSIGN_OR_RETURN(normed, alloc_16(t * h, "normed"));
  ASSIGN_OR_RETURN(wide, alloc_16(t * wide_width, "qkv/gate_up"));
  ASSIGN_OR_RETURN(q, alloc_16(t * q_dim, "q"));
  ASSIGN_OR_RETURN(attn, alloc_16(t * q_dim, "attention out"));
  ASSIGN_OR_RETURN(proj, alloc_16(t * h, "projection out"));
  ASSIGN_OR_RETURN(act, alloc_16(t * inter, "activation"));
  ASSIGN_OR_RETURN(moe, MoeBuffers::Allocate(config, t, memory, kernels.moe_library || kernels.moe_skinny,
                                                kernels.moe_library_fp8));
  ASSIGN_OR_RETURN(logits, alloc_f32(max_chunks * config.vocab_size, "logits"));
  ASSIGN_OR_RETURN(void* ids, memory.Allocate(max_chunks * sizeof(int32_t), "token ids"));
  token_ids = static_cast<int32_t*>(ids);
  ASSIGN_OR_RETURN(argmax_scratch,
                   memory.Allocate(ArgmaxScratchBytes(static_cast<int>(max_chunks)), "argmax partials"));
  ASSIGN_OR_RETURN(void* mask_words,
                   memory.Allocate(max_chunks * ((config.vocab_size + 31) / 32) * 4, "grammar masks"));
  masks = static_cast<uint32_t*>(mask_words);
  if (!kernels.fast_attention) {  // the generic attention's split partials
    ASSIGN_OR_RETURN(partial_out, alloc_f32(capacity.partial_slots * config.num_heads * config.head_dim, "partials"));
    ASSIGN_OR_RETURN(partial_ml, alloc_f32(capacity.partial_slots * config.num_heads * 2, "partials"));
  }
  ASSIGN_OR_RETURN(cublas, memory.Allocate(kCublasBytes, "cublas workspace"));
  return absl::OkStatus();
}

absl::Status Workspace::AllocateFp8Activations(int64_t max_tokens, int64_t widest, DeviceMemoryAccount& memory) {
  ASSIGN_OR_RETURN(void* codes, memory.Allocate(static_cast<size_t>(max_tokens * widest), "fp8 activations"));
  x8 = static_cast<uint8_t*>(codes);
  ASSIGN_OR_RETURN(void* scales,
                   memory.Allocate(static_cast<size_t>(max_tokens) * sizeof(float), "fp8 activation scales"));
  x8_scales = static_cast<float*>(scales);
  return absl::OkStatus();
}

absl::Status Workspace::AllocateKernelScratch(const ModelConfig& config, const StepCapacity& capacity,
                                              const KernelSelection& kernels, size_t meta_capacity,
                                              DeviceMemoryAccount& memory) {
  const int64_t max_chunks = capacity.max_chunks;
  if (kernels.skinny_mode != 0) {
    // Tile counters: zero once; every SkinnyGemm leaves them at zero (graph replays too).
    const int64_t skinny_bytes = SkinnyBytes(capacity, kernels);
    ASSIGN_OR_RETURN(skinny, memory.Allocate(skinny_bytes, "skinny projection workspace"));
    CUDA_RETURN_IF_ERROR(cudaMemset(skinny, 0, skinny_bytes));
    CUDA_RETURN_IF_ERROR(SkinnyGemmInit());
  }
  if (kernels.fast_attention) {
    const DecodeSizes sizes = DecodeSizesFor(config, capacity, kernels);
    const size_t out_floats = sizes.out_floats, ml_floats = sizes.ml_floats;
    ASSIGN_OR_RETURN(void* out, memory.Allocate(out_floats * sizeof(float), "decode partials"));
    decode_partial_out = static_cast<float*>(out);
    ASSIGN_OR_RETURN(void* ml, memory.Allocate(ml_floats * sizeof(float), "decode partials"));
    decode_partial_ml = static_cast<float*>(ml);
    // Split counters: zero once; every launch leaves them at zero (graph replays too).
    const size_t counters = sizes.counters;
    ASSIGN_OR_RETURN(void* c, memory.Allocate(counters * sizeof(uint32_t), "decode split counters"));
    decode_split_counters = static_cast<uint32_t*>(c);
    CUDA_RETURN_IF_ERROR(cudaMemset(decode_split_counters, 0, counters * sizeof(uint32_t)));
  }
  ASSIGN_OR_RETURN(void* m, memory.Allocate(meta_capacity, "step metadata"));
  meta = static_cast<uint8_t*>(m);
  CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(reinterpret_cast<void**>(&ids_host), max_chunks * sizeof(int32_t), cudaHostAllocDefault));
  return absl::OkStatus();
}

}  // namespace kvtier::cuda
