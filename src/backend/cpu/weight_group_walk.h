// The blocking the CPU's many-row matrix kernels share (dot16_x86.cc, dot16_panel_x86.cc,
// quant_gemm_x86.cc): the activation rows in blocks of about kActivationBlockBytes, so that a
// block stays in the core's cache while every weight group of the call passes over it; the
// weight rows [n0, n1) in groups of kGroupRows for one micro-kernel's panel (a short last
// group repeats its last row, whose results are not stored); and each group against the
// block's rows in tiles of at most kTileRows. Header-only: the callbacks inline into each
// kernel's driver.
#ifndef KVTIER_BACKEND_CPU_WEIGHT_GROUP_WALK_H_
#define KVTIER_BACKEND_CPU_WEIGHT_GROUP_WALK_H_

#include <algorithm>
#include <cstdint>

namespace kvtier::cpu_walk {

inline constexpr int64_t kActivationBlockBytes = 512 * 1024;

// Activation rows per block, a multiple of kTileRows, for rows of `row_bytes` in cache.
template <int kTileRows>
int64_t ActivationBlockRows(int64_t row_bytes) {
  return std::max<int64_t>(kTileRows, kActivationBlockBytes / std::max<int64_t>(1, row_bytes) / kTileRows * kTileRows);
}

// For each activation block and weight group: group(rows, g, valid) with the group's
// kGroupRows row pointers (row r of the weights at w + r * row_stride), its first row g and
// how many of its rows are real; then tile(t, r, g, valid) for each tile of r activation
// rows from row t.
template <int kGroupRows, int kTileRows, typename Elem, typename GroupFn, typename TileFn>
void WalkWeightGroups(const Elem* w, int64_t row_stride, int64_t n0, int64_t n1, int64_t rows, int64_t block_rows,
                      GroupFn&& group, TileFn&& tile) {
  for (int64_t t0 = 0; t0 < rows; t0 += block_rows) {
    const int64_t t1 = std::min(rows, t0 + block_rows);
    for (int64_t g = n0; g < n1; g += kGroupRows) {
      const Elem* group_rows[kGroupRows];
      for (int j = 0; j < kGroupRows; ++j) group_rows[j] = w + std::min(g + j, n1 - 1) * row_stride;
      const int valid = static_cast<int>(std::min<int64_t>(kGroupRows, n1 - g));
      group(group_rows, g, valid);
      for (int64_t t = t0; t < t1; t += kTileRows) {
        tile(t, static_cast<int>(std::min<int64_t>(kTileRows, t1 - t)), g, valid);
      }
    }
  }
}

}  // namespace kvtier::cpu_walk

#endif  // KVTIER_BACKEND_CPU_WEIGHT_GROUP_WALK_H_
