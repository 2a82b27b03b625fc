// Q8_0 weights against many rows of Q8_0 activations at once (prefill), on processors with
// AVX-512 VNNI. Every output has the bits quant_dot.h's q8_0 kernel gives it: a block's 32
// products in eight lanes of four, exact in integers, and lane l accumulating
// float(lane) * (d_w * d_a) over the blocks in order, folded pairwise, then the bias added.
//
// Why it is faster than a dot product per output: eight weight rows are repacked once per
// call (per activation block) so that one 512-bit register holds a block of two weight rows,
// and each packed block then serves four activation rows from registers; the unsigned side
// of the byte products is the activation plus 128 (one xor per activation block), the
// surplus 128 x (weight lane sum) taken off by starting each lane at its negation, which the
// packing stores; the eight lanes of the outputs are folded in registers
// (fold_pairs_avx512.h).
//
// Thread-safe: the packed panel is a thread_local buffer.
#ifndef KVTIER_BACKEND_CPU_QUANT_GEMM_H_
#define KVTIER_BACKEND_CPU_QUANT_GEMM_H_

#include <cstddef>
#include <cstdint>

namespace kvtier {

// Below this many activation rows the packing pass costs more than it saves.
inline constexpr int64_t kQ8_0GemmMinRows = 12;

// True where the processor runs Q8_0Gemm (AVX-512 F, BW, DQ, VL and VNNI, and F16C).
bool HasQ8_0Gemm();

// out[t * out_stride + n] = dot(weight row n, activation row t) (+ bias[n]) for t < rows,
// n0 <= n < n1. w: the whole Q8_0 matrix, rows row_bytes apart; act: Q8_0 activation rows
// (quant_activations.h), act_stride bytes apart; scales + t * num_blocks: row t's block
// scales widened to fp32; bias: indexed by n, or nullptr.
void Q8_0Gemm(const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, const uint8_t* act, size_t act_stride,
              const float* scales, int64_t rows, int64_t num_blocks, const float* bias, float* out, int64_t out_stride);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_QUANT_GEMM_H_
