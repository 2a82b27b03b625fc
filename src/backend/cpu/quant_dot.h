// Dot products of one row of block-quantized weights (GGUF's Q8_0, Q4_0, Q4_K, Q5_K, Q6_K,
// model/block_quants.h) with one row of quantized activations (quant_activations.h), in
// integers within each block as llama.cpp computes them.
//
// Every implementation (portable, AVX2, AVX-512 VNNI) returns the same bits: the integer
// part is exact, and the float part follows one fixed order, which the portable code spells
// out. Each order is the one llama.cpp's x86 CPU build computes for that type, so that a
// GGUF file gives llama.cpp's numbers (docs/GGUF.md):
//  - Q8_0 and Q4_0: a block's 32 products are summed in eight lanes of four consecutive
//    products (the lanes of a 256-bit integer dot-product instruction), and lane l
//    accumulates float(lane sum) * (d_w * d_a) over the blocks; the eight lanes are folded
//    pairwise (l += l + 4, l += l + 2, l += l + 1) at the end.
//  - Q4_K, as ggml's repacked Q4_K GEMM (ggml_gemm_q4_K_8x8_q8_K, its path for a batch of
//    tokens): for each super-block and each pair p of 32-value sub-blocks, the pair's exact
//    total (scale-weighted) is added as acc = fma(float(total_p), d_w * d_a, acc) and its min
//    term (min x activation sum, both sub-blocks) as acc_min = fma(float(min_p),
//    dmin_w * d_a, acc_min); the result is acc - acc_min.
//  - Q5_K and Q6_K, as ggml_vec_dot_q5_K_q8_K / q6_K_q8_K (AVX2): eight int32 lanes, lane l
//    holding the scale-weighted products of values 4l..4l+3 of every 32-value chunk (Q6_K
//    less the -32 offset's share of sub-blocks 2l and 2l + 1), accumulated per super-block
//    as acc_l = fma(d_a * d_w, float(lane l), acc_l) and folded as above; Q5_K adds its min
//    term apart, mins = fma(-(d_a * dmin_w), float(min total), mins), after the fold.
//
// Thread-safe: the kernels are pure functions.
#ifndef KVTIER_BACKEND_CPU_QUANT_DOT_H_
#define KVTIER_BACKEND_CPU_QUANT_DOT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "model/dtype.h"

namespace kvtier {

// weights: num_blocks weight blocks of the kernel's type; activations: the matching
// num_blocks activation blocks (ActivationBlockBytes of that type each).
using QuantDotFn = float (*)(const uint8_t* weights, const uint8_t* activations, int64_t num_blocks);
// The dot products of one weight row with four activation rows (activations + r *
// activation_stride bytes, r < 4) into out[r]: each the bits QuantDotFn gives it, with the
// weight blocks read once for the four. scales + r * scale_stride: row r's block scales
// widened to fp32 (the same values as their halves), so that the kernel need not widen
// them for every weight row.
using QuantDot4Fn = void (*)(const uint8_t* weights, const uint8_t* activations, size_t activation_stride,
                             const float* scales, size_t scale_stride, int64_t num_blocks, float* out);

struct QuantDotKernels {
  std::string_view isa;  // "portable", "avx2", "avx512vnni"
  QuantDotFn q8_0 = nullptr;
  QuantDotFn q4_0 = nullptr;
  QuantDotFn q4_k = nullptr;
  QuantDotFn q5_k = nullptr;
  QuantDotFn q6_k = nullptr;
  QuantDot4Fn q8_0_x4 = nullptr;

  // The kernel for weight_type; nullptr for a type without one.
  QuantDotFn For(DType weight_type) const;
};

// True for the block types with a kernel.
bool HasQuantDot(DType weight_type);

// The fastest kernels this processor runs (chosen once, at first call).
const QuantDotKernels& BestQuantDot();
// Every set this processor can run, the portable one first (for tests comparing them).
std::vector<const QuantDotKernels*> SupportedQuantDots();

// The sets, for BestQuantDot and tests. x86 sets are null where the compiler has none.
const QuantDotKernels& PortableQuantDot();
const QuantDotKernels* Avx2QuantDot();        // needs avx2
const QuantDotKernels* Avx512VnniQuantDot();  // needs avx512f, bw, vl and vnni

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_QUANT_DOT_H_
