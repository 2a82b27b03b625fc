// FP8 weights: the scales of one E4M3 weight matrix on a uniform grid (per tensor, per output
// channel or per block are all "one scale per block_rows x block_cols tile"), turning codes
// into values, and the per-output-channel quantization kvtier applies at load time.
// Value types and pure functions; thread-safe.
#ifndef KVTIER_MODEL_FP8_WEIGHTS_H_
#define KVTIER_MODEL_FP8_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tensor.h"
#include "model/weight_quantization.h"

namespace kvtier {

// Value of element (r, c) of a [rows, cols] weight = code(r, c) * values[(r / block_rows) *
// grid_cols + c / block_cols]. Per tensor: one block covering the matrix; per channel:
// block_rows 1, block_cols cols.
struct Fp8Scales {
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 1, block_cols = 1;
  int64_t grid_rows = 0, grid_cols = 0;
  std::vector<float> values;  // (grid_rows, grid_cols)

  float At(int64_t r, int64_t c) const { return values[(r / block_rows) * grid_cols + c / block_cols]; }
};

// The scales of `weight` (F8_E4M3, 2-D) read from `scale` (F32/BF16/F16; nullptr when the
// checkpoint lacks it) as `quantization` lays them out. NotFound naming the scale tensor
// when missing; InvalidArgument naming it for a wrong shape or dtype, a non-finite or
// negative scale, or a weight that is not 2-D; FailedPrecondition when the checkpoint has
// no fp8 quantization_config.
absl::StatusOr<Fp8Scales> ReadFp8Scales(const WeightQuantization& quantization, const TensorView& weight,
                                        const TensorView* scale, const std::string& scale_name);

// out[i] = code[i] * scale (rows x cols floats).
void DequantizeFp8(const TensorView& weight, const Fp8Scales& scales, float* out);
// The same for rows [row_begin, row_end) only, into out's rows of the same index.
void DequantizeFp8Rows(const TensorView& weight, const Fp8Scales& scales, int64_t row_begin, int64_t row_end,
                       float* out);
// Row r alone into `row` (cols floats).
void DequantizeFp8Row(const TensorView& weight, const Fp8Scales& scales, int64_t r, float* row);

// Per-output-channel quantization (kvtier's weight_dtype fp8 for 16/32-bit checkpoints):
// scale[r] = max_c |w(r, c)| / 448 (1 when the row is all zeros), code = e4m3(w / scale),
// saturating. The same rule as scripts/fp8_reference.py, which checks it with torch.
void QuantizeRowsFp8(const float* weights, int64_t rows, int64_t cols, uint8_t* codes, float* scales);

// An fp8 checkpoint's rows [row_begin, row_end) in kvtier's per-channel format: DequantizeFp8Rows
// then QuantizeRowsFp8, the same operations and so the same bytes, a row at a time (no matrix
// of floats in between). codes and out_scales are the whole matrix's (rows x cols, rows).
void RequantizeFp8Rows(const TensorView& weight, const Fp8Scales& scales, int64_t row_begin, int64_t row_end,
                       uint8_t* codes, float* out_scales);

}  // namespace kvtier

#endif  // KVTIER_MODEL_FP8_WEIGHTS_H_
