// CpuMatrix: one weight matrix of the CPU backend, in the format its products are computed
// from, and MatMul, the product of activation rows with it.
//   kF32: the reference arithmetic (cpu_ops.h MatMulTransposed).
//   kF16, kBF16: kept in 16 bits, products by the kernel set of dot16.h the matrix names:
//     an exact set widens them in registers and sums in the reference's order, so results
//     equal the reference's bit for bit; the best set, where the processor has AVX-512
//     BF16, takes BF16 through bf16 dot products with the activations rounded to bf16.
//   Block types with a kernel (quant_dot.h HasQuantDot): kept as the file's blocks; the
//     activation rows are quantized per block as llama.cpp does (quant_activations.h) and
//     products are integer dot products (quant_dot.h).
// Immutable once loaded; thread-safe to read.
#ifndef KVTIER_BACKEND_CPU_CPU_MATRIX_H_
#define KVTIER_BACKEND_CPU_CPU_MATRIX_H_

#include <cstdint>
#include <vector>

#include "backend/cpu/dot16.h"
#include "model/dtype.h"

namespace kvtier {

class ThreadPool;

// HF Linear layout (rows = out_features, cols = in_features), row-major.
struct CpuMatrix {
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> f32;       // kF32: rows x cols
  std::vector<uint8_t> packed;  // any other dtype: rows x RowBytes()
  // kF16, kBF16: the kernels MatMul computes with (the backend's exact mode names
  // BestExactDot16()).
  const Dot16Kernels* dot16 = &BestDot16();

  bool empty() const { return rows == 0; }
  size_t RowBytes() const { return DTypeBytes(dtype, cols); }
  int64_t Bytes() const;
};

// True when MatMul computes from `dtype` as it is stored (kF32, kF16, kBF16, or a block
// type with a kernel).
bool CpuMatrixKeeps(DType dtype);

// out[t, n] = sum_k x[t, k] * w[n, k] (+ bias[n]) for t < rows. x: (rows, w.cols),
// out: (rows, w.rows), bias: (w.rows) or nullptr. activations: scratch for the quantized
// rows (grown as needed). Each output's bits depend only on its own row and weights, never
// on the thread count or the other rows, and, except through an inexact dot16 set, never on
// the instruction set.
void MatMul(const CpuMatrix& w, const float* x, const float* bias, int64_t rows, float* out,
            ThreadPool* pool, std::vector<uint8_t>* activations);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_CPU_MATRIX_H_
