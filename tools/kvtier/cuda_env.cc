// SetCudaOptionsFromEnvironment (cuda_env.h).
#include "cuda_env.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace kvtier::cli {

kvt_status SetCudaOptionsFromEnvironment(kvt_options* options) {
  struct Switch {
    const char* variable;
    const char* key;
  };
  static constexpr Switch kSwitches[] = {
      {"KVTIER_CUDA_GRAPHS", "cuda_graphs"},
      {"KVTIER_CUDA_FAST_ATTENTION", "cuda_fast_attention"},
      {"KVTIER_CUDA_PDL", "cuda_pdl"},
      {"KVTIER_CUDA_PDL_EARLY", "cuda_pdl_early"},
      {"KVTIER_CUDA_FP8_ACTIVATIONS", "cuda_fp8_activations"},
      {"KVTIER_CUDA_PREFILL_WGMMA", "cuda_prefill_wgmma"},
      {"KVTIER_CUDA_PREFILL_FP8_ATTENTION", "cuda_prefill_fp8_attention"},
  };
  for (const Switch& s : kSwitches) {
    const char* value = std::getenv(s.variable);
    if (value == nullptr) continue;
    if (kvt_status st = kvt_options_set_int(options, s.key, value[0] == '0' ? 0 : 1); st != KVT_OK) {
      return st;
    }
  }
  if (const char* value = std::getenv("KVTIER_CUDA_SKINNY"); value != nullptr) {
    const int mode = std::atoi(value);
    if (kvt_status st = kvt_options_set_int(options, "cuda_skinny_gemm", mode <= 0 ? 0 : mode >= 3 ? 3 : mode);
        st != KVT_OK) {
      return st;
    }
  }
  // Kernel variants for A/B runs: KVTIER_CUDA_PREFILL_VARIANT=0..7, KVTIER_CUDA_DECODE_FP8_PAIR=0|1|2,
  // KVTIER_CUDA_MOE_DECODE_FUSED=0|1, KVTIER_CUDA_GEMV_BULK=0|1, KVTIER_CUDA_MOE_DOWN_BULK=0|1,
  // KVTIER_CUDA_MOE_SKINNY=0|1, KVTIER_CUDA_L2_PREFETCH=0..3.
  if (const char* value = std::getenv("KVTIER_CUDA_PREFILL_VARIANT"); value != nullptr) {
    const int variant = std::atoi(value);
    if (kvt_status st = kvt_options_set_int(options, "cuda_prefill_wgmma_variant", variant < 0 ? 0 : variant > 7 ? 7 : variant);
        st != KVT_OK) {
      return st;
    }
  }
  // KVTIER_CUDA_PREFILL_ATTENTION=own|cudnn|cudnn-every-chunk; another value is refused by
  // the setter's range.
  if (const char* value = std::getenv("KVTIER_CUDA_PREFILL_ATTENTION"); value != nullptr) {
    const std::string_view which = value;
    const int cudnn = which == "cudnn-every-chunk" ? 2 : which == "cudnn" ? 1 : which == "own" ? 0 : -1;
    if (kvt_status st = kvt_options_set_int(options, "cuda_prefill_cudnn", cudnn); st != KVT_OK) return st;
  }
  if (const char* value = std::getenv("KVTIER_CUDA_OVERLAP_ATTENTION"); value != nullptr) {
    if (kvt_status st = kvt_options_set_int(options, "cuda_overlap_attention", value[0] == '1' ? 1 : 0); st != KVT_OK) {
      return st;
    }
  }
  if (const char* value = std::getenv("KVTIER_CUDA_DECODE_FP8_PAIR"); value != nullptr) {
    const int mode = value[0] == '0' ? 0 : value[0] == '2' ? 2 : 1;
    if (kvt_status st = kvt_options_set_int(options, "cuda_decode_fp8_pair_tiles", mode); st != KVT_OK) {
      return st;
    }
  }
  if (const char* value = std::getenv("KVTIER_CUDA_MOE_DECODE_FUSED"); value != nullptr) {
    if (kvt_status st = kvt_options_set_int(options, "cuda_moe_decode_fused", value[0] == '0' ? 0 : 1); st != KVT_OK) {
      return st;
    }
  }
  if (const char* value = std::getenv("KVTIER_CUDA_GEMV_BULK"); value != nullptr) {
    if (kvt_status st = kvt_options_set_int(options, "cuda_gemv_bulk", value[0] == '0' ? 0 : 1); st != KVT_OK) {
      return st;
    }
  }
  if (const char* value = std::getenv("KVTIER_CUDA_MOE_DOWN_BULK"); value != nullptr) {
    if (kvt_status st = kvt_options_set_int(options, "cuda_moe_down_bulk", value[0] == '0' ? 0 : 1); st != KVT_OK) {
      return st;
    }
  }
  if (const char* value = std::getenv("KVTIER_CUDA_MOE_SKINNY"); value != nullptr) {
    if (kvt_status st = kvt_options_set_int(options, "cuda_moe_skinny", value[0] == '0' ? 0 : 1); st != KVT_OK) {
      return st;
    }
  }
  if (const char* value = std::getenv("KVTIER_CUDA_L2_PREFETCH"); value != nullptr) {
    if (kvt_status st = kvt_options_set_int(options, "cuda_l2_prefetch", std::clamp(std::atoi(value), 0, 3));
        st != KVT_OK) {
      return st;
    }
  }
  if (const char* value = std::getenv("KVTIER_CUDA_GEMV_PREFETCH"); value != nullptr) {
    const int pieces = std::atoi(value);
    return kvt_options_set_int(options, "cuda_gemv_prefetch", pieces >= 8 ? 8 : pieces >= 4 ? 4 : 2);
  }
  return KVT_OK;
}

}  // namespace kvtier::cli
