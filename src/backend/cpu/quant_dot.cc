// The portable dot-product kernels and the run-time choice of a set (quant_dot.h).
// Stateless; thread-safe.
#include "backend/cpu/quant_dot.h"

#include "backend/cpu/quant_dot_internal.h"
#include "common/cpu_features.h"
#include "model/block_quants.h"
#include "model/tensor.h"

namespace kvtier {
namespace quant_dot_internal {

int32_t KQuantMinsDot(const uint8_t* scales, const BlockQ8K& a) {
  int32_t mins = 0;
  for (int j = 0; j < 8; ++j) {
    int scale, min;
    KQuantScaleMin(scales, j, &scale, &min);
    mins += min * SubBlockSum(a, j);
  }
  return mins;
}

}  // namespace quant_dot_internal

namespace {

using quant_dot_internal::AccumulateK;
using quant_dot_internal::Bits16;
using quant_dot_internal::FoldLanes;
using quant_dot_internal::kLanes;
using quant_dot_internal::Q8K;

// Q8_0 and Q4_0 against Q8_0 activations; weight(q, j) is the signed value j of block q.
template <typename WeightValue>
float DotLanes(const uint8_t* w, const uint8_t* a, int64_t num_blocks, size_t weight_bytes,
               WeightValue weight) {
  float acc[kLanes] = {};
  for (int64_t b = 0; b < num_blocks; ++b, w += weight_bytes, a += kQ8_0Bytes) {
    const float d = Fp16ToFloat(Bits16(w)) * Fp16ToFloat(Bits16(a));
    const int8_t* aq = reinterpret_cast<const int8_t*>(a + 2);
    for (int l = 0; l < kLanes; ++l) {
      int32_t lane = 0;
      for (int k = 4 * l; k < 4 * l + 4; ++k) lane += weight(w + 2, k) * aq[k];
      acc[l] += static_cast<float>(lane) * d;
    }
  }
  return FoldLanes(acc);
}

float DotQ8_0(const uint8_t* w, const uint8_t* a, int64_t num_blocks) {
  return DotLanes(w, a, num_blocks, 34, [](const uint8_t* q, int k) { return static_cast<int32_t>(static_cast<int8_t>(q[k])); });
}

void DotQ8_0x4(const uint8_t* w, const uint8_t* a, size_t stride, const float* /*scales*/, size_t /*scale_stride*/,
               int64_t num_blocks, float* out) {
  for (int r = 0; r < 4; ++r) out[r] = DotQ8_0(w, a + r * stride, num_blocks);
}

float DotQ4_0(const uint8_t* w, const uint8_t* a, int64_t num_blocks) {
  return DotLanes(w, a, num_blocks, 18, [](const uint8_t* q, int k) {
    return static_cast<int32_t>(k < 16 ? (q[k] & 0x0F) : (q[k - 16] >> 4)) - 8;
  });
}

// Q4_K (qh == nullptr) and Q5_K; the layout as block_quants.cc's DequantizeK45 reads it.
float DotK45(const uint8_t* w, const uint8_t* a, int64_t num_blocks, size_t block_bytes, bool has_high) {
  float sum = 0.0f;
  for (int64_t b = 0; b < num_blocks; ++b, w += block_bytes, a += sizeof(BlockQ8K)) {
    const BlockQ8K& y = *Q8K(a);
    const uint8_t* scales = w + 4;
    const uint8_t* qh = has_high ? w + 16 : nullptr;
    const uint8_t* qs = has_high ? w + 48 : w + 16;
    int32_t total = 0;
    for (int c = 0; c < 4; ++c) {
      int s1, m1, s2, m2;
      KQuantScaleMin(scales, 2 * c, &s1, &m1);
      KQuantScaleMin(scales, 2 * c + 1, &s2, &m2);
      const uint8_t* q = qs + 32 * c;
      int32_t low = 0, high = 0;
      for (int l = 0; l < 32; ++l) {
        const int high1 = qh != nullptr && (qh[l] & (1 << (2 * c))) ? 16 : 0;
        const int high2 = qh != nullptr && (qh[l] & (2 << (2 * c))) ? 16 : 0;
        low += ((q[l] & 0x0F) + high1) * y.qs[64 * c + l];
        high += ((q[l] >> 4) + high2) * y.qs[64 * c + 32 + l];
      }
      total += s1 * low + s2 * high;
    }
    AccumulateK(Fp16ToFloat(Bits16(w)), Fp16ToFloat(Bits16(w + 2)), y.d, total,
                quant_dot_internal::KQuantMinsDot(scales, y), &sum);
  }
  return sum;
}

float DotQ4_K(const uint8_t* w, const uint8_t* a, int64_t num_blocks) { return DotK45(w, a, num_blocks, 144, false); }
float DotQ5_K(const uint8_t* w, const uint8_t* a, int64_t num_blocks) { return DotK45(w, a, num_blocks, 176, true); }

// Q6_K: value at position p of a block is ql/qh's six bits minus 32, scaled by the int8
// scale of sub-block p / 16 (block_quants.cc's DequantizeQ6_K); the -32 is taken through
// the activations' block sums.
float DotQ6_K(const uint8_t* w, const uint8_t* a, int64_t num_blocks) {
  float sum = 0.0f;
  for (int64_t b = 0; b < num_blocks; ++b, w += 210, a += sizeof(BlockQ8K)) {
    const BlockQ8K& y = *Q8K(a);
    const uint8_t* ql = w;
    const uint8_t* qh = w + 128;
    const int8_t* scales = reinterpret_cast<const int8_t*>(w + 192);
    int32_t sub[16] = {};
    for (int n = 0; n < 2; ++n) {
      const uint8_t* l4 = ql + 64 * n;
      const uint8_t* h2 = qh + 32 * n;
      const int8_t* aq = y.qs + 128 * n;
      for (int l = 0; l < 32; ++l) {
        const int s = 8 * n + l / 16;
        sub[s] += ((l4[l] & 0x0F) | (((h2[l] >> 0) & 3) << 4)) * aq[l];
        sub[s + 2] += ((l4[l + 32] & 0x0F) | (((h2[l] >> 2) & 3) << 4)) * aq[l + 32];
        sub[s + 4] += ((l4[l] >> 4) | (((h2[l] >> 4) & 3) << 4)) * aq[l + 64];
        sub[s + 6] += ((l4[l + 32] >> 4) | (((h2[l] >> 6) & 3) << 4)) * aq[l + 96];
      }
    }
    int32_t total = 0;
    for (int s = 0; s < 16; ++s) total += scales[s] * (sub[s] - 32 * y.bsums[s]);
    AccumulateK(Fp16ToFloat(Bits16(w + 208)), 0.0f, y.d, total, 0, &sum);
  }
  return sum;
}

}  // namespace

QuantDotFn QuantDotKernels::For(DType weight_type) const {
  switch (weight_type) {
    case DType::kQ8_0:
      return q8_0;
    case DType::kQ4_0:
      return q4_0;
    case DType::kQ4_K:
      return q4_k;
    case DType::kQ5_K:
      return q5_k;
    case DType::kQ6_K:
      return q6_k;
    default:
      return nullptr;
  }
}

bool HasQuantDot(DType weight_type) { return PortableQuantDot().For(weight_type) != nullptr; }

const QuantDotKernels& PortableQuantDot() {
  static const QuantDotKernels kernels{"portable", DotQ8_0, DotQ4_0, DotQ4_K, DotQ5_K, DotQ6_K, DotQ8_0x4};
  return kernels;
}

std::vector<const QuantDotKernels*> SupportedQuantDots() {
  std::vector<const QuantDotKernels*> sets = {&PortableQuantDot()};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (Avx2QuantDot() != nullptr && __builtin_cpu_supports("avx2") && CpuHasF16c()) {
    sets.push_back(Avx2QuantDot());
  }
  if (Avx512VnniQuantDot() != nullptr && CpuHasAvx512Vnni() && CpuHasF16c()) {
    sets.push_back(Avx512VnniQuantDot());
  }
#endif
  return sets;
}

const QuantDotKernels& BestQuantDot() {
  static const QuantDotKernels* best = SupportedQuantDots().back();
  return *best;
}

}  // namespace kvtier
