// FP8 weight scales, dequantization and per-channel quantization (fp8_weights.h).
// Pure functions; thread-safe.
#include "model/fp8_weights.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fp8_e4m3.h"

namespace kvtier {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Every code's value (Fp8E4M3ToFloat, exact), looked up instead of decoded per element.
const float* Fp8Values() {
  static const std::array<float, 256> values = [] {
    std::array<float, 256> v{};
    for (int code = 0; code < 256; ++code) {
      v[static_cast<size_t>(code)] = Fp8E4M3ToFloat(static_cast<uint8_t>(code));
    }
    return v;
  }();
  return values.data();
}

// Row r's values: code times its block's scale, a block of columns at a time (the same product
// as Fp8Scales::At per element).
void DequantizeRow(const uint8_t* codes, const Fp8Scales& scales, int64_t r, const float* lut, float* row) {
  const float* block_scales = scales.values.data() + (r / scales.block_rows) * scales.grid_cols;
  for (int64_t c0 = 0, b = 0; c0 < scales.cols; c0 += scales.block_cols, ++b) {
    const float scale = block_scales[b];
    const int64_t c1 = std::min(scales.cols, c0 + scales.block_cols);
    for (int64_t c = c0; c < c1; ++c) row[c] = lut[codes[c]] * scale;
  }
}

}  // namespace

absl::StatusOr<Fp8Scales> ReadFp8Scales(const WeightQuantization& quantization, const TensorView& weight,
                                        const TensorView* scale, const std::string& scale_name) {
  if (!quantization.quantized()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor '", weight.name, "' is F8_E4M3 but config.json has no fp8 quantization_config saying how it is scaled"));
  }
  if (weight.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8 tensor '", weight.name, "' has shape ", ShapeString(weight.shape), "; only matrices are read"));
  }
  if (scale == nullptr) {
    return absl::NotFoundError(absl::StrCat("fp8 tensor '", weight.name, "' has no scale tensor '", scale_name, "'"));
  }
  if (scale->dtype == DType::kF8E4M3) {
    return absl::InvalidArgumentError(absl::StrCat("scale tensor '", scale_name, "' must be F32, BF16 or F16"));
  }
  Fp8Scales s;
  s.rows = weight.shape[0];
  s.cols = weight.shape[1];
  std::vector<int64_t> want;
  switch (quantization.format) {
    case WeightQuantizationFormat::kFp8Blockwise:
      s.block_rows = quantization.block_rows;
      s.block_cols = quantization.block_cols;
      want = {CeilDiv(s.rows, s.block_rows), CeilDiv(s.cols, s.block_cols)};
      break;
    case WeightQuantizationFormat::kCompressedTensorsFloat:
      if (quantization.per_channel) {
        s.block_rows = 1;
        s.block_cols = s.cols;
        want = {s.rows, 1};
        break;
      }
      [[fallthrough]];
    default:
      s.block_rows = s.rows;
      s.block_cols = s.cols;
      want = {1};
      break;
  }
  s.grid_rows = CeilDiv(s.rows, s.block_rows);
  s.grid_cols = CeilDiv(s.cols, s.block_cols);
  // Scalars are written as shape [] or [1]; per-channel scales as [rows, 1] or [rows].
  const bool matches = scale->shape == want || (want == std::vector<int64_t>{1} && scale->shape.empty()) ||
                       (want.size() == 2 && want[1] == 1 && want[0] != 1 && scale->shape == std::vector<int64_t>{want[0]});
  if (!matches || scale->num_elements() != s.grid_rows * s.grid_cols) {
    return absl::InvalidArgumentError(absl::StrCat("scale tensor '", scale_name, "' has shape ",
                                                   ShapeString(scale->shape), ", expected ", ShapeString(want),
                                                   " for weight ", ShapeString(weight.shape), " (",
                                                   quantization.Describe(), ")"));
  }
  ToFloat32(*scale, &s.values);
  for (float v : s.values) {
    if (!std::isfinite(v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("scale tensor '", scale_name, "' holds ", v,
                                                     ": scales must be finite and non-negative"));
    }
  }
  return s;
}

void DequantizeFp8(const TensorView& weight, const Fp8Scales& scales, float* out) {
  DequantizeFp8Rows(weight, scales, 0, scales.rows, out);
}

void DequantizeFp8Rows(const TensorView& weight, const Fp8Scales& scales, int64_t row_begin, int64_t row_end,
                       float* out) {
  const float* lut = Fp8Values();
  for (int64_t r = row_begin; r < row_end; ++r) {
    DequantizeRow(weight.data + r * scales.cols, scales, r, lut, out + r * scales.cols);
  }
}

void DequantizeFp8Row(const TensorView& weight, const Fp8Scales& scales, int64_t r, float* row) {
  DequantizeRow(weight.data + r * scales.cols, scales, r, Fp8Values(), row);
}

void RequantizeFp8Rows(const TensorView& weight, const Fp8Scales& scales, int64_t row_begin, int64_t row_end,
                       uint8_t* codes, float* out_scales) {
  const float* lut = Fp8Values();
  std::vector<float> row(static_cast<size_t>(scales.cols));
  for (int64_t r = row_begin; r < row_end; ++r) {
    DequantizeRow(weight.data + r * scales.cols, scales, r, lut, row.data());
    QuantizeRowsFp8(row.data(), 1, scales.cols, codes + r * scales.cols, out_scales + r);
  }
}

void QuantizeRowsFp8(const float* weights, int64_t rows, int64_t cols, uint8_t* codes, float* scales) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = weights + r * cols;
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::fmax(amax, std::fabs(row[c]));
    const float scale = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
    scales[r] = scale;
    for (int64_t c = 0; c < cols; ++c) codes[r * cols + c] = FloatToFp8E4M3(row[c] / scale);
  }
}

}  // namespace kvtier
