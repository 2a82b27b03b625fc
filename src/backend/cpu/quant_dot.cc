// The portable dot-product kernels and the run-time choice of a set (quant_dot.h).
// Stateless; thread-safe.
#include "backend/cpu/quant_dot.h"

#include <cmath>

#include "backend/cpu/quant_dot_internal.h"
#include "common/cpu_features.h"
#include "model/block_quants.h"
#include "model/tensor.h"

namespace kvtier {

namespace {

using quant_dot_internal::AccumulateLanes;
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

// The products of a Q4_K (qh == nullptr) or Q5_K super-block's values with its activations,
// unscaled, by 32-value sub-block j and lane l (values 4l..4l+3 of the sub-block):
// products[j][l]. The layout as block_quants.cc's DequantizeK45 reads it.
void K45Products(const uint8_t* qs, const uint8_t* qh, const BlockQ8K& y, int32_t products[8][kLanes]) {
  for (int c = 0; c < 4; ++c) {
    const uint8_t* q = qs + 32 * c;
    for (int l = 0; l < kLanes; ++l) products[2 * c][l] = products[2 * c + 1][l] = 0;
    for (int l = 0; l < 32; ++l) {
      const int high1 = qh != nullptr && (qh[l] & (1 << (2 * c))) ? 16 : 0;
      const int high2 = qh != nullptr && (qh[l] & (2 << (2 * c))) ? 16 : 0;
      products[2 * c][l / 4] += ((q[l] & 0x0F) + high1) * y.qs[64 * c + l];
      products[2 * c + 1][l / 4] += ((q[l] >> 4) + high2) * y.qs[64 * c + 32 + l];
    }
  }
}

float DotQ4_K(const uint8_t* w, const uint8_t* a, int64_t num_blocks) {
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t b = 0; b < num_blocks; ++b, w += 144, a += sizeof(BlockQ8K)) {
    const BlockQ8K& y = *Q8K(a);
    const uint8_t* scales = w + 4;
    int32_t products[8][kLanes];
    K45Products(w + 16, nullptr, y, products);
    int32_t totals[4] = {}, mins[4];
    for (int j = 0; j < 8; ++j) {
      int scale, min;
      KQuantScaleMin(scales, j, &scale, &min);
      for (int l = 0; l < kLanes; ++l) totals[j / 2] += scale * products[j][l];
    }
    quant_dot_internal::KQuantPairMins(scales, y, mins);
    quant_dot_internal::AccumulateQ4_K(Fp16ToFloat(Bits16(w)), Fp16ToFloat(Bits16(w + 2)), y.d, totals, mins, &acc,
                                       &acc_min);
  }
  return acc - acc_min;
}

float DotQ5_K(const uint8_t* w, const uint8_t* a, int64_t num_blocks) {
  float acc[kLanes] = {};
  float mins_sum = 0.0f;
  for (int64_t b = 0; b < num_blocks; ++b, w += 176, a += sizeof(BlockQ8K)) {
    const BlockQ8K& y = *Q8K(a);
    const uint8_t* scales = w + 4;
    int32_t products[8][kLanes];
    K45Products(w + 48, w + 16, y, products);
    int32_t lanes[kLanes] = {}, mins[4];
    for (int j = 0; j < 8; ++j) {
      int scale, min;
      KQuantScaleMin(scales, j, &scale, &min);
      for (int l = 0; l < kLanes; ++l) lanes[l] += scale * products[j][l];
    }
    quant_dot_internal::KQuantPairMins(scales, y, mins);
    AccumulateLanes(y.d * Fp16ToFloat(Bits16(w)), lanes, acc);
    const float dmin = -(y.d * Fp16ToFloat(Bits16(w + 2)));
    mins_sum = std::fmaf(dmin, static_cast<float>(mins[0] + mins[1] + mins[2] + mins[3]), mins_sum);
  }
  return FoldLanes(acc) + mins_sum;
}

// Q6_K: value at position p of a block is ql/qh's six bits minus 32, scaled by the int8
// scale of sub-block p / 16 (block_quants.cc's DequantizeQ6_K). Lane l holds, over the eight
// 32-value chunks c, scale(2c + l / 4) x (products of values 4l..4l+3 of chunk c), less the
// -32's share of sub-blocks 2l and 2l + 1, taken through the activations' block sums.
float DotQ6_K(const uint8_t* w, const uint8_t* a, int64_t num_blocks) {
  float acc[kLanes] = {};
  for (int64_t b = 0; b < num_blocks; ++b, w += 210, a += sizeof(BlockQ8K)) {
    const BlockQ8K& y = *Q8K(a);
    const int8_t* scales = reinterpret_cast<const int8_t*>(w + 192);
    int32_t lanes[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      lanes[l] = -32 * (y.bsums[2 * l] * scales[2 * l] + y.bsums[2 * l + 1] * scales[2 * l + 1]);
    }
    for (int n = 0; n < 2; ++n) {
      const uint8_t* l4 = w + 64 * n;
      const uint8_t* h2 = w + 128 + 32 * n;
      const int8_t* aq = y.qs + 128 * n;
      for (int k = 0; k < 4; ++k) {
        const int scale_low = scales[8 * n + 2 * k], scale_high = scales[8 * n + 2 * k + 1];
        for (int i = 0; i < 32; ++i) {
          const uint8_t low = l4[i + (k & 1) * 32];
          const int value = ((k < 2 ? low & 0x0F : low >> 4) | (((h2[i] >> (2 * k)) & 3) << 4));
          lanes[i / 4] += (i < 16 ? scale_low : scale_high) * value * aq[32 * k + i];
        }
      }
    }
    AccumulateLanes(y.d * Fp16ToFloat(Bits16(w + 208)), lanes, acc);
  }
  return FoldLanes(acc);
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
  if (Avx2QuantDot() != nullptr && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c()) {
    sets.push_back(Avx2QuantDot());
  }
  if (Avx512VnniQuantDot() != nullptr && CpuHasAvx512Vnni() && __builtin_cpu_supports("fma") && CpuHasF16c()) {
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
