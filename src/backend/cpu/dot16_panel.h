// The AVX-512 16-bit products (dot16.h) for many activation rows at once (prefill). Internal
// to dot16_x86.cc, which calls it for calls of at least kDot16PanelMinRows rows.
//
// Each group of eight weight rows is widened to fp32 once per call (per activation block),
// into a panel laid out as the registers read it, instead of being widened again for every
// four activation rows; the register tile is then eight weight rows by six activation rows
// (24 of the 32 registers), and the eight lanes of the outputs are folded in registers
// (fold_pairs_avx512.h). The sums are those of dot16.h: every output keeps its eight lanes,
// added in column order, separate multiplies and adds, the same fold, then the bias.
//
// Thread-safe: the panel is a thread_local buffer.
#ifndef KVTIER_BACKEND_CPU_DOT16_PANEL_H_
#define KVTIER_BACKEND_CPU_DOT16_PANEL_H_

#include <cstdint>

namespace kvtier {

// Below this many activation rows the panel's widening pass costs more than it saves.
inline constexpr int64_t kDot16PanelMinRows = 12;

// As Dot16Fn (dot16.h); bf16 picks the weight format. Needs AVX-512 F, DQ, BW and VL.
void Dot16PanelAvx512(bool bf16, const uint16_t* w, int64_t cols, int64_t n0, int64_t n1, const float* x,
                      int64_t rows, const float* bias, float* out, int64_t out_stride);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_DOT16_PANEL_H_
