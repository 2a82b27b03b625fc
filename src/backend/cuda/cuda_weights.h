// CudaWeights: the model's weights resident on one GPU, loaded once when the backend is
// created and read by every step. Projections are fused (qkv; gate|up) and held in the
// compute dtype (bf16 or fp16), or with weight_dtype fp8 as E4M3 codes with one fp32 scale
// per output channel (the CPU backend's rule, same bytes). Embeddings, lm_head and the norms
// stay 16-bit / fp32 in every case: the embedding is a gather (one row per token, no
// bandwidth to save), the lm_head sets every logit (its error is not averaged away by later
// layers), and the norms are vectors. Plain value: the device memory is the
// DeviceMemoryAccount's, freed with it.
#ifndef KVTIER_BACKEND_CUDA_CUDA_WEIGHTS_H_
#define KVTIER_BACKEND_CUDA_CUDA_WEIGHTS_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/moe_weights.h"
#include "backend/cuda/weight_loaders.h"
#include "model/config.h"
#include "model/tensor.h"

namespace kvtier::cuda {

struct CudaWeights {
  // 16-bit device arrays hold elements of the compute dtype; the forward views them as bf16
  // or f16.
  using Raw16 = uint16_t;
  // An fp8 projection: E4M3 codes (out, in) and one scale per output row.
  struct Fp8Matrix {
    uint8_t* codes = nullptr;
    float* scales = nullptr;
  };
  struct Layer {
    Raw16* qkv = nullptr;         // (q_dim + 2*kv_dim, hidden)
    float* qkv_bias = nullptr;    // (q_dim + 2*kv_dim) or null
    float* q_norm = nullptr;      // (head_dim) or null
    float* k_norm = nullptr;      // (head_dim) or null
    Raw16* o = nullptr;           // (hidden, q_dim)
    // The dense MLP; null in a mixture-of-experts layer (config.IsMoeLayer), which has `moe`.
    Raw16* gate_up = nullptr;     // (2*intermediate, hidden): gate rows then up rows
    Raw16* down = nullptr;        // (hidden, intermediate)
    // Norm weights as the kernels multiply by them: Gemma's (1 + w) is stored as its sum.
    float* input_norm = nullptr;  // (hidden)
    float* post_norm = nullptr;   // (hidden) post_attention_layernorm
    // Gemma's sandwich norms (gemma.sandwich_norms), else null: the norm before the MLP
    // (post_norm then norms the attention output before the residual add) and the one on
    // the MLP's output before its residual add.
    float* pre_ffn_norm = nullptr;   // (hidden)
    float* post_ffn_norm = nullptr;  // (hidden)
    // weight_dtype fp8: the projections above as codes + scales (their Raw16 are null).
    Fp8Matrix qkv8, o8, gate_up8, down8;
    MoeExperts moe;  // a mixture-of-experts layer's router and experts, else empty
  };

  // Device bytes Load allocates, for the fit check before it.
  static int64_t Bytes(const ModelConfig& config, bool fp8, int64_t fp8_partial_floats);
  // Largest fused projection (elements): the fp8 dequantization scratch.
  static int64_t MaxProjectionElements(const ModelConfig& config);
  // Floats of SkinnyFp8 partials the largest projection needs at its largest row count.
  static int64_t Fp8PartialFloats(const ModelConfig& config, int64_t max_tokens, int32_t sm_count);

  // Allocates every weight through `memory` and fills it from `loader` (`dtype`: the 16-bit
  // compute dtype). fp8: fp8_loader says how fp8 projections load; null quantizes on the
  // device what `loader` writes in the compute dtype.
  static absl::StatusOr<CudaWeights> Load(const ModelConfig& config, DType dtype, bool fp8, int64_t fp8_partial_floats,
                                          const WeightLoader& loader, const Fp8WeightLoader* fp8_loader,
                                          DeviceMemoryAccount& memory);

  // fp8 weights whose large steps run W8A8: the dequantization scratch served only the load
  // from here on. Waits for `stream` (the last user) before freeing it.
  absl::Status ReleaseDequantScratch(DeviceMemoryAccount& memory, cudaStream_t stream);

  bool fp8 = false;              // options.weight_dtype fp8: Layer's *8 matrices
  Raw16* fp8_scratch = nullptr;  // (MaxProjectionElements) load staging, prefill dequant
  float* fp8_partial = nullptr;  // SkinnyFp8's split partials (Fp8PartialFloats)
  Raw16* embed = nullptr;        // (vocab, hidden)
  Raw16* lm_head = nullptr;      // (vocab, hidden); == embed when tied
  float* final_norm = nullptr;   // (hidden)
  float* inv_freq = nullptr;     // (head_dim / 2) RoPE inverse frequencies (LongRoPE: the short ones)
  // LongRoPE only (QkvPostParams says how they apply); null, 0 and 1 otherwise.
  float* long_inv_freq = nullptr;  // (head_dim / 2)
  int32_t long_from_position = 0;
  float rope_scale = 1.0f;
  // Gemma 3's sliding layers rotate with their own base (gemma3_rope.local_theta), else null.
  float* local_inv_freq = nullptr;  // (head_dim / 2)
  std::vector<Layer> layers;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_CUDA_WEIGHTS_H_
