// The decode attention's host-side planning (decode_attention.h): which shapes it takes, how
// many splits a row gets, and the sizes of its partial buffers.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/decode_attention.h"

namespace kvtier::cuda {

bool DecodeAttentionSupported(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads) {
  if (head_dim != 64 && head_dim != 128) return false;
  if (num_kv_heads <= 0 || num_heads <= 0 || num_heads % num_kv_heads != 0) return false;
  return num_heads / num_kv_heads <= kDecodeMaxGroup;
}

// Splits so that rows * kv heads * splits fills about ONE wave of resident CTAs (wave_ctas:
// SMs x DecodeResidentCtasPerSm) and never spills into a partial second wave: a CTA's warps
// walk their tiles one latency at a time, so a second wave costs a whole CTA time: more
// splits than one wave holds are slower for a long single row, and a second split is slower
// for a batch that already fills the GPU (`KVTIER_DECODE_BENCH=1 kvtier_cuda_bench` sweeps
// max_splits). Each row still uses no more splits than ctx / kMinSplitTokens (decided in the
// kernel).
int32_t DecodeMaxSplits(int32_t num_rows, int32_t num_kv_heads, int32_t wave_ctas) {
  const int64_t pairs = std::max<int64_t>(1, int64_t{num_rows} * std::max(1, num_kv_heads));
  return static_cast<int32_t>(std::clamp<int64_t>(std::max(1, wave_ctas) / pairs, 1, kDecodeMaxSplitsCap));
}

size_t DecodePartialFloats(int32_t num_rows, int32_t max_splits, int32_t num_heads,
                           int32_t head_dim) {
  return static_cast<size_t>(num_rows) * max_splits * num_heads * head_dim;
}

size_t DecodePartialMlFloats(int32_t num_rows, int32_t max_splits, int32_t num_heads) {
  return static_cast<size_t>(num_rows) * max_splits * num_heads * 2;
}

size_t DecodeCounterInts(int32_t num_rows, int32_t num_kv_heads) {
  return static_cast<size_t>(num_rows) * num_kv_heads;
}

}  // namespace kvtier::cuda
