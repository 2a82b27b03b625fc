// MatMul over the formats of CpuMatrix (cpu_matrix.h). Stateless; thread-safe.
#include "backend/cpu/cpu_matrix.h"

#include <algorithm>
#include <functional>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/dot16.h"
#include "backend/cpu/onednn_bf16.h"
#include "backend/cpu/quant_activations.h"
#include "backend/cpu/quant_dot.h"
#include "backend/cpu/quant_gemm.h"
#include "model/tensor.h"
#include "common/thread_pool.h"

namespace kvtier {
namespace {

// Weight rows per work item: a tile is read once and then served from cache for every row.
constexpr int64_t kRowTile = 16;

void ForRowRanges(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    if (n > 0) fn(0, n);
    return;
  }
  pool->ParallelFor(n, fn);
}

// The thread's range of tiles in one kernel call, so that the kernel's blocking over the
// activation rows (dot16.h) spans all of it.
void MatMul16(const CpuMatrix& w, const float* x, const float* bias, int64_t rows, float* out, ThreadPool* pool) {
  const Dot16Fn kernel = w.dot16->For(w.dtype);
  const uint16_t* weights = reinterpret_cast<const uint16_t*>(w.packed.data());
  const int64_t num_tiles = (w.rows + kRowTile - 1) / kRowTile;
  ForRowRanges(pool, num_tiles, [&](int64_t tile_begin, int64_t tile_end) {
    kernel(weights, w.cols, tile_begin * kRowTile, std::min(w.rows, tile_end * kRowTile), x, rows, bias, out, w.rows);
  });
}

void MatMulQuantized(const CpuMatrix& w, const float* x, const float* bias, int64_t rows, float* out,
                     ThreadPool* pool, std::vector<uint8_t>* activations) {
  const int64_t num_blocks = w.cols / DTypeBlockElements(w.dtype);
  const bool q8_0 = ActivationBlockValues(w.dtype) == kQ8_0Values;
  const size_t act_row = ActivationBlockBytes(w.dtype) * static_cast<size_t>(w.cols / ActivationBlockValues(w.dtype));
  const bool gemm = w.dtype == DType::kQ8_0 && rows >= kQ8_0GemmMinRows && HasQ8_0Gemm();
  const QuantDot4Fn dot4 = w.dtype == DType::kQ8_0 && rows >= 4 ? BestQuantDot().q8_0_x4 : nullptr;
  // After the rows: for the four-row kernel and the many-row one, the Q8_0 rows' block
  // scales as fp32.
  const size_t act_bytes = (act_row * rows + sizeof(float) - 1) / sizeof(float) * sizeof(float);
  const bool want_scales = dot4 != nullptr || gemm;
  const size_t scale_count = want_scales ? static_cast<size_t>(rows * num_blocks) : 0;
  if (activations->size() < act_bytes + scale_count * sizeof(float)) {
    activations->resize(act_bytes + scale_count * sizeof(float));
  }
  uint8_t* act = activations->data();
  float* scales = reinterpret_cast<float*>(act + act_bytes);
  ForRowRanges(pool, rows, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (q8_0) {
        QuantizeActivationsQ8_0(x + t * w.cols, w.cols, act + t * act_row,
                                want_scales ? scales + t * num_blocks : nullptr);
      } else {
        QuantizeActivationsQ8K(x + t * w.cols, w.cols, reinterpret_cast<BlockQ8K*>(act + t * act_row));
      }
    }
  });
  const QuantDotFn dot = BestQuantDot().For(w.dtype);
  const size_t row_bytes = w.RowBytes();
  const int64_t num_tiles = (w.rows + kRowTile - 1) / kRowTile;
  if (gemm) {
    ForRowRanges(pool, num_tiles, [&](int64_t tile_begin, int64_t tile_end) {
      Q8_0Gemm(w.packed.data(), row_bytes, tile_begin * kRowTile, std::min(w.rows, tile_end * kRowTile), act, act_row,
               scales, rows, num_blocks, bias, out, w.rows);
    });
    return;
  }
  ForRowRanges(pool, num_tiles, [&](int64_t tile_begin, int64_t tile_end) {
    const int64_t n_end = std::min(w.rows, tile_end * kRowTile);
    for (int64_t n0 = tile_begin * kRowTile; n0 < n_end; n0 += kRowTile) {
      const int64_t n1 = std::min(n_end, n0 + kRowTile);
      int64_t t = 0;
      for (; dot4 != nullptr && t + 4 <= rows; t += 4) {
        for (int64_t n = n0; n < n1; ++n) {
          float values[4];
          dot4(w.packed.data() + n * row_bytes, act + t * act_row, act_row, scales + t * num_blocks, num_blocks,
               num_blocks, values);
          for (int r = 0; r < 4; ++r) out[(t + r) * w.rows + n] = bias != nullptr ? values[r] + bias[n] : values[r];
        }
      }
      for (; t < rows; ++t) {
        const uint8_t* a = act + t * act_row;
        float* o = out + t * w.rows;
        for (int64_t n = n0; n < n1; ++n) {
          const float value = dot(w.packed.data() + n * row_bytes, a, num_blocks);
          o[n] = bias != nullptr ? value + bias[n] : value;
        }
      }
    }
  });
}

}  // namespace

int64_t CpuMatrix::Bytes() const {
  return static_cast<int64_t>(f32.size() * sizeof(float) + packed.size());
}

bool CpuMatrixKeeps(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 || HasQuantDot(dtype);
}

void MatMul(const CpuMatrix& w, const float* x, const float* bias, int64_t rows, float* out,
            ThreadPool* pool, std::vector<uint8_t>* activations) {
  switch (w.dtype) {
    case DType::kF32:
      MatMulTransposed(x, w.f32.data(), bias, rows, w.cols, w.rows, out, pool);
      return;
    case DType::kF16:
    case DType::kBF16:
      // Many rows on a large BF16 matrix: oneDNN's matmul where it is faster (onednn_bf16.h).
      if (UsesOnednnBf16(w, rows) && OnednnBf16MatMul(w, x, bias, rows, out, pool, activations)) return;
      MatMul16(w, x, bias, rows, out, pool);
      return;
    default:
      MatMulQuantized(w, x, bias, rows, out, pool, activations);
      return;
  }
}

}  // namespace kvtier
