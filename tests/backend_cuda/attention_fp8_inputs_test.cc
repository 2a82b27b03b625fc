// QuantizeQueriesFp8, KvGatherFp8 and DequantizeOutputFp8 (attention_fp8_inputs.h) against host
// code doing the same float operations: codes and values bit for bit, and the factors the fp8
// attention graph reads. GPU tests skip without a device; the argument checks run anywhere.
#include "backend/cuda/attention_fp8_inputs.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/fp8_e4m3.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "model/tensor.h"
#include "prefill_pool.h"
#include "prefill_world.h"

namespace kvtier::cuda {
namespace {

using cuda_test::DeviceArray;
using cuda_test::DevicePool;
using cuda_test::GatherCase;
using cuda_test::MakePool;
using cuda_test::Pool;
using cuda_test::PrefillWorld;

Fp8AttentionFactors DownloadFactors(const DeviceArray<uint8_t>& f) {
  Fp8AttentionFactors out;
  const std::vector<uint8_t> bytes = f.Download();
  std::memcpy(&out, bytes.data(), sizeof(out));
  return out;
}

class QuantizeQueriesFp8Test : public cuda_test::CudaParamTest<int64_t> {};

// Rows of a chunk's queries (one with a larger outlier): codes = E4M3(x * (448 / amax)), the
// descale amax / 448, and the constants InitFp8AttentionFactors wrote left as they were.
TEST_P(QuantizeQueriesFp8Test, MatchesHostCodesAndDescale) {
  const int64_t n = GetParam();
  cuda_test::Data16 q = cuda_test::Random16<bf16>(n, rng_, -3, 3);
  if (n > 0) q.bits[static_cast<size_t>(n / 3)] = FloatToBf16(-17.5f), q.values[static_cast<size_t>(n / 3)] = -17.5f;
  DeviceArray<uint16_t> d_q(q.bits.size());
  d_q.Upload(q.bits);
  DeviceArray<uint8_t> codes(static_cast<size_t>(std::max<int64_t>(n, 8))), factors(sizeof(Fp8AttentionFactors));
  auto* f = reinterpret_cast<Fp8AttentionFactors*>(factors.get());
  ASSERT_EQ(InitFp8AttentionFactors(f, nullptr), cudaSuccess);
  ASSERT_EQ(QuantizeQueriesFp8(reinterpret_cast<const bf16*>(d_q.get()), n, codes.get(), f, nullptr), cudaSuccess);
  CUDA_ASSERT(cudaDeviceSynchronize());
  float amax = 0.0f;
  for (float x : q.values) amax = std::max(amax, std::fabs(x));
  const float scale = amax > 0.0f ? 448.0f / amax : 1.0f;
  std::vector<uint8_t> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = FloatToFp8E4M3(q.values[static_cast<size_t>(i)] * scale);
  std::vector<uint8_t> got = codes.Download();
  got.resize(static_cast<size_t>(n));
  EXPECT_EQ(got, want);
  const Fp8AttentionFactors out = DownloadFactors(factors);
  EXPECT_EQ(out.amax_q, amax);
  EXPECT_EQ(out.descale_q, amax > 0.0f ? amax / 448.0f : 1.0f);
  EXPECT_EQ(out.descale_s, 1.0f / 448.0f);
  EXPECT_EQ(out.scale_s, 448.0f);
  EXPECT_EQ(out.scale_o, 1.0f);
  EXPECT_EQ(out.descale_o, 1.0f);
}

INSTANTIATE_TEST_SUITE_P(Elements, QuantizeQueriesFp8Test, ::testing::Values(8, 4096, 2048 * 4096 + 8));

class KvGatherFp8Test : public cuda_test::CudaParamTest<GatherCase> {};

// Every chunk's fp8 K and V of layer 1, padded to a multiple of 256 rows: each value requantized
// to the side's largest row scale, bit for bit the host's rule, the padding zero, and the
// descales that scale.
TEST_P(KvGatherFp8Test, MatchesHostRequantization) {
  const GatherCase g = GetParam();
  PrefillWorld w(g.heads, g.kv_heads, g.head_dim, g.block_tokens, {{1, 0}, {37, 100}, {600, 1037}, {16, 48}}, rng_);
  const int layer = 1;
  const Pool pool = MakePool(w, true, rng_);
  DevicePool device(w, pool, true);
  KvLayout layout = w.layout;
  layout.dtype = DType::kF8E4M3;
  const int64_t per_block = layout.ElementsPerBlock();
  DeviceArray<uint8_t> factors(sizeof(Fp8AttentionFactors));
  auto* f = reinterpret_cast<Fp8AttentionFactors*>(factors.get());
  ASSERT_EQ(InitFp8AttentionFactors(f, nullptr), cudaSuccess);
  for (const PrefillChunk& c : w.prefill_chunks) {
    const int64_t skv = c.start_position + c.num_tokens, rows = (skv + 255) / 256 * 256;
    const size_t n = static_cast<size_t>(rows) * g.kv_heads * g.head_dim;
    DeviceArray<uint8_t> k(n), v(n);
    k.Poison();
    v.Poison();
    KvGatherFp8Params params;
    params.chunk = c.chunk;
    params.layer = layer;
    params.num_positions = skv;
    params.padded_positions = rows;
    params.k_out = k.get();
    params.v_out = v.get();
    ASSERT_EQ(KvGatherFp8(params, device.kv, f, nullptr), cudaSuccess);
    CUDA_ASSERT(cudaDeviceSynchronize());
    const Fp8AttentionFactors out = DownloadFactors(factors);
    const std::vector<int32_t>& table = w.tables[c.chunk];
    for (int side = 0; side < 2; ++side) {
      auto code_of = [&](int64_t p, int h, int e) {
        const uint8_t* block = pool.bytes.data() + table[p / g.block_tokens] * layout.BlockBytes();
        return block[layout.ElementOffset(layer, side, h, p % g.block_tokens) + e];
      };
      auto scale_of = [&](int64_t p, int h) {
        const uint8_t* block = pool.bytes.data() + table[p / g.block_tokens] * layout.BlockBytes();
        float s;
        std::memcpy(&s, block + per_block + 4 * (layout.ElementOffset(layer, side, h, p % g.block_tokens) / g.head_dim),
                    4);
        return s;
      };
      float side_max = 0.0f;
      for (int64_t p = 0; p < skv; ++p) {
        for (int h = 0; h < g.kv_heads; ++h) side_max = std::max(side_max, scale_of(p, h));
      }
      std::vector<uint8_t> want(n, 0);
      for (int64_t p = 0; p < skv; ++p) {
        for (int h = 0; h < g.kv_heads; ++h) {
          const float ratio = scale_of(p, h) / side_max;
          for (int e = 0; e < g.head_dim; ++e) {
            want[static_cast<size_t>((p * g.kv_heads + h) * g.head_dim + e)] =
                FloatToFp8E4M3(Fp8E4M3ToFloat(code_of(p, h, e)) * ratio);
          }
        }
      }
      EXPECT_EQ((side == 0 ? k : v).Download(), want) << "chunk " << c.chunk << (side == 0 ? " K" : " V");
      EXPECT_EQ(side == 0 ? out.descale_k : out.descale_v, side_max) << "chunk " << c.chunk;
      if (side == 1) {
        EXPECT_EQ(out.scale_o, 0.5f / side_max) << "chunk " << c.chunk;
        EXPECT_EQ(out.descale_o, 2.0f * side_max) << "chunk " << c.chunk;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvGatherFp8Test,
                         ::testing::Values(GatherCase{8, 2, 128, 16}, GatherCase{4, 4, 64, 8},
                                           GatherCase{32, 8, 128, 32}),
                         [](const ::testing::TestParamInfo<GatherCase>& info) {
                           const GatherCase& c = info.param;
                           return "h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads) + "d" +
                                  std::to_string(c.head_dim) + "bt" + std::to_string(c.block_tokens);
                         });

class DequantizeOutputFp8Test : public cuda_test::CudaParamTest<int64_t> {};

// Every E4M3 code (NaNs aside) times descale_o, rounded to bf16 once: the host's bits.
TEST_P(DequantizeOutputFp8Test, MatchesHostValues) {
  const int64_t n = GetParam();
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& c : codes) {
    do c = static_cast<uint8_t>(byte(rng_));
    while ((c & 0x7f) == 0x7f);  // E4M3's NaNs
  }
  Fp8AttentionFactors host{};
  host.descale_o = 2.0f * 0.0371f;
  DeviceArray<uint8_t> d_codes(codes.size()), factors(sizeof(Fp8AttentionFactors));
  d_codes.Upload(codes);
  std::vector<uint8_t> factor_bytes(sizeof(host));
  std::memcpy(factor_bytes.data(), &host, sizeof(host));
  factors.Upload(factor_bytes);
  DeviceArray<uint16_t> out(static_cast<size_t>(n));
  out.Poison();
  ASSERT_EQ(DequantizeOutputFp8(d_codes.get(), n, reinterpret_cast<const Fp8AttentionFactors*>(factors.get()),
                                reinterpret_cast<bf16*>(out.get()), nullptr),
            cudaSuccess);
  CUDA_ASSERT(cudaDeviceSynchronize());
  std::vector<uint16_t> want(static_cast<size_t>(n));
  for (size_t i = 0; i < want.size(); ++i) want[i] = FloatToBf16(Fp8E4M3ToFloat(codes[i]) * host.descale_o);
  EXPECT_EQ(out.Download(), want);
}

INSTANTIATE_TEST_SUITE_P(Elements, DequantizeOutputFp8Test, ::testing::Values(8, 4096, 2048 * 4096 + 8));

// Checked on the host before any launch: no device needed.
TEST(AttentionFp8InputsArgsTest, RejectsWhatTheyCannotDo) {
  Fp8AttentionFactors unused_factors;
  uint8_t unused[16];
  bf16 q[8] = {};
  EXPECT_EQ(QuantizeQueriesFp8(q, 12, unused, &unused_factors, nullptr), cudaErrorInvalidValue);  // not whole pieces
  EXPECT_EQ(QuantizeQueriesFp8(nullptr, 8, unused, &unused_factors, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(QuantizeQueriesFp8(q, 8, unused, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(InitFp8AttentionFactors(nullptr, nullptr), cudaErrorInvalidValue);
  KvGatherFp8Params params;
  params.num_positions = 4;
  params.padded_positions = 4;
  params.k_out = unused;
  params.v_out = unused;
  PagedKv<bf16> kv;
  kv.num_kv_heads = 1;
  kv.block_tokens = 16;
  kv.head_dim = 128;
  kv.fp8 = false;  // a bf16 pool has no codes to regather
  EXPECT_EQ(KvGatherFp8(params, kv, &unused_factors, nullptr), cudaErrorInvalidValue);
  kv.fp8 = true;
  kv.head_dim = 96;
  EXPECT_EQ(KvGatherFp8(params, kv, &unused_factors, nullptr), cudaErrorInvalidValue);
  kv.head_dim = 64;
  params.padded_positions = 3;
  EXPECT_EQ(KvGatherFp8(params, kv, &unused_factors, nullptr), cudaErrorInvalidValue);
  params.padded_positions = 4;
  EXPECT_EQ(KvGatherFp8(params, kv, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(DequantizeOutputFp8(unused, 12, &unused_factors, q, nullptr), cudaErrorInvalidValue);  // not whole pieces
  EXPECT_EQ(DequantizeOutputFp8(nullptr, 8, &unused_factors, q, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(DequantizeOutputFp8(unused, 8, nullptr, q, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(DequantizeOutputFp8(unused, 8, &unused_factors, nullptr, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kvtier::cuda
