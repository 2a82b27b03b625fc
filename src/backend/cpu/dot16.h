// Products of fp32 activation rows with a matrix of 16-bit floats (F16 or BF16), the
// weights read as they are stored and widened in registers.
//
// Every exact set gives the bits of the fp32 reference (cpu_ops.h MatMulTransposed on
// the widened matrix): widening is exact, and each output is summed in the reference's
// order, eight lanes (lane l takes columns k with k % 8 == l, the tail's columns in lanes
// 0..) of separate fp32 multiplies and adds, folded pairwise (l += l + 4, l += l + 2,
// l += l + 1), then the bias added. The AVX-512 kernels hold two outputs' eight lanes in
// one 16-lane register, so that order survives the wider vectors; no multiply and add is
// fused. An output's bits therefore never depend on the instruction set, the thread
// count, or which rows share a call.
//
// Blocking: a kernel call covers weight rows [n0, n1) for every activation row; it walks
// the activations in blocks that stay in cache and, for each, the weights in groups of
// eight rows, each group applied to four activation rows at a time from registers, so that
// a batch of decode rows reads each weight once per call. With many activation rows
// (prefill) the AVX-512 set widens each group once into a panel and applies it to six rows
// at a time instead (dot16_panel.h); the sums are the same.
//
// The one inexact set, "avx512bf16" (processors with AVX-512 BF16), takes BF16 weights
// through vdpbf16ps with the activations rounded to bf16 (dot16_bf16pairs.h: its error
// bound); its F16 kernel is the exact AVX-512 one. It is the best set where the processor
// has it: faster in prefill and compute-bound decode, no slower in memory-bound decode
// (docs/CPU_BACKEND.md); the exact sets stay selectable (BestExactDot16) for the paths
// tested against the reference bit for bit.
//
// Thread-safe: the kernels are pure functions.
#ifndef KVTIER_BACKEND_CPU_DOT16_H_
#define KVTIER_BACKEND_CPU_DOT16_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/dtype.h"

namespace kvtier {

// out[t * out_stride + n] = sum_k x[t * cols + k] * w[n * cols + k] (+ bias[n]) for t < rows,
// n0 <= n < n1. w: the whole matrix, row-major, `cols` 16-bit values a row; bias: indexed
// by n, or nullptr.
using Dot16Fn = void (*)(const uint16_t* w, int64_t cols, int64_t n0, int64_t n1, const float* x, int64_t rows,
                         const float* bias, float* out, int64_t out_stride);

struct Dot16Kernels {
  std::string_view isa;  // "portable", "avx2", "avx512", "avx512bf16"
  Dot16Fn f16 = nullptr;
  Dot16Fn bf16 = nullptr;
  bool exact = true;  // both kernels give the reference's bits

  // The kernel for kF16 or kBF16; nullptr for any other type.
  Dot16Fn For(DType weight_type) const;
};

// The fastest kernels this processor runs (chosen once, at first call).
const Dot16Kernels& BestDot16();
// The fastest exact kernels this processor runs.
const Dot16Kernels& BestExactDot16();
// Every set this processor can run, the portable one first (for tests comparing them).
std::vector<const Dot16Kernels*> SupportedDot16();

// The portable set widens a tile of rows to fp32 and runs the reference tile
// (MatMulTransposedTile). x86 sets are null where the compiler has none.
const Dot16Kernels& PortableDot16();
const Dot16Kernels* Avx2Dot16();    // needs avx2 and f16c
const Dot16Kernels* Avx512Dot16();  // needs avx512f, dq, bw and vl
const Dot16Kernels* Avx512Bf16Dot16();  // needs those and avx512_bf16; not exact

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_DOT16_H_
