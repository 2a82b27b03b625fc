// A PrefillWorld's paged pool in bf16 or fp8 (E4M3 codes with a scale per row), on the host
// with the values the kernels see and on the device, shared by the tests of the gathers and
// of the prefill on cuDNN. Host and device test helpers.
#ifndef KVTIER_TESTS_BACKEND_CUDA_PREFILL_POOL_H_
#define KVTIER_TESTS_BACKEND_CUDA_PREFILL_POOL_H_

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/kernels.h"
#include "backend/kv_layout.h"
#include "common/fp8_e4m3.h"
#include "cuda_test_util.h"
#include "model/tensor.h"
#include "prefill_world.h"

namespace kvtier::cuda_test {

using cuda::bf16;
using cuda::PagedKv;

// A world's pool in both formats: 16-bit values, or fp8 codes with a scale per row, with the
// values the kernels see (the fp8 ones dequantized and rounded to bf16, as KvGather does).
struct Pool {
  std::vector<uint8_t> bytes;  // the device pool
  std::vector<float> values;   // (blocks, ElementsPerBlock()) as the attention reads them
};

inline Pool MakePool(const PrefillWorld& w, bool fp8, std::mt19937& rng) {
  KvLayout layout = w.layout;
  layout.dtype = fp8 ? DType::kF8E4M3 : DType::kBF16;
  const int64_t per_block = layout.ElementsPerBlock();
  Pool p;
  p.bytes.assign(static_cast<size_t>(w.num_blocks) * layout.BlockBytes(), 0);
  p.values.assign(static_cast<size_t>(w.num_blocks * per_block), 0.0f);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f), scale(0.002f, 0.005f);
  std::uniform_int_distribution<int> code(0, 255);
  const int64_t rows = per_block / layout.head_dim;
  for (int64_t b = 0; b < w.num_blocks; ++b) {
    uint8_t* block = p.bytes.data() + b * layout.BlockBytes();
    for (int64_t r = 0; r < rows; ++r) {
      const float s = scale(rng);
      if (fp8) std::memcpy(block + per_block + r * 4, &s, 4);
      for (int64_t e = 0; e < layout.head_dim; ++e) {
        const int64_t i = r * layout.head_dim + e;
        uint16_t bits = 0;
        if (fp8) {
          uint8_t c = static_cast<uint8_t>(code(rng));
          if ((c & 0x7f) == 0x7f) c ^= 1;  // no NaN
          block[i] = c;
          bits = FloatToBf16(Fp8E4M3ToFloat(c) * s);
        } else {
          bits = FloatToBf16(value(rng));
          std::memcpy(block + 2 * i, &bits, 2);
        }
        p.values[b * per_block + i] = Bf16ToFloat(bits);
      }
    }
  }
  return p;
}

struct DevicePool {
  DeviceArray<uint8_t> pool;
  DeviceArray<int32_t> indptr, indices;
  PagedKv<bf16> kv;
  DevicePool(const PrefillWorld& w, const Pool& p, bool fp8)
      : pool(p.bytes.size()), indptr(w.indptr.size()), indices(w.indices.size()) {
    pool.Upload(p.bytes);
    indptr.Upload(w.indptr);
    indices.Upload(w.indices);
    KvLayout layout = w.layout;
    layout.dtype = fp8 ? DType::kF8E4M3 : DType::kBF16;
    kv = cuda_test::PagedKvOf(layout, reinterpret_cast<bf16*>(pool.get()), indices.get(), indptr.get());
  }
};

struct GatherCase {
  int heads, kv_heads, head_dim, block_tokens;
};

}  // namespace kvtier::cuda_test

#endif  // KVTIER_TESTS_BACKEND_CUDA_PREFILL_POOL_H_
