// BF16 weights against activation rows rounded to bf16, with the AVX-512 BF16 dot product
// (vdpbf16ps): each instruction multiplies 32 pairs of bf16 and adds each lane's two
// products into an fp32 lane, where the exact kernels (dot16.h) widen the weights and spend
// a multiply and an add per 16 products. Internal to dot16_x86.cc, whose "avx512bf16" set
// calls it.
//
// Not the reference's bits: each activation is rounded to the nearest bf16 (a relative
// error of at most 2^-8), every product of two bf16 is exact in fp32, each instruction adds
// a lane's two products with at most two roundings, and it treats subnormal inputs and
// results as zero. An output t, n therefore differs from the exact sum of the stored values
// by at most about 2^-8 * M + (2 * ceil(cols / 32) + 5) * 2^-24 * M (plus 2^-126 per
// instruction for a flushed result), M = |bias[n]| + sum_k |x[t, k] * w[n, k]|: the
// rounding of the activations, then the additions of 16 lanes over the column steps, their
// four-step fold and the bias. dot16_test.cc checks that bound.
//
// Blocking: the activation rows are rounded once per call into a thread_local buffer, their
// rows padded with zeros to whole 32-column steps; the weights are read as stored, in
// groups of four rows, each group against six activation rows at a time from registers
// (24 accumulators). A column tail is a masked load of zeros on the weight side.
//
// Thread-safe: the rounded rows are a thread_local buffer.
#ifndef KVTIER_BACKEND_CPU_DOT16_BF16PAIRS_H_
#define KVTIER_BACKEND_CPU_DOT16_BF16PAIRS_H_

#include <cstdint>

namespace kvtier {

// As Dot16Fn (dot16.h) for BF16 weights. Needs AVX-512 F, DQ, BW, VL and BF16.
void Dot16Bf16PairsAvx512(const uint16_t* w, int64_t cols, int64_t n0, int64_t n1, const float* x, int64_t rows,
                          const float* bias, float* out, int64_t out_stride);

// out[i] = x[i] rounded to bf16 as the kernel above rounds its activations (nearest even,
// subnormals to zero), for i < count. Needs the same instruction sets.
void RoundToBf16Avx512(const float* x, int64_t count, uint16_t* out);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_DOT16_BF16PAIRS_H_
