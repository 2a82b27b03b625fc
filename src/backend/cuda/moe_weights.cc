// MoeExperts (see moe_weights.h): sizes and the load.
#include "backend/cuda/moe_weights.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"

namespace kvtier::cuda {

int64_t MoeLayerBytes(const ModelConfig& c, bool fp8) {
  const int64_t e = c.moe.num_experts, h = c.hidden_size, inter = c.moe.expert_intermediate_size;
  const int64_t elements = e * 3 * inter * h;
  const int64_t experts = fp8 ? elements + 4 * e * (2 * inter + h) : 2 * elements;
  return 4 * e * h + experts;
}

int64_t MoeMaxExpertMatrixElements(const ModelConfig& c) {
  return c.moe.num_experts == 0 ? 0 : c.moe.expert_intermediate_size * c.hidden_size;
}

absl::Status LoadMoeExperts(const ModelConfig& c, int64_t layer, DType dtype, bool fp8, const WeightLoader& load,
                            const Fp8WeightLoader& load_fp8, void* fp8_staging, DeviceMemoryAccount& memory,
                            MoeExperts* out) {
  const int64_t num_experts = c.moe.num_experts, h = c.hidden_size, inter = c.moe.expert_intermediate_size;
  if (num_experts <= 0 || inter <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " is not a mixture-of-experts layer"));
  }
  const ExpertTensorNames names = ExpertNames(c.architecture);
  const std::string prefix = absl::StrCat("model.layers.", layer, ".");
  ASSIGN_OR_RETURN(void* router, memory.Allocate(num_experts * h * sizeof(float), "router"));
  out->router = static_cast<float*>(router);
  RETURN_IF_ERROR(load(prefix + names.router, num_experts * h, out->router, DType::kF32));

  // One (rows, cols) expert matrix per part, stacked per expert: gate, up (the gate|up
  // matrix) and down.
  struct Part {
    const char* name;
    int64_t rows, cols;
    int64_t row_in_matrix;  // where the part starts in its expert's matrix
    bool down;
  };
  const Part parts[] = {
      {names.gate, inter, h, 0, false}, {names.up, inter, h, inter, false}, {names.down, h, inter, 0, true}};
  const int64_t gate_up_rows = 2 * inter;
  const int64_t gate_up_elements = num_experts * gate_up_rows * h, down_elements = num_experts * h * inter;
  if (fp8) {
    ASSIGN_OR_RETURN(void* gu, memory.Allocate(gate_up_elements, "expert gate/up weights"));
    out->gate_up_codes = static_cast<uint8_t*>(gu);
    ASSIGN_OR_RETURN(void* gus, memory.Allocate(num_experts * gate_up_rows * sizeof(float), "expert gate/up scales"));
    out->gate_up_scales = static_cast<float*>(gus);
    ASSIGN_OR_RETURN(void* d, memory.Allocate(down_elements, "expert down weights"));
    out->down_codes = static_cast<uint8_t*>(d);
    ASSIGN_OR_RETURN(void* ds, memory.Allocate(num_experts * h * sizeof(float), "expert down scales"));
    out->down_scales = static_cast<float*>(ds);
  } else {
    ASSIGN_OR_RETURN(void* gu, memory.Allocate(gate_up_elements * 2, "expert gate/up weights"));
    out->gate_up = static_cast<uint16_t*>(gu);
    ASSIGN_OR_RETURN(void* d, memory.Allocate(down_elements * 2, "expert down weights"));
    out->down = static_cast<uint16_t*>(d);
  }
  for (int64_t e = 0; e < num_experts; ++e) {
    const std::string expert = absl::StrCat(prefix, names.experts, e, ".");
    for (const Part& part : parts) {
      const int64_t matrix_rows = part.down ? h : gate_up_rows;
      const int64_t first_row = e * matrix_rows + part.row_in_matrix;  // in the stacked matrix
      const std::string name = expert + part.name;
      if (fp8) {
        uint8_t* codes = (part.down ? out->down_codes : out->gate_up_codes) + first_row * part.cols;
        float* scales = (part.down ? out->down_scales : out->gate_up_scales) + first_row;
        RETURN_IF_ERROR(load_fp8(name, part.rows, part.cols, codes, scales, fp8_staging));
      } else {
        uint16_t* dst = (part.down ? out->down : out->gate_up) + first_row * part.cols;
        RETURN_IF_ERROR(load(name, part.rows * part.cols, dst, dtype));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier::cuda
