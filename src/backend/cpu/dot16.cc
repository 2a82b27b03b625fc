// The portable 16-bit products and the run-time choice of a set (dot16.h). Stateless;
// thread-safe.
#include "backend/cpu/dot16.h"

#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/widen16.h"
#include "common/cpu_features.h"

namespace kvtier {
namespace {

// Weight rows widened at a time: a tile is then read from cache for every activation row.
constexpr int64_t kTile = 16;

template <bool kBf16>
void Widened(const uint16_t* w, int64_t cols, int64_t n0, int64_t n1, const float* x, int64_t rows,
             const float* bias, float* out, int64_t out_stride) {
  thread_local std::vector<float> tile;  // one tile of rows widened, kept between calls
  tile.resize(static_cast<size_t>(kTile * cols));
  for (int64_t t0 = n0; t0 < n1; t0 += kTile) {
    const int64_t t1 = std::min(n1, t0 + kTile);
    if (kBf16) {
      WidenBf16(w + t0 * cols, (t1 - t0) * cols, tile.data());
    } else {
      WidenFp16(w + t0 * cols, (t1 - t0) * cols, tile.data());
    }
    MatMulTransposedTile(x, tile.data(), bias, rows, cols, out_stride, t0, t1, out);
  }
}

}  // namespace

Dot16Fn Dot16Kernels::For(DType weight_type) const {
  switch (weight_type) {
    case DType::kF16:
      return f16;
    case DType::kBF16:
      return bf16;
    default:
      return nullptr;
  }
}

const Dot16Kernels& PortableDot16() {
  static const Dot16Kernels kernels{"portable", Widened<false>, Widened<true>};
  return kernels;
}

std::vector<const Dot16Kernels*> SupportedDot16() {
  std::vector<const Dot16Kernels*> sets = {&PortableDot16()};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (Avx2Dot16() != nullptr && __builtin_cpu_supports("avx2") && CpuHasF16c()) sets.push_back(Avx2Dot16());
  if (Avx512Dot16() != nullptr && CpuHasAvx512() && CpuHasF16c()) {
    sets.push_back(Avx512Dot16());
  }
  if (Avx512Bf16Dot16() != nullptr && CpuHasAvx512Bf16() && CpuHasF16c()) sets.push_back(Avx512Bf16Dot16());
#endif
  return sets;
}

const Dot16Kernels& BestDot16() {
  static const Dot16Kernels* best = SupportedDot16().back();
  return *best;
}

const Dot16Kernels& BestExactDot16() {
  static const Dot16Kernels* best = [] {
    const Dot16Kernels* exact = nullptr;
    for (const Dot16Kernels* set : SupportedDot16()) {
      if (set->exact) exact = set;
    }
    return exact;
  }();
  return *best;
}

}  // namespace kvtier
