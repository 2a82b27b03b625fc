// Every CUDA kernel against the CPU reference operators (backend/cpu/cpu_ops.h) on fresh
// random inputs, outputs poisoned with NaN before each run, for each 16-bit element type
// (bf16, fp16) with its own error bound. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kv_block_view.h"
#include "backend/cuda/attention_plan.h"
#include "backend/cuda/kernels.h"
#include "backend/kv_layout.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "paged_world.h"

namespace kvtier::cuda {
namespace {

using cuda_test::Data16;
using cuda_test::Random16;
using cuda_test::ToF32;
using cuda_test::Tolerance;
using cuda_test::DeviceArray;
using cuda_test::RandomF32;
using cuda_test::PagedWorld;
using cuda_test::RelativeError;
using cuda_test::kDefaultLaunch;
using cuda_test::GateRef;
using cuda_test::kGateActivations;

// The GEMV's launch variants: each prefetch depth is a kernel of its own; PDL off too.
// The decode GEMV's launches: the register kernel at each prefetch depth, the bulk kernel where
// the matrix fits (the default), and PDL off.
std::vector<CudaLaunchOptions> GemvLaunches() {
  std::vector<CudaLaunchOptions> launches;
  for (int32_t prefetch : {2, 4, 8}) {
    CudaLaunchOptions launch;
    launch.gemv_prefetch = prefetch;
    launch.gemv_bulk = 0;
    launches.push_back(launch);
  }
  launches.push_back(CudaLaunchOptions{});
  CudaLaunchOptions plain;
  plain.pdl = false;
  launches.push_back(plain);
  return launches;
}

// The norm / gate launch variants: the early-trigger kernel and the wait-first one.
CudaLaunchOptions EarlyTrigger(bool early) {
  CudaLaunchOptions launch;
  launch.pdl_early_trigger = early;
  return launch;
}

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override { KVT_SKIP_WITHOUT_CUDA(); }
  std::mt19937 rng_{std::random_device{}()};
};

// dim 72 and 4096: the 16-byte vector kernel; 76 and 9000: the scalar one.
TEST_F(CudaKernelsTest, EmbeddingGatherMatchesReference) {
  cuda_test::ForEachElem([&]<typename T>() {
    const int vocab = 100, rows = 9;
    for (int dim : {72, 76, 4096, 9000}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim);
      Data16 table = Random16<T>(vocab * dim, rng_);
      std::vector<int32_t> ids(rows);
      for (int32_t& id : ids) id = std::uniform_int_distribution<int>(0, vocab - 1)(rng_);
      DeviceArray<uint16_t> d_table(table.bits.size());
      d_table.Upload(table.bits);
      DeviceArray<int32_t> d_ids(rows);
      d_ids.Upload(ids);
      DeviceArray<float> d_out(rows * dim);
      // 1, and Gemma's sqrt(hidden) normalizer (CPU: ScaleInPlace after the lookup).
      for (float scale : {1.0f, std::sqrt(static_cast<float>(dim))}) {
        ASSERT_EQ(EmbeddingGather(d_ids.get(), reinterpret_cast<T*>(d_table.get()), rows, dim, scale,
                                  d_out.get(), nullptr, kDefaultLaunch),
                  cudaSuccess);
        std::vector<float> ref(rows * dim);
        EmbeddingLookup(table.values.data(), ids.data(), rows, dim, ref.data());
        ScaleInPlace(ref.data(), rows * dim, scale);
        EXPECT_EQ(d_out.Download(), ref);
      }
    }
  });
}

// dim 203: the scalar kernel; 200, 4096, 8192: the vector kernel with 1, 2 and 4 chunks
// per thread; 12288: scalar again (too wide for the vector kernel's registers).
TEST_F(CudaKernelsTest, AddRmsNormMatchesReference) {
  cuda_test::ForEachElem([&]<typename T>() {
    const int rows = 7;
    const float eps = 1e-5f;
    for (int dim : {200, 203, 4096, 8192, 12288}) {
      for (bool with_add : {false, true}) {
        for (bool early : {true, false}) {
          SCOPED_TRACE(::testing::Message() << "dim " << dim << " add " << with_add << " early "
                                          << early);
          std::vector<float> residual = RandomF32(rows * dim, rng_, -2, 2);
          Data16 add = Random16<T>(rows * dim, rng_);
          std::vector<float> weight = RandomF32(dim, rng_, 0.5f, 1.5f);
          DeviceArray<float> d_res(rows * dim), d_w(dim);
          d_res.Upload(residual);
          d_w.Upload(weight);
          DeviceArray<uint16_t> d_add(rows * dim), d_out(rows * dim);
          d_add.Upload(add.bits);
          ASSERT_EQ(AddRmsNorm(d_res.get(), with_add ? reinterpret_cast<T*>(d_add.get()) : nullptr,
                               d_w.get(), nullptr, rows, dim, eps,
                               reinterpret_cast<T*>(d_out.get()), nullptr, EarlyTrigger(early)),
                    cudaSuccess);
          std::vector<float> x = residual;
          if (with_add) AddInPlace(x.data(), add.values.data(), rows * dim);
          std::vector<float> ref(rows * dim);
          RmsNorm(x.data(), weight.data(), rows, dim, eps, ref.data(), nullptr);
          EXPECT_LT(RelativeError(ToF32<T>(d_out.Download()), ref), Tolerance<T>());
          EXPECT_LT(RelativeError(d_res.Download(), x), 1e-6);
        }
      }
    }
  });
}

// Gemma's sandwich norm of 16-bit rows, in place as the forward runs it and out of place,
// against the CPU's RmsNorm of the same values.
TEST_F(CudaKernelsTest, RmsNormRowsMatchesReference) {
  cuda_test::ForEachElem([&]<typename T>() {
    const int rows = 5;
    const float eps = 1e-6f;
    for (int dim : {64, 203, 2304}) {
      for (bool in_place : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "dim " << dim << " in place " << in_place);
        Data16 x = Random16<T>(rows * dim, rng_, -3, 3);
        std::vector<float> weight = RandomF32(dim, rng_, 0.5f, 1.5f);
        DeviceArray<float> d_w(dim);
        d_w.Upload(weight);
        DeviceArray<uint16_t> d_x(rows * dim), d_out(rows * dim);
        d_x.Upload(x.bits);
        T* out = reinterpret_cast<T*>(in_place ? d_x.get() : d_out.get());
        ASSERT_EQ(RmsNormRows(reinterpret_cast<const T*>(d_x.get()), d_w.get(), rows, dim, eps, out, nullptr),
                  cudaSuccess);
        std::vector<float> ref(rows * dim);
        RmsNorm(x.values.data(), weight.data(), rows, dim, eps, ref.data(), nullptr);
        EXPECT_LT(RelativeError(ToF32<T>((in_place ? d_x : d_out).Download()), ref), Tolerance<T>());
      }
    }
  });
}

// Gemma 2's final logit soft-cap against the CPU's SoftCap: logits past the cap and within.
TEST_F(CudaKernelsTest, SoftCapRowsMatchesReference) {
  const int rows = 3, vocab = 1000;
  const float cap = 30.0f;
  std::vector<float> logits = RandomF32(rows * vocab, rng_, -120, 120);
  DeviceArray<float> d_logits(rows * vocab);
  d_logits.Upload(logits);
  ASSERT_EQ(SoftCapRows(d_logits.get(), rows, vocab, cap, nullptr), cudaSuccess);
  SoftCap(logits.data(), rows * vocab, cap);
  EXPECT_LT(RelativeError(d_logits.Download(), logits), 1e-6);
  EXPECT_EQ(SoftCapRows(d_logits.get(), rows, vocab, 0.0f, nullptr), cudaErrorInvalidValue);
}

TEST_F(CudaKernelsTest, AddRmsNormSelectsRows) {
  cuda_test::ForEachElem([&]<typename T>() {
    const int rows = 6, dim = 64;
    std::vector<float> residual = RandomF32(rows * dim, rng_, -2, 2);
    std::vector<float> weight = RandomF32(dim, rng_, 0.5f, 1.5f);
    const std::vector<int32_t> row_map = {5, 2};
    DeviceArray<float> d_res(rows * dim), d_w(dim);
    d_res.Upload(residual);
    d_w.Upload(weight);
    DeviceArray<int32_t> d_map(2);
    d_map.Upload(row_map);
    DeviceArray<uint16_t> d_out(2 * dim);
    ASSERT_EQ(AddRmsNorm<T>(d_res.get(), nullptr, d_w.get(), d_map.get(), 2, dim, 1e-6f,
                            reinterpret_cast<T*>(d_out.get()), nullptr, kDefaultLaunch),
              cudaSuccess);
    std::vector<float> selected, ref(2 * dim);
    for (int r : row_map) {
      selected.insert(selected.end(), residual.begin() + r * dim, residual.begin() + (r + 1) * dim);
    }
    RmsNorm(selected.data(), weight.data(), 2, dim, 1e-6, ref.data(), nullptr);
    EXPECT_LT(RelativeError(ToF32<T>(d_out.Download()), ref), Tolerance<T>());
  });
}

// dim 300: the scalar kernel; 1032: the 16-byte vector kernel; SiLU and GELU-tanh against
// the CPU's SiluMul and GeluTanhMul.
TEST_F(CudaKernelsTest, GatedMulMatchesReference) {
  cuda_test::ForEachElem([&]<typename T>() {
    const int rows = 5;
    for (int dim : {300, 1032}) {
      for (bool early : {true, false}) {
        for (GateActivation act : kGateActivations) {
        SCOPED_TRACE(::testing::Message() << "dim " << dim << " early " << early << " gelu "
                                        << (act == GateActivation::kGeluTanh));
        Data16 gate_up = Random16<T>(rows * 2 * dim, rng_, -4, 4);
        DeviceArray<uint16_t> d_in(gate_up.bits.size()), d_out(rows * dim);
        d_in.Upload(gate_up.bits);
        ASSERT_EQ(GatedMul(reinterpret_cast<T*>(d_in.get()), rows, dim, act,
                           reinterpret_cast<T*>(d_out.get()), nullptr, EarlyTrigger(early)),
                  cudaSuccess);
        std::vector<float> gate, up, ref(rows * dim);
        for (int r = 0; r < rows; ++r) {
          gate.insert(gate.end(), gate_up.values.begin() + r * 2 * dim,
                      gate_up.values.begin() + r * 2 * dim + dim);
          up.insert(up.end(), gate_up.values.begin() + r * 2 * dim + dim,
                    gate_up.values.begin() + (r + 1) * 2 * dim);
        }
        if (act == GateActivation::kGeluTanh) {
          ::kvtier::GeluTanhMul(gate.data(), up.data(), rows * dim, ref.data());
        } else {
          ::kvtier::SiluMul(gate.data(), up.data(), rows * dim, ref.data());
        }
        EXPECT_LT(RelativeError(ToF32<T>(d_out.Download()), ref), Tolerance<T>());
        }
      }
    }
  });
}

// vocab 128256 (Llama-3): 16-byte loads; 50000 and 37: slices not 16-byte aligned (scalar
// loads; 37 leaves most slices empty). Values drawn from a few levels, so every row has
// ties for its maximum: the lowest index must win.
TEST_F(CudaKernelsTest, ArgmaxRowsMatchesReference) {
  const int rows = 5;
  for (int vocab : {128256, 50000, 37}) {
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    for (float& v : logits) v = static_cast<float>(std::uniform_int_distribution<int>(-20, 20)(rng_));
    DeviceArray<float> d_logits(logits.size());
    d_logits.Upload(logits);
    DeviceArray<int32_t> d_ids(rows);
    d_ids.Upload(std::vector<int32_t>(rows, -1));
    DeviceArray<uint8_t> scratch(ArgmaxScratchBytes(rows));
    ASSERT_EQ(ArgmaxRows(d_logits.get(), rows, vocab, scratch.get(), d_ids.get(), nullptr,
                         kDefaultLaunch),
              cudaSuccess);
    const std::vector<int32_t> ids = d_ids.Download();
    for (int r = 0; r < rows; ++r) {
      const auto begin = logits.begin() + static_cast<int64_t>(r) * vocab;
      EXPECT_EQ(ids[r], std::max_element(begin, begin + vocab) - begin) << "vocab " << vocab;
    }
  }
}

// The decode GEMV against a double-precision host dot product, every row count, k with
// and without a tail (k % 1024 != 0), 16-bit and f32 outputs, each prefetch depth and PDL
// off; outputs poisoned first.
TEST_F(CudaKernelsTest, GemvSmallRowsMatchesReference) {
  cuda_test::ForEachElem([&]<typename T>() {
    for (const CudaLaunchOptions& launch : GemvLaunches()) {
      SCOPED_TRACE(::testing::Message() << "gemv_prefetch " << launch.gemv_prefetch << " bulk " << launch.gemv_bulk
                                      << " pdl " << launch.pdl);
      for (int k : {4096, 1032, 72}) {
        for (int rows = 1; rows <= kGemvMaxRows; ++rows) {
          for (bool f32 : {false, true}) {
            const int n = 77;
            Data16 x = Random16<T>(static_cast<size_t>(rows) * k, rng_);
            Data16 w = Random16<T>(static_cast<size_t>(n) * k, rng_);
            DeviceArray<uint16_t> d_x(x.bits.size()), d_w(w.bits.size());
            d_x.Upload(x.bits);
            d_w.Upload(w.bits);
            std::vector<float> ref(static_cast<size_t>(rows) * n);
            for (int r = 0; r < rows; ++r) {
              for (int j = 0; j < n; ++j) {
                double sum = 0;
                for (int i = 0; i < k; ++i) {
                  sum += static_cast<double>(x.values[static_cast<size_t>(r) * k + i]) * w.values[static_cast<size_t>(j) * k + i];
                }
                ref[static_cast<size_t>(r) * n + j] = static_cast<float>(sum);
              }
            }
            const auto* dx = reinterpret_cast<const T*>(d_x.get());
            const auto* dw = reinterpret_cast<const T*>(d_w.get());
            ASSERT_TRUE(GemvSupported(rows, k, dx, dw));
            std::vector<float> got;
            if (f32) {
              DeviceArray<float> d_out(ref.size());
              d_out.Upload(std::vector<float>(ref.size(), NAN));
              ASSERT_EQ(GemvSmallRows(dx, dw, rows, k, n, d_out.get(), true, nullptr, launch),
                        cudaSuccess);
              got = d_out.Download();
              EXPECT_LT(RelativeError(got, ref), 1e-5) << "k " << k << " rows " << rows;
            } else {
              DeviceArray<uint16_t> d_out(ref.size());
              d_out.Upload(std::vector<uint16_t>(ref.size(), 0xffff));
              ASSERT_EQ(GemvSmallRows(dx, dw, rows, k, n, d_out.get(), false, nullptr, launch),
                        cudaSuccess);
              got = ToF32<T>(d_out.Download());
              EXPECT_LT(RelativeError(got, ref), Tolerance<T>()) << "k " << k << " rows " << rows;
            }
          }
        }
      }
    }
    EXPECT_FALSE(GemvSupported(kGemvMaxRows + 1, 4096, nullptr, nullptr));
    EXPECT_FALSE(GemvSupported(1, 4100, nullptr, nullptr));
  });
}

// The fused gate|up GEMV + GatedMul against act(g) * u from double-precision dot products;
// both activations, k with and without a tail, 1 and 2 rows, each prefetch depth and PDL
// off; output poisoned first.
TEST_F(CudaKernelsTest, GemvGatedMulMatchesReference) {
  cuda_test::ForEachElem([&]<typename T>() {
    const int inter = 77;
    for (GateActivation act : kGateActivations)
    for (const CudaLaunchOptions& launch : GemvLaunches()) {
      SCOPED_TRACE(::testing::Message() << "gemv_prefetch " << launch.gemv_prefetch << " bulk " << launch.gemv_bulk
                                      << " pdl " << launch.pdl);
      for (int k : {4096, 1032, 72}) {
        for (int rows = 1; rows <= 2; ++rows) {
          SCOPED_TRACE(::testing::Message() << "k " << k << " rows " << rows);
          Data16 x = Random16<T>(static_cast<size_t>(rows) * k, rng_);
          Data16 w = Random16<T>(static_cast<size_t>(2 * inter) * k, rng_);
          DeviceArray<uint16_t> d_x(x.bits.size()), d_w(w.bits.size()), d_out(rows * inter);
          d_x.Upload(x.bits);
          d_w.Upload(w.bits);
          std::vector<float> ref(static_cast<size_t>(rows) * inter);
          for (int r = 0; r < rows; ++r) {
            for (int c = 0; c < inter; ++c) {
              double g = 0, u = 0;
              for (int i = 0; i < k; ++i) {
                const double xv = x.values[static_cast<size_t>(r) * k + i];
                g += xv * w.values[static_cast<size_t>(c) * k + i];
                u += xv * w.values[static_cast<size_t>(inter + c) * k + i];
              }
              ref[static_cast<size_t>(r) * inter + c] = static_cast<float>(GateRef(act, g, u));
            }
          }
          ASSERT_EQ(GemvGatedMul(reinterpret_cast<const T*>(d_x.get()),
                                 reinterpret_cast<const T*>(d_w.get()), rows, k, inter, act,
                                 reinterpret_cast<T*>(d_out.get()), nullptr, launch),
                    cudaSuccess);
          EXPECT_LT(RelativeError(ToF32<T>(d_out.Download()), ref), Tolerance<T>());
        }
      }
    }
    EXPECT_EQ(GemvGatedMul<T>(nullptr, nullptr, 3, 4096, 8, GateActivation::kSilu, nullptr, nullptr, kDefaultLaunch),
              cudaErrorInvalidValue);
  });
}

// The bulk kernel (gemv_bulk.cuh) gives the register kernel's bits: plain and gate|up, 16-bit
// and f32 outputs, every row count, a grid whose last CTA holds fewer columns (n 77).
TEST_F(CudaKernelsTest, GemvBulkGivesTheRegisterKernelsBits) {
  cuda_test::ForEachElem([&]<typename T>() {
    const int n = 77;
    CudaLaunchOptions registers, bulk;
    registers.gemv_bulk = 0;
    bulk.gemv_bulk = 1;
    for (int k : {2048, 1032, 72}) {
      Data16 x = Random16<T>(static_cast<size_t>(kGemvMaxRows) * k, rng_);
      Data16 w = Random16<T>(static_cast<size_t>(2 * n) * k, rng_);
      DeviceArray<uint16_t> d_x(x.bits.size()), d_w(w.bits.size());
      d_x.Upload(x.bits);
      d_w.Upload(w.bits);
      const auto* dx = reinterpret_cast<const T*>(d_x.get());
      const auto* dw = reinterpret_cast<const T*>(d_w.get());
      for (int rows = 1; rows <= kGemvMaxRows; ++rows) {
        SCOPED_TRACE(::testing::Message() << "k " << k << " rows " << rows);
        auto plain = [&](const CudaLaunchOptions& launch, bool f32) {
          DeviceArray<float> d_out(static_cast<size_t>(rows) * n);
          d_out.Upload(std::vector<float>(static_cast<size_t>(rows) * n, NAN));
          EXPECT_EQ(GemvSmallRows(dx, dw, rows, k, n, d_out.get(), f32, nullptr, launch), cudaSuccess);
          return d_out.Download();
        };
        for (bool f32 : {false, true}) {
          const std::vector<float> want = plain(registers, f32), got = plain(bulk, f32);
          EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << "f32 " << f32;
        }
        if (rows > 2) continue;
        auto gated = [&](const CudaLaunchOptions& launch) {
          DeviceArray<uint16_t> d_out(static_cast<size_t>(rows) * n);
          d_out.Upload(std::vector<uint16_t>(static_cast<size_t>(rows) * n, 0xffff));
          EXPECT_EQ(GemvGatedMul(dx, dw, rows, k, n, GateActivation::kSilu, reinterpret_cast<T*>(d_out.get()), nullptr,
                                 launch),
                    cudaSuccess);
          return d_out.Download();
        };
        EXPECT_EQ(gated(registers), gated(bulk)) << "gate|up";
      }
    }
  });
}

struct AttentionCase {
  int heads, kv_heads, head_dim, block_tokens, split_tokens;
  AttentionScores scores = {};  // Gemma's: another scale, a soft-cap, a sliding window
};

class PagedAttentionTest : public CudaKernelsTest,
                           public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(PagedAttentionTest, MatchesReferenceOnShuffledBlocks) {
  cuda_test::ForEachElem([&]<typename T>() {
    const AttentionCase p = GetParam();
    // Long decode (split-K), prefill from 0, chunked prefill / prefix hit (start > 0), short
    // decode, a chunk crossing many blocks.
    PagedWorld w(p.heads, p.kv_heads, p.head_dim, p.block_tokens,
                 {{1, 3000}, {37, 0}, {20, 50}, {1, 4}, {9, 700}}, rng_);
    const int layer = 1;
    const int64_t pool_elems = w.num_blocks * w.layout.ElementsPerBlock();
    Data16 pool = Random16<T>(pool_elems, rng_, -2, 2);
    Data16 q = Random16<T>(static_cast<size_t>(w.num_tokens) * p.heads * p.head_dim, rng_, -2, 2);

    AttentionPlanOptions o;
    o.num_heads = p.heads;
    o.num_kv_heads = p.kv_heads;
    o.max_rows = AttentionMaxRows(p.head_dim);
    o.split_tokens = p.split_tokens;
    o.partial_slots = 4096;
    AttentionPlan plan;
    ASSERT_TRUE(PlanAttention(w.chunks, o, &plan).ok());

    DeviceArray<uint16_t> d_pool(pool_elems), d_q(q.bits.size()), d_out(q.bits.size());
    d_pool.Upload(pool.bits);
    d_q.Upload(q.bits);
    DeviceArray<int32_t> d_indptr(w.indptr.size()), d_indices(w.indices.size()),
        d_chunk(w.num_tokens), d_pos(w.num_tokens), d_splits(w.num_tokens), d_base(w.num_tokens);
    d_indptr.Upload(w.indptr);
    d_indices.Upload(w.indices);
    d_chunk.Upload(w.token_chunk);
    d_pos.Upload(w.token_pos);
    d_splits.Upload(plan.num_splits);
    d_base.Upload(plan.partial_base);
    DeviceArray<AttentionItem> d_items(plan.items.size());
    d_items.Upload(plan.items);
    DeviceArray<float> d_partial(o.partial_slots * p.heads * p.head_dim),
        d_ml(o.partial_slots * p.heads * 2);

    PagedKv<T> kv = cuda_test::PagedKvOf(w.layout, reinterpret_cast<T*>(d_pool.get()), d_indices.get(), d_indptr.get());
    AttentionParams<T> params;
    params.q = reinterpret_cast<T*>(d_q.get());
    params.out = reinterpret_cast<T*>(d_out.get());
    params.items = d_items.get();
    params.num_items = static_cast<int32_t>(plan.items.size());
    params.num_heads = p.heads;
    params.layer = layer;
    params.max_rows = plan.max_rows;
    params.any_split = plan.any_split;
    params.scores = p.scores;
    ASSERT_EQ(PagedAttention(params, StepTokens{d_chunk.get(), d_pos.get(), w.num_tokens}, kv,
                             AttentionSplits{d_splits.get(), d_base.get(), d_partial.get(),
                                             d_ml.get()},
                             nullptr),
              cudaSuccess);
    CUDA_ASSERT(cudaDeviceSynchronize());
    const std::vector<float> out = ToF32<T>(d_out.Download());

    KvLayout f32_layout = w.layout;
    f32_layout.dtype = DType::kF32;
    const AttentionOptions options = cuda_test::CpuAttentionOptions(p.scores);
    int64_t token = 0;
    for (size_t c = 0; c < w.chunks.size(); ++c) {
      const int rows = w.chunks[c].num_tokens;
      const size_t row_elems = static_cast<size_t>(p.heads) * p.head_dim;
      std::vector<float> ref(rows * row_elems);
      const KvBlockView view{&f32_layout, pool.values.data(), w.tables[c], {}};
      ::kvtier::PagedAttention(view, layer, w.chunks[c].start_position, rows, p.heads,
                               q.values.data() + token * row_elems, ref.data(), cuda_test::ReferencePool(), options);
      const std::vector<float> got(out.begin() + token * row_elems,
                                   out.begin() + (token + rows) * row_elems);
      EXPECT_LT(RelativeError(got, ref), Tolerance<T>())
          << "chunk " << c << " start " << w.chunks[c].start_position << " rows " << rows;
      token += rows;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttentionTest,
    ::testing::Values(AttentionCase{8, 2, 128, 16, 256},    // Llama-3 GQA, split-K
                      AttentionCase{8, 2, 128, 16, 100000}, // no split
                      AttentionCase{4, 4, 64, 16, 128},     // MHA
                      AttentionCase{32, 1, 32, 8, 512},     // MQA: group > rows per CTA
                      AttentionCase{12, 4, 80, 16, 300},    // head_dim 80
                      AttentionCase{4, 2, 16, 16, 64},      // tiny head_dim
                      AttentionCase{16, 8, 256, 32, 1024},  // head_dim 256
                      // Gemma 2's scores: query_pre_attn_scalar 224's scale and a soft-cap of
                      // 5 (most scores are past it), split and not.
                      AttentionCase{8, 4, 128, 16, 256, {1.0f / std::sqrt(224.0f), 5.0f, 0}},
                      AttentionCase{8, 4, 128, 16, 100000, {1.0f / std::sqrt(224.0f), 5.0f, 0}},
                      // Sliding windows: 37 (within blocks, shorter than the 50-token chunk
                      // and than a split), 600 (whole splits fall outside it), with a soft-cap.
                      AttentionCase{8, 2, 128, 16, 256, {0.0f, 0.0f, 37}},
                      AttentionCase{4, 2, 16, 16, 64, {0.25f, 0.0f, 37}},
                      AttentionCase{8, 2, 64, 16, 128, {0.0f, 20.0f, 600}},
                      AttentionCase{8, 2, 128, 16, 100000, {0.0f, 0.0f, 5}}),
    [](const ::testing::TestParamInfo<AttentionCase>& info) {
      const AttentionCase& c = info.param;
      std::string name = "h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads) + "d" +
                         std::to_string(c.head_dim) + "bt" + std::to_string(c.block_tokens) + "s" +
                         std::to_string(c.split_tokens);
      if (c.scores.scale > 0.0f) name += "_scaled";
      if (c.scores.logit_softcap > 0.0f) name += "_cap" + std::to_string(static_cast<int>(c.scores.logit_softcap));
      if (c.scores.window > 0) name += "_w" + std::to_string(c.scores.window);
      return name;
    });

struct QkvCase {
  int heads, kv_heads, head_dim;
  bool bias, qk_norm, llama3;
};

class QkvPostTest : public CudaKernelsTest, public ::testing::WithParamInterface<QkvCase> {};

// Bias, q/k norm, RoPE and the KV write against AddInPlace / RmsNorm / ApplyRope / WriteKv.
TEST_P(QkvPostTest, MatchesReference) {
  cuda_test::ForEachElem([&]<typename T>() {
    const QkvCase p = GetParam();
    PagedWorld w(p.heads, p.kv_heads, p.head_dim, 16, {{13, 0}, {1, 40}, {6, 9000}}, rng_);
    const int layer = 1;
    const int d = p.head_dim, q_dim = p.heads * d, kv_dim = p.kv_heads * d;
    const int width = q_dim + 2 * kv_dim;
    const int t_count = w.num_tokens;
    Data16 qkv = Random16<T>(static_cast<size_t>(t_count) * width, rng_, -2, 2);
    std::vector<float> bias = RandomF32(width, rng_, -0.5f, 0.5f);
    std::vector<float> q_norm = RandomF32(d, rng_, 0.8f, 1.2f);
    std::vector<float> k_norm = RandomF32(d, rng_, 0.8f, 1.2f);
    std::optional<Llama3RopeScaling> scaling;
    if (p.llama3) scaling = Llama3RopeScaling{8.0, 1.0, 4.0, 8192};
    std::vector<float> inv_freq(d / 2);
    RopeInverseFrequencies(d, 500000.0, scaling, inv_freq.data());
    const float eps = 1e-6f;

    const int64_t pool_elems = w.num_blocks * w.layout.ElementsPerBlock();
    DeviceArray<uint16_t> d_qkv(qkv.bits.size()), d_q(static_cast<size_t>(t_count) * q_dim),
        d_pool(pool_elems);
    d_qkv.Upload(qkv.bits);
    DeviceArray<float> d_bias(width), d_qn(d), d_kn(d), d_freq(d / 2);
    d_bias.Upload(bias);
    d_qn.Upload(q_norm);
    d_kn.Upload(k_norm);
    d_freq.Upload(inv_freq);
    DeviceArray<int32_t> d_indptr(w.indptr.size()), d_indices(w.indices.size()),
        d_chunk(t_count), d_pos(t_count);
    d_indptr.Upload(w.indptr);
    d_indices.Upload(w.indices);
    d_chunk.Upload(w.token_chunk);
    d_pos.Upload(w.token_pos);

    QkvPostParams<T> params;
    params.qkv = reinterpret_cast<T*>(d_qkv.get());
    params.bias = p.bias ? d_bias.get() : nullptr;
    params.q_norm = p.qk_norm ? d_qn.get() : nullptr;
    params.k_norm = p.qk_norm ? d_kn.get() : nullptr;
    params.inv_freq = d_freq.get();
    params.norm_eps = eps;
    params.num_heads = p.heads;
    params.layer = layer;
    params.q_out = reinterpret_cast<T*>(d_q.get());
    // Asking L2 for another buffer (as the decode step does for the o projection's weights)
    // changes nothing the kernel writes.
    params.prefetch = {d_qkv.get(), static_cast<int64_t>(qkv.bits.size() * 2 / 16 * 16)};
    PagedKv<T> kv = cuda_test::PagedKvOf(w.layout, reinterpret_cast<T*>(d_pool.get()), d_indices.get(), d_indptr.get());
    ASSERT_EQ(QkvPost(params, StepTokens{d_chunk.get(), d_pos.get(), t_count}, kv, nullptr,
                      kDefaultLaunch),
              cudaSuccess);
    CUDA_ASSERT(cudaDeviceSynchronize());

    // Reference.
    std::vector<float> q(static_cast<size_t>(t_count) * q_dim), k(static_cast<size_t>(t_count) * kv_dim),
        v(static_cast<size_t>(t_count) * kv_dim);
    for (int t = 0; t < t_count; ++t) {
      std::vector<float> row(qkv.values.begin() + static_cast<int64_t>(t) * width,
                             qkv.values.begin() + static_cast<int64_t>(t + 1) * width);
      if (p.bias) AddInPlace(row.data(), bias.data(), width);
      std::copy(row.begin(), row.begin() + q_dim, q.begin() + t * q_dim);
      std::copy(row.begin() + q_dim, row.begin() + q_dim + kv_dim, k.begin() + t * kv_dim);
      std::copy(row.begin() + q_dim + kv_dim, row.end(), v.begin() + t * kv_dim);
    }
    if (p.qk_norm) {
      RmsNorm(q.data(), q_norm.data(), t_count * p.heads, d, eps, q.data(), nullptr);
      RmsNorm(k.data(), k_norm.data(), t_count * p.kv_heads, d, eps, k.data(), nullptr);
    }
    std::vector<int64_t> positions(w.token_pos.begin(), w.token_pos.end());
    ApplyRope(q.data(), positions.data(), t_count, p.heads, d, inv_freq.data());
    ApplyRope(k.data(), positions.data(), t_count, p.kv_heads, d, inv_freq.data());
    EXPECT_LT(RelativeError(ToF32<T>(d_q.Download()), q), Tolerance<T>());

    KvLayout f32_layout = w.layout;
    f32_layout.dtype = DType::kF32;
    std::vector<float> ref_pool(pool_elems, NAN);
    int64_t token = 0;
    for (size_t c = 0; c < w.chunks.size(); ++c) {
      WriteKv(f32_layout, ref_pool.data(), w.tables[c], layer, w.chunks[c].start_position,
              w.chunks[c].num_tokens, k.data() + token * kv_dim, v.data() + token * kv_dim);
      token += w.chunks[c].num_tokens;
    }
    const std::vector<float> pool = ToF32<T>(d_pool.Download());
    std::vector<float> got, want;
    int64_t mismatched_nan = 0;
    for (int64_t i = 0; i < pool_elems; ++i) {
      if (std::isnan(ref_pool[i])) {
        if (!std::isnan(pool[i])) ++mismatched_nan;  // written where nothing should be
        continue;
      }
      got.push_back(pool[i]);
      want.push_back(ref_pool[i]);
    }
    EXPECT_EQ(mismatched_nan, 0);
    EXPECT_EQ(static_cast<int64_t>(want.size()), 2LL * t_count * kv_dim);
    EXPECT_LT(RelativeError(got, want), Tolerance<T>());
  });
}

INSTANTIATE_TEST_SUITE_P(
    Variants, QkvPostTest,
    ::testing::Values(QkvCase{8, 2, 128, false, false, false}, QkvCase{8, 2, 128, false, false, true},
                      QkvCase{4, 2, 64, true, false, false}, QkvCase{16, 8, 128, false, true, false},
                      QkvCase{4, 4, 16, true, true, true}, QkvCase{8, 4, 256, false, true, false}),
    [](const ::testing::TestParamInfo<QkvCase>& info) {
      const QkvCase& c = info.param;
      return "h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads) + "d" +
             std::to_string(c.head_dim) + (c.bias ? "_bias" : "") + (c.qk_norm ? "_qknorm" : "") +
             (c.llama3 ? "_llama3" : "");
    });

TEST_F(CudaKernelsTest, ConversionsAndFillsRoundTrip) {
  cuda_test::ForEachElem([&]<typename T>() {
    const int64_t n = 1000;
    DeviceArray<float> d_f(n), d_back(n);
    DeviceArray<uint16_t> d_b(n);
    ASSERT_EQ(FillRandom(d_f.get(), n, 7, 0.0f, 3.0f, nullptr), cudaSuccess);
    ASSERT_EQ(ConvertFromF32(d_f.get(), n, reinterpret_cast<T*>(d_b.get()), nullptr),
              cudaSuccess);
    ASSERT_EQ(ConvertToF32<T>(reinterpret_cast<T*>(d_b.get()), n, d_back.get(), nullptr),
              cudaSuccess);
    const std::vector<float> f = d_f.Download();
    for (float x : f) ASSERT_TRUE(std::isfinite(x) && std::abs(x) <= 3.0f);
    // Round to nearest even, bit for bit as the host conversion of model/tensor.h.
    const std::vector<uint16_t> bits = d_b.Download();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits[i], cuda_test::Elem16<T>::Bits(f[i])) << "element " << i << " = " << f[i];
    }
    EXPECT_EQ(d_back.Download(), ToF32<T>(bits));
    ASSERT_EQ(FillRandom(reinterpret_cast<T*>(d_b.get()), n, 7, 1.0f, 0.5f, nullptr),
              cudaSuccess);
    for (float x : ToF32<T>(d_b.Download())) ASSERT_TRUE(x >= 0.49f && x <= 1.51f);
  });
}

}  // namespace
}  // namespace kvtier::cuda
