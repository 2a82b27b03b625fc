// The device weights of one mixture-of-experts layer (Mixtral, Qwen3-MoE): the router in fp32
// (as the CPU backend holds it: the routing's choices hang on its logits) and every expert's
// three matrices stacked per layer, so one grouped GEMM reads any expert at a fixed stride.
// 16-bit in the compute dtype, or with weight_dtype fp8 E4M3 codes with one fp32 scale per
// output row (the dense fp8 weights' format, loaded by the same loaders). Plain value: the
// device memory is the DeviceMemoryAccount's.
#ifndef KVTIER_BACKEND_CUDA_MOE_WEIGHTS_H_
#define KVTIER_BACKEND_CUDA_MOE_WEIGHTS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/weight_loaders.h"
#include "model/config.h"
#include "model/tensor.h"

namespace kvtier::cuda {

struct MoeExperts {
  float* router = nullptr;     // (num_experts, hidden) fp32
  // 16-bit (compute dtype), or null with fp8 (the *_codes / *_scales below instead).
  uint16_t* gate_up = nullptr;  // (num_experts, 2 * expert_inter, hidden): per expert gate rows then up rows
  uint16_t* down = nullptr;     // (num_experts, hidden, expert_inter)
  uint8_t* gate_up_codes = nullptr;  // fp8: as gate_up
  float* gate_up_scales = nullptr;   // fp8: (num_experts, 2 * expert_inter)
  uint8_t* down_codes = nullptr;     // fp8: as down
  float* down_scales = nullptr;      // fp8: (num_experts, hidden)

  bool empty() const { return router == nullptr; }
};

// Device bytes of one MoE layer's weights.
int64_t MoeLayerBytes(const ModelConfig& config, bool fp8);
// Elements of the largest single expert matrix (the fp8 load's staging must hold one).
int64_t MoeMaxExpertMatrixElements(const ModelConfig& config);

// Allocates layer `layer`'s router and experts through `memory` and fills them from the
// checkpoint's tensors (ExpertNames): `load` in `dtype` (16-bit) or, with fp8, `load_fp8`
// staging through `fp8_staging` (MoeMaxExpertMatrixElements 16-bit elements at least).
absl::Status LoadMoeExperts(const ModelConfig& config, int64_t layer, DType dtype, bool fp8, const WeightLoader& load,
                            const Fp8WeightLoader& load_fp8, void* fp8_staging, DeviceMemoryAccount& memory,
                            MoeExperts* out);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_MOE_WEIGHTS_H_
