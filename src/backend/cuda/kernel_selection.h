// KernelSelection: which of the CUDA backend's kernels a model runs on this GPU, decided once
// when the backend is created from the device, the model's shape and CudaOptions. Plain value.
#ifndef KVTIER_BACKEND_CUDA_KERNEL_SELECTION_H_
#define KVTIER_BACKEND_CUDA_KERNEL_SELECTION_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda_options.h"
#include "backend/kv_layout.h"
#include "model/config.h"
#include "model/tensor.h"

namespace kvtier::cuda {

struct KernelSelection {
  int32_t sm_count = 0;
  // CudaOptions::skinny_gemm, 0 where the GPU is not compute capability 9.0 or the compute
  // type is not bf16 (the skinny kernels are sm_90a bf16 code).
  int32_t skinny_mode = 0;
  // The driver encodes tensor maps: the skinny kernel's TMA pipeline can run.
  bool skinny_tma = false;
  // The config runs on DecodeAttention + PrefillAttention (else the generic PagedAttention):
  // its shape fits them and CudaOptions::fast_attention allows them.
  bool fast_attention = false;
  // PrefillAttention's kernel: kWgmma where CudaOptions::prefill_wgmma allows it and the GPU
  // (compute capability 9.0), the compute type (bf16) and the shape (head_dim 128) take it,
  // whatever the scores (scale, soft-cap, sliding window).
  PrefillKernel prefill_kernel = PrefillKernel::kMma;
  int32_t prefill_tile_tokens = 0;  // PrefillAttention's query tokens per tile
  // CudaOptions::prefill_cudnn asked for and the model takes it (CudnnPrefill: fast
  // attention, bf16 compute, head_dim 64 or 128, plain scores); prefill_kernel still runs the
  // steps cuDNN cannot. Where it was asked for and does not apply, why.
  bool prefill_cudnn = false;
  std::string prefill_cudnn_refusal;
  // DecodeAttention's CTAs resident at once on the whole GPU (SMs x DecodeResidentCtasPerSm
  // of the instance this model runs): the one wave DecodeMaxSplits fills. 0 without
  // fast_attention.
  int32_t decode_wave_ctas = 0;
  // The MoE experts run prefill-sized steps on cuBLAS (moe_library.h; MoeLibraryPathSuits): set
  // by the backend, which knows the weights' format; sizes the MoE buffers' `wide`, and with
  // moe_library_fp8 (fp8 experts, W8A8 on cuBLASLt) their fp8 buffers.
  bool moe_library = false;
  bool moe_library_fp8 = false;
  // The MoE experts run prefill-sized steps on the grouped skinny kernel (moe_skinny.h): a
  // mixture-of-experts model, the skinny kernels on (skinny_mode) and CudaLaunchOptions::
  // moe_skinny asking for it. Sizes the MoE buffers' `wide` and `problems` as moe_library does.
  bool moe_skinny = false;

  // Unimplemented: kv_dtype fp8 on a shape the fast attention kernels do not take (the
  // generic kernel reads 16-bit KV only).
  static absl::StatusOr<KernelSelection> For(const ModelConfig& config, const KvLayout& layout,
                                             const CudaOptions& options, DType compute_dtype);
};

// Layer `layer`'s attention scores as the kernels take them (kernels.h): Gemma's
// query_pre_attn_scalar scale, Gemma 2's soft-cap, the layer's sliding window. Scale 0 where
// it is 1/sqrt(head_dim), so that plain models keep the wgmma prefill kernel.
AttentionScores AttentionScoresOf(const ModelConfig& config, int64_t layer);

// True when every layer's scores are q.k / sqrt(head_dim) over every earlier key: the wgmma
// prefill kernel's plain instances (others run its kScores instances) and cuDNN's graph.
bool PlainAttentionScores(const ModelConfig& config);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_KERNEL_SELECTION_H_
