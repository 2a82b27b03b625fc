// The MoE MLP's decode path (backend/cuda/moe_decode.h, MoeTile::kGemvFused) against the grouped
// path's kernels on identical data, bit for bit (routing, weights and output), and against the
// CPU backend's MoeMlp: Qwen3-MoE-like (many experts, top 8) and Mixtral-like (8 experts, top 2)
// shapes scaled down, 1 and 2 rows, 16-bit and fp8 experts, PDL on and off, router ties, and
// graph replays (the router's arrival counter must be back at zero after every launch), and the
// buffers' accounting. Outputs are poisoned before each run. Skips without a GPU.
#include <cuda_runtime.h>

#include <bit>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_moe.h"
#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_decode.h"
#include "backend/cuda/moe_layer.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "moe_layer_world.h"
#include "moe_test_data.h"

namespace kvtier::cuda {
namespace {

using cuda_test::DeviceArray;
using cuda_test::MoeLayerShape;
using cuda_test::MoeLayerWorld;

// Experts streamed in whole 32-lane pieces and in a tail (inter 768 and 1536), the route
// groupings of the down+combine kernel (top 8, 4, 2, and 12: one group past 8 warps), its
// staged variants (8, 4 and 2 columns per warp) and its streamed one (rows of 4096), with and
// without renormalization.
constexpr MoeLayerShape kDecodeShapes[] = {{"qwen3moe-like", 256, 128, 8, 64, true},
                                           {"qwen3moe-wide-experts", 128, 32, 8, 768, true},
                                           {"top-4", 192, 16, 4, 32, false},
                                           {"mixtral-like", 128, 8, 2, 1536, true},
                                           {"long-expert-rows", 64, 8, 2, 4096, true},
                                           {"top-12", 96, 32, 12, 64, true}};

// What one MLP run leaves: its output and the routing it chose.
struct MlpResult {
  std::vector<uint16_t> out;
  std::vector<int32_t> chosen;
  std::vector<float> weights;
};

class MoeDecodeTest : public ::testing::Test {
 protected:
  void SetUp() override { KVT_SKIP_WITHOUT_CUDA(); }

  // One MLP of `rows` rows of d_x on `tile`, every output buffer poisoned first.
  template <typename T>
  MlpResult Run(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& b, const DeviceArray<uint16_t>& d_x,
                int rows) {
    const int routes = rows * run.top_k;
    EXPECT_EQ(cudaMemset(b.chosen, 0xFF, sizeof(int32_t) * routes), cudaSuccess);
    EXPECT_EQ(cudaMemset(b.weights, 0xFF, sizeof(float) * routes), cudaSuccess);
    EXPECT_EQ(cudaMemset(b.act, 0xFF, sizeof(uint16_t) * routes * run.expert_inter), cudaSuccess);
    DeviceArray<uint16_t> d_out(static_cast<size_t>(rows) * run.hidden);
    const absl::Status status = EnqueueMoeMlp(run, experts, b, reinterpret_cast<const T*>(d_x.get()), rows,
                                              reinterpret_cast<T*>(d_out.get()), nullptr);
    EXPECT_TRUE(status.ok()) << status;
    MlpResult r;
    r.out = d_out.Download();
    r.chosen.resize(static_cast<size_t>(routes));
    r.weights.resize(static_cast<size_t>(routes));
    EXPECT_EQ(cudaMemcpy(r.chosen.data(), b.chosen, sizeof(int32_t) * routes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(r.weights.data(), b.weights, sizeof(float) * routes, cudaMemcpyDeviceToHost), cudaSuccess);
    return r;
  }

  std::mt19937 rng_{std::random_device{}()};
};

void ExpectSameBits(const MlpResult& fused, const MlpResult& grouped) {
  EXPECT_EQ(fused.chosen, grouped.chosen);
  ASSERT_EQ(fused.weights.size(), grouped.weights.size());
  for (size_t i = 0; i < fused.weights.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(fused.weights[i]), std::bit_cast<uint32_t>(grouped.weights[i])) << "route " << i;
  }
  EXPECT_EQ(fused.out, grouped.out);
}

// MoeTileFor's kAuto names the grouped path's per-route GEMV where every route has an expert of
// its own; the decode path is MoeTileRun's pick (below), never MoeTileFor's.
TEST(MoeDecodeTileTest, AutoPicksThePerRouteGemvWhereEveryRouteHasAnExpertOfItsOwn) {
  EXPECT_EQ(MoeTileFor(MoeTile::kAuto, 8, 128), MoeTile::kGemv);   // Qwen3-MoE, 1 row
  EXPECT_EQ(MoeTileFor(MoeTile::kAuto, 16, 128), MoeTile::kGemv);  // 2 rows
  EXPECT_EQ(MoeTileFor(MoeTile::kAuto, 2, 8), MoeTile::kGemv);     // Mixtral, 1 row
  EXPECT_EQ(MoeTileFor(MoeTile::kAuto, 4, 8), MoeTile::kGemv);
  EXPECT_NE(MoeTileFor(MoeTile::kAuto, 24, 128), MoeTile::kGemv);
  EXPECT_NE(MoeTileFor(MoeTile::kAuto, 10, 8), MoeTile::kGemv);
  EXPECT_EQ(MoeTileFor(MoeTile::kGemv, 8, 128), MoeTile::kGemv);  // the grouped GEMV stays selectable
}

// What a forward step runs: the fused path at one row (routes == top_k) where fused_decode (the
// library's default), the grouped per-route GEMV at two rows or with it off; named tiles as given.
TEST(MoeDecodeTileTest, StepsOfOneRowRunTheFusedPathByDefault) {
  MoeRun qwen3;
  qwen3.num_experts = 128;
  qwen3.top_k = 8;
  EXPECT_TRUE(qwen3.fused_decode);
  EXPECT_EQ(MoeTileRun(qwen3, 8), MoeTile::kGemvFused);
  EXPECT_EQ(MoeTileRun(qwen3, 16), MoeTile::kGemv);
  EXPECT_EQ(MoeTileRun(qwen3, 64 * 8), MoeTile::k16x16);
  MoeRun mixtral = qwen3;
  mixtral.num_experts = 8;
  mixtral.top_k = 2;
  EXPECT_EQ(MoeTileRun(mixtral, 2), MoeTile::kGemvFused);
  EXPECT_EQ(MoeTileRun(mixtral, 4), MoeTile::kGemv);
  qwen3.fused_decode = false;
  EXPECT_EQ(MoeTileRun(qwen3, 8), MoeTile::kGemv);
  qwen3.tile = MoeTile::kGemvFused;  // named: as given, at any row count the path takes
  EXPECT_EQ(MoeTileRun(qwen3, 16), MoeTile::kGemvFused);
}

// Prefill-sized steps take the library where the run has cuBLAS: Mixtral's 8 experts a GEMM each
// from 16 routes per expert, Qwen3-MoE's 128 one grouped GEMM per projection from 64, except
// fp8 experts there (no grouped fp8 GEMM); a name is taken as given.
TEST(MoeDecodeTileTest, PrefillStepsTakeTheLibraryFromEnoughRoutesPerExpert) {
  MoeRun mixtral = MoeRun::Of(cuda_test::MoeLayerConfig(cuda_test::kMixtralShape));
  EXPECT_FALSE(mixtral.library_grouped);
  EXPECT_EQ(MoeTileRun(mixtral, 64 * 2), MoeTileFor(MoeTile::kAuto, 64 * 2, 8));  // no cuBLAS handle
  mixtral.cublas = reinterpret_cast<cublasHandle_t>(1);  // only compared with null here
  EXPECT_EQ(MoeTileRun(mixtral, 64 * 2), MoeTile::kLibrary);
  EXPECT_NE(MoeTileRun(mixtral, 63 * 2), MoeTile::kLibrary);
  ModelConfig config = cuda_test::MoeLayerConfig(cuda_test::kQwen3MoeShape);
  MoeRun qwen3 = MoeRun::Of(config);
  qwen3.cublas = mixtral.cublas;
  EXPECT_TRUE(qwen3.library_grouped);
  EXPECT_EQ(MoeTileRun(qwen3, 1024 * 8), MoeTile::kLibrary);
  EXPECT_NE(MoeTileRun(qwen3, 1023 * 8), MoeTile::kLibrary);
  MoeExperts fp8_experts, bf16_experts;
  bf16_experts.gate_up = reinterpret_cast<uint16_t*>(16);
  EXPECT_EQ(MoeTileRun(qwen3, 1024 * 8, bf16_experts), MoeTile::kLibrary);
  EXPECT_EQ(MoeTileRun(qwen3, 1024 * 8, fp8_experts), MoeTileFor(MoeTile::kAuto, 1024 * 8, 128));
  EXPECT_EQ(MoeTileRun(mixtral, 64 * 2, fp8_experts), MoeTile::kLibrary);
  qwen3.tile = MoeTile::kLibrary;
  EXPECT_EQ(MoeTileRun(qwen3, 8 * 8, fp8_experts), MoeTile::kLibrary);
  // Which models' workspaces hold the library's buffers.
  EXPECT_TRUE(MoeLibraryPathSuits(config, /*fp8_weights=*/false, /*fp8_activations=*/false));
  EXPECT_FALSE(MoeLibraryPathSuits(config, /*fp8_weights=*/true, /*fp8_activations=*/true));
  config.moe.num_experts = 8;
  EXPECT_TRUE(MoeLibraryPathSuits(config, /*fp8_weights=*/true, /*fp8_activations=*/true));
  EXPECT_FALSE(MoeLibraryPathSuits(config, /*fp8_weights=*/true, /*fp8_activations=*/false));
}

// Where the run has the skinny kernel's workspace, kAuto runs prefill-sized steps on it (the
// default) from kMoeSkinnyMinRoutesPerExpert routes per expert on, unless the library takes the
// step; fp8 experts of a grouped-library model, which the library never takes, run it at every
// such size.
TEST(MoeDecodeTileTest, PrefillStepsTakeTheSkinnyKernelWhereTheLibraryDoesNot) {
  MoeRun qwen3 = MoeRun::Of(cuda_test::MoeLayerConfig(cuda_test::kQwen3MoeShape));
  EXPECT_TRUE(qwen3.skinny);
  EXPECT_EQ(MoeTileRun(qwen3, 512 * 8), MoeTileFor(MoeTile::kAuto, 512 * 8, 128));  // no workspace
  qwen3.skinny_workspace = reinterpret_cast<void*>(16);  // only compared with null here
  EXPECT_EQ(MoeTileRun(qwen3, 512 * 8), MoeTile::kSkinny);
  EXPECT_EQ(MoeTileRun(qwen3, 511 * 8), MoeTileFor(MoeTile::kAuto, 511 * 8, 128));
  EXPECT_EQ(MoeTileRun(qwen3, 2048 * 8), MoeTile::kSkinny);  // no cuBLAS handle
  EXPECT_EQ(MoeTileRun(qwen3, 8), MoeTile::kGemvFused);
  qwen3.cublas = reinterpret_cast<cublasHandle_t>(1);
  MoeExperts fp8_experts, bf16_experts;
  bf16_experts.gate_up = reinterpret_cast<uint16_t*>(16);
  EXPECT_EQ(MoeTileRun(qwen3, 512 * 8, bf16_experts), MoeTile::kSkinny);
  EXPECT_EQ(MoeTileRun(qwen3, 1024 * 8, bf16_experts), MoeTile::kLibrary);
  EXPECT_EQ(MoeTileRun(qwen3, 2048 * 8, fp8_experts), MoeTile::kSkinny);
  MoeRun off = qwen3;
  off.skinny = false;
  EXPECT_EQ(MoeTileRun(off, 512 * 8), MoeTileFor(MoeTile::kAuto, 512 * 8, 128));
  EXPECT_EQ(MoeTileRun(off, 2048 * 8, fp8_experts), MoeTileFor(MoeTile::kAuto, 2048 * 8, 128));
  qwen3.tile = MoeTile::k64x64;  // named: as given
  EXPECT_EQ(MoeTileRun(qwen3, 512 * 8), MoeTile::k64x64);
  MoeRun mixtral = MoeRun::Of(cuda_test::MoeLayerConfig(cuda_test::kMixtralShape));
  mixtral.cublas = qwen3.cublas;
  mixtral.skinny_workspace = qwen3.skinny_workspace;
  EXPECT_EQ(MoeTileRun(mixtral, 64 * 2), MoeTile::kLibrary);  // before the skinny kernel's 32 per expert
  EXPECT_EQ(MoeTileRun(mixtral, 64 * 2, fp8_experts), MoeTile::kLibrary);
  EXPECT_EQ(MoeTileRun(mixtral, 63 * 2), MoeTileFor(MoeTile::kAuto, 63 * 2, 8));
  mixtral.cublas = nullptr;
  EXPECT_EQ(MoeTileRun(mixtral, 128 * 2), MoeTile::kSkinny);
}

TEST_F(MoeDecodeTest, MatchesTheGroupedPathBitForBitAndTheCpuBackend) {
  cuda_test::ForEachElem([&]<typename T>() {
    for (const MoeLayerShape& s : kDecodeShapes) {
      for (bool fp8 : {false, true}) {
        SCOPED_TRACE(::testing::Message() << s.name << (fp8 ? ", fp8 experts" : ", 16-bit experts"));
        MoeLayerWorld world = MoeLayerWorld::Make<T>(s, fp8, rng_);
        const ModelConfig config = cuda_test::MoeLayerConfig(s);
        DeviceMemoryAccount memory(0);
        absl::StatusOr<MoeBuffers> buffers = MoeBuffers::Allocate(config, 2, memory);
        ASSERT_TRUE(buffers.ok()) << buffers.status();
        for (int rows : {1, 2}) {
          cuda_test::Data16 x = cuda_test::Random16<T>(static_cast<size_t>(rows) * s.hidden, rng_);
          DeviceArray<uint16_t> d_x(x.bits.size());
          d_x.Upload(x.bits);
          MoeRun run = MoeRun::Of(config);
          run.tile = MoeTile::kGemv;
          const MlpResult grouped = Run<T>(run, world.device, *buffers, d_x, rows);
          const std::vector<float> want = world.CpuMlp(config, x.values, rows);
          // The down+combine's weights through the copy engine (where they fit) and through registers.
          for (const auto& [pdl, bulk] : {std::pair{true, 1}, std::pair{false, 1}, std::pair{true, 0}}) {
            SCOPED_TRACE(::testing::Message() << rows << " rows, PDL " << (pdl ? "on" : "off") << ", down+combine "
                                              << (bulk ? "bulk" : "through registers"));
            run.tile = MoeTile::kGemvFused;
            run.launch.pdl = pdl;
            run.launch.moe_down_bulk = bulk;
            const MlpResult fused = Run<T>(run, world.device, *buffers, d_x, rows);
            ASSERT_NO_FATAL_FAILURE(ExpectSameBits(fused, grouped));
            EXPECT_LT(cuda_test::RelativeError(cuda_test::ToF32<T>(fused.out), want), cuda_test::Tolerance<T>());
          }
        }
      }
    }
  });
}

// Router rows equal in threes: every row's probabilities tie in threes, bit for bit, and a top-k
// boundary inside a triple is decided by the tie rule alone (the lower expert wins).
TEST_F(MoeDecodeTest, BreaksRouterTiesAsTheGroupedPathDoes) {
  for (const MoeLayerShape& s : {kDecodeShapes[0], kDecodeShapes[3]}) {
    for (bool fp8 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << s.name << (fp8 ? ", fp8 experts" : ", 16-bit experts"));
      MoeLayerWorld world = MoeLayerWorld::Make<bf16>(s, fp8, rng_);
      ASSERT_NO_FATAL_FAILURE(world.TieRouterGroups(3));
      const ModelConfig config = cuda_test::MoeLayerConfig(s);
      DeviceMemoryAccount memory(0);
      absl::StatusOr<MoeBuffers> buffers = MoeBuffers::Allocate(config, 2, memory);
      ASSERT_TRUE(buffers.ok()) << buffers.status();
      const int rows = 2;
      cuda_test::Data16 x = cuda_test::Random16<bf16>(static_cast<size_t>(rows) * s.hidden, rng_);
      DeviceArray<uint16_t> d_x(x.bits.size());
      d_x.Upload(x.bits);
      MoeRun run = MoeRun::Of(config);
      run.tile = MoeTile::kGemv;
      const MlpResult grouped = Run<bf16>(run, world.device, *buffers, d_x, rows);
      run.tile = MoeTile::kGemvFused;
      const MlpResult fused = Run<bf16>(run, world.device, *buffers, d_x, rows);
      ASSERT_NO_FATAL_FAILURE(ExpectSameBits(fused, grouped));
      // The logits the fused router left do tie, and its choice is RouteTopK's on them.
      std::vector<float> logits(static_cast<size_t>(rows) * s.num_experts);
      CUDA_ASSERT(cudaMemcpy(logits.data(), buffers->logits, logits.size() * sizeof(float), cudaMemcpyDeviceToHost));
      for (int t = 0; t < rows; ++t) {
        const float* l = logits.data() + static_cast<size_t>(t) * s.num_experts;
        for (int e = 1; e < s.num_experts; ++e) {
          if (e % 3 != 0) {
            EXPECT_EQ(l[e], l[e - 1]) << "row " << t << ", expert " << e;
          }
        }
      }
      std::vector<int32_t> want_chosen(fused.chosen.size());
      std::vector<float> want_weights(fused.weights.size());
      RouteTopK(logits.data(), rows, s.num_experts, s.top_k, s.renormalize, want_chosen.data(), want_weights.data());
      EXPECT_EQ(fused.chosen, want_chosen);
    }
  }
}

// The fused router alone against MoeRouterLogits + MoeRouteTopK, over more rows than a decode step
// has (several row blocks, several rows per routing warp), launched twice in a row.
TEST_F(MoeDecodeTest, FusedRouterMatchesTheRoutingKernels) {
  struct Routing {
    int num_experts, top_k;
  };
  DeviceArray<uint32_t> arrivals(1);
  CUDA_ASSERT(cudaMemset(arrivals.get(), 0, sizeof(uint32_t)));
  for (const Routing r : {Routing{8, 2}, Routing{128, 8}, Routing{5, 5}, Routing{256, 16}}) {
    for (int rows : {1, 2, 9, 37}) {
      for (bool renormalize : {true, false}) {
        SCOPED_TRACE(::testing::Message() << rows << " rows, " << r.num_experts << " experts, top " << r.top_k);
        const int hidden = 256;
        cuda_test::Data16 x = cuda_test::Random16<bf16>(static_cast<size_t>(rows) * hidden, rng_);
        const std::vector<float> router = cuda_test::RandomF32(static_cast<size_t>(r.num_experts) * hidden, rng_);
        DeviceArray<uint16_t> d_x(x.bits.size());
        d_x.Upload(x.bits);
        DeviceArray<float> d_router(router.size());
        d_router.Upload(router);
        const size_t routes = static_cast<size_t>(rows) * r.top_k;
        DeviceArray<float> want_logits(static_cast<size_t>(rows) * r.num_experts), logits(want_logits.size());
        DeviceArray<int32_t> want_chosen(routes), chosen(routes);
        DeviceArray<float> want_weights(routes), weights(routes);
        const auto* xp = reinterpret_cast<const bf16*>(d_x.get());
        CUDA_ASSERT(MoeRouterLogits(xp, d_router.get(), rows, hidden, r.num_experts, want_logits.get(), nullptr));
        CUDA_ASSERT(MoeRouteTopK(want_logits.get(), rows, r.num_experts, r.top_k, renormalize, want_chosen.get(),
                                 want_weights.get(), nullptr));
        MoeDecodeRouteParams<bf16> p;
        p.x = xp;
        p.router = d_router.get();
        p.rows = rows;
        p.hidden = hidden;
        p.num_experts = r.num_experts;
        p.top_k = r.top_k;
        p.renormalize = renormalize;
        p.logits = logits.get();
        p.arrivals = arrivals.get();
        p.chosen = chosen.get();
        p.weights = weights.get();
        for (int launch = 0; launch < 2; ++launch) {
          chosen.Poison();
          weights.Poison();
          CUDA_ASSERT(MoeDecodeRoute(p, nullptr, cuda_test::kDefaultLaunch));
          EXPECT_EQ(chosen.Download(), want_chosen.Download()) << "launch " << launch;
          EXPECT_EQ(weights.Download(), want_weights.Download()) << "launch " << launch;  // bitwise: no NaN here
          EXPECT_EQ(logits.Download(), want_logits.Download()) << "launch " << launch;
          EXPECT_EQ(arrivals.Download()[0], 0u) << "launch " << launch;
        }
      }
    }
  }
}

// The router with the MLP's norm fused in against AddRmsNorm then MoeRouterLogits + MoeRouteTopK,
// bit for bit: the routing and logits, the residual sum and the normed rows it leaves for the
// kernels after it. Rows of one 8-element chunk per thread or fewer (J = 1), two (J = 2) and
// three (J = 4), from 1 row up to the router warp's 4.
TEST_F(MoeDecodeTest, FusedNormMatchesAddRmsNormThenTheRouter) {
  DeviceArray<uint32_t> arrivals(1);
  CUDA_ASSERT(cudaMemset(arrivals.get(), 0, sizeof(uint32_t)));
  const float eps = 1e-6f;
  struct Shape {
    int hidden, rows;
  };
  for (const auto [hidden, rows] : {Shape{256, 4}, Shape{2048, 1}, Shape{2048, 3}, Shape{4096, 1}, Shape{4096, 4},
                                    Shape{6144, 1}, Shape{6144, 3}}) {
    {
      SCOPED_TRACE(::testing::Message() << rows << " rows of " << hidden);
      const int num_experts = 128, top_k = 8;
      const size_t n = static_cast<size_t>(rows) * hidden;
      const std::vector<float> residual = cuda_test::RandomF32(n, rng_);
      const cuda_test::Data16 add = cuda_test::Random16<bf16>(n, rng_);
      const std::vector<float> norm = cuda_test::RandomF32(static_cast<size_t>(hidden), rng_);
      const std::vector<float> router = cuda_test::RandomF32(static_cast<size_t>(num_experts) * hidden, rng_);
      DeviceArray<float> d_residual(n), want_residual(n), d_norm(norm.size()), d_router(router.size());
      DeviceArray<uint16_t> d_add(n), normed(n), want_normed(n);
      d_residual.Upload(residual);
      want_residual.Upload(residual);
      d_add.Upload(add.bits);
      d_norm.Upload(norm);
      d_router.Upload(router);
      const size_t routes = static_cast<size_t>(rows) * top_k;
      DeviceArray<float> want_logits(static_cast<size_t>(rows) * num_experts), logits(want_logits.size());
      DeviceArray<int32_t> want_chosen(routes), chosen(routes);
      DeviceArray<float> want_weights(routes), weights(routes);
      const auto* addp = reinterpret_cast<const bf16*>(d_add.get());
      auto* want_x = reinterpret_cast<bf16*>(want_normed.get());
      CUDA_ASSERT(AddRmsNorm(want_residual.get(), addp, d_norm.get(), nullptr, rows, hidden, eps, want_x, nullptr,
                             cuda_test::kDefaultLaunch));
      CUDA_ASSERT(MoeRouterLogits<bf16>(want_x, d_router.get(), rows, hidden, num_experts, want_logits.get(), nullptr));
      CUDA_ASSERT(MoeRouteTopK(want_logits.get(), rows, num_experts, top_k, true, want_chosen.get(),
                               want_weights.get(), nullptr));
      MoeDecodeRouteParams<bf16> p;
      p.router = d_router.get();
      p.rows = rows;
      p.hidden = hidden;
      p.num_experts = num_experts;
      p.top_k = top_k;
      p.logits = logits.get();
      p.arrivals = arrivals.get();
      p.chosen = chosen.get();
      p.weights = weights.get();
      p.residual = d_residual.get();
      p.add = addp;
      p.norm_weight = d_norm.get();
      p.eps = eps;
      p.normed = reinterpret_cast<bf16*>(normed.get());
      ASSERT_TRUE(MoeDecodeRouteNormFits(rows, hidden, sizeof(bf16)));
      for (int launch = 0; launch < 2; ++launch) {
        d_residual.Upload(residual);
        chosen.Poison();
        weights.Poison();
        normed.Poison();
        CUDA_ASSERT(MoeDecodeRoute(p, nullptr, cuda_test::kDefaultLaunch));
        EXPECT_EQ(chosen.Download(), want_chosen.Download()) << "launch " << launch;
        EXPECT_EQ(weights.Download(), want_weights.Download()) << "launch " << launch;
        EXPECT_EQ(logits.Download(), want_logits.Download()) << "launch " << launch;
        EXPECT_EQ(normed.Download(), want_normed.Download()) << "launch " << launch;
        EXPECT_EQ(d_residual.Download(), want_residual.Download()) << "launch " << launch;
        EXPECT_EQ(arrivals.Download()[0], 0u) << "launch " << launch;
      }
    }
  }
}

// The whole MLP given its norm (the forward's call) against AddRmsNorm then the MLP of the
// normed rows: the same output, residual and normed rows, on the decode path (1 row: the norm
// fused into the router, or not) and the grouped one (2 rows: the norm kernel first), 16-bit
// and fp8.
TEST_F(MoeDecodeTest, MlpGivenItsNormMatchesTheNormThenTheMlp) {
  const float eps = 1e-5f;
  for (const MoeLayerShape& s : {kDecodeShapes[0], kDecodeShapes[3]}) {
    for (bool fp8 : {false, true}) {
      MoeLayerWorld world = MoeLayerWorld::Make<bf16>(s, fp8, rng_);
      const ModelConfig config = cuda_test::MoeLayerConfig(s);
      DeviceMemoryAccount memory(0);
      absl::StatusOr<MoeBuffers> buffers = MoeBuffers::Allocate(config, 2, memory);
      ASSERT_TRUE(buffers.ok()) << buffers.status();
      for (const auto& [rows, fused_norm] : {std::pair{1, true}, std::pair{1, false}, std::pair{2, true}}) {
        SCOPED_TRACE(::testing::Message() << s.name << (fp8 ? ", fp8, " : ", bf16, ") << rows << " rows"
                                          << (fused_norm ? "" : ", the norm kernel first"));
        MoeRun run = MoeRun::Of(config);
        run.fused_norm = fused_norm;
        const size_t n = static_cast<size_t>(rows) * s.hidden;
        const std::vector<float> residual = cuda_test::RandomF32(n, rng_);
        const std::vector<float> weight = cuda_test::RandomF32(static_cast<size_t>(s.hidden), rng_);
        DeviceArray<float> d_residual(n), want_residual(n), d_weight(weight.size());
        DeviceArray<uint16_t> d_add(n), normed(n), want_normed(n), out(n), want_out(n);
        d_residual.Upload(residual);
        want_residual.Upload(residual);
        d_add.Upload(cuda_test::Random16<bf16>(n, rng_).bits);
        d_weight.Upload(weight);
        const auto* addp = reinterpret_cast<const bf16*>(d_add.get());
        auto* want_x = reinterpret_cast<bf16*>(want_normed.get());
        CUDA_ASSERT(AddRmsNorm(want_residual.get(), addp, d_weight.get(), nullptr, rows, s.hidden, eps, want_x,
                               nullptr, cuda_test::kDefaultLaunch));
        want_out.Poison();
        ASSERT_TRUE(
            EnqueueMoeMlp(run, world.device, *buffers, want_x, rows, reinterpret_cast<bf16*>(want_out.get()), nullptr)
                .ok());
        normed.Poison();
        out.Poison();
        const MoeInputNorm<bf16> norm{d_residual.get(), addp, d_weight.get(), eps,
                                      reinterpret_cast<bf16*>(normed.get())};
        const absl::Status status =
            EnqueueMoeMlp(run, world.device, *buffers, norm, rows, reinterpret_cast<bf16*>(out.get()), nullptr);
        ASSERT_TRUE(status.ok()) << status;
        EXPECT_EQ(out.Download(), want_out.Download());
        EXPECT_EQ(normed.Download(), want_normed.Download());
        EXPECT_EQ(d_residual.Download(), want_residual.Download());
      }
    }
  }
}

// Captured once with PDL, replayed on new inputs: each replay gives the grouped path's bits. A
// counter left non-zero by one launch would keep the next from routing at all.
TEST_F(MoeDecodeTest, ReplaysAsACapturedGraphAgainAndAgain) {
  for (const MoeLayerShape& s : {kDecodeShapes[0], kDecodeShapes[3]}) {
    MoeLayerWorld world = MoeLayerWorld::Make<bf16>(s, /*fp8=*/true, rng_);
    const ModelConfig config = cuda_test::MoeLayerConfig(s);
    DeviceMemoryAccount memory(0);
    absl::StatusOr<MoeBuffers> buffers = MoeBuffers::Allocate(config, 2, memory);
    ASSERT_TRUE(buffers.ok()) << buffers.status();
    for (int rows : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << s.name << ", " << rows << " rows");
      MoeRun fused = MoeRun::Of(config);
      fused.tile = MoeTile::kGemvFused;
      MoeRun grouped = fused;
      grouped.tile = MoeTile::kGemv;
      const size_t n = static_cast<size_t>(rows) * s.hidden;
      DeviceArray<uint16_t> d_x(n), d_graph_out(n);
      cudaStream_t stream;
      CUDA_ASSERT(cudaStreamCreate(&stream));
      cudaGraph_t graph;
      CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      const absl::Status captured = EnqueueMoeMlp(fused, world.device, *buffers,
                                                  reinterpret_cast<const bf16*>(d_x.get()), rows,
                                                  reinterpret_cast<bf16*>(d_graph_out.get()), stream);
      CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
      ASSERT_TRUE(captured.ok()) << captured;
      cudaGraphExec_t exec;
      CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
      for (int replay = 0; replay < 3; ++replay) {
        d_x.Upload(cuda_test::Random16<bf16>(n, rng_).bits);
        d_graph_out.Poison();
        CUDA_ASSERT(cudaGraphLaunch(exec, stream));
        CUDA_ASSERT(cudaStreamSynchronize(stream));
        const std::vector<uint16_t> graph_out = d_graph_out.Download();
        const MlpResult want = Run<bf16>(grouped, world.device, *buffers, d_x, rows);
        EXPECT_EQ(graph_out, want.out) << "replay " << replay;
      }
      std::vector<uint32_t> arrivals(1, 1);
      CUDA_ASSERT(cudaMemcpy(arrivals.data(), buffers->arrivals, sizeof(uint32_t), cudaMemcpyDeviceToHost));
      EXPECT_EQ(arrivals[0], 0u);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
    }
  }
}

// The buffers take what MoeBuffers::Bytes counts (the workspace sizes its budget by it), the
// router's arrival counter among them, at zero from the start.
TEST_F(MoeDecodeTest, BuffersTakeWhatBytesCountsWithTheCounterAtZero) {
  for (const MoeLayerShape& s : kDecodeShapes) {
    for (int max_tokens : {1, 2, 200}) for (int library : {0, 1, 2}) {
      // the tiles only; with the library path's buffers; and with its fp8 ones too
      SCOPED_TRACE(::testing::Message() << s.name << ", " << max_tokens << " tokens, library " << library);
      const ModelConfig config = cuda_test::MoeLayerConfig(s);
      DeviceMemoryAccount memory(0);
      absl::StatusOr<MoeBuffers> buffers = MoeBuffers::Allocate(config, max_tokens, memory, library > 0, library > 1);
      ASSERT_TRUE(buffers.ok()) << buffers.status();
      EXPECT_EQ(memory.buffer_bytes(), MoeBuffers::Bytes(config, max_tokens, library > 0, library > 1));
      EXPECT_EQ(buffers->x8 != nullptr, library > 1);
      uint32_t arrivals = 1;
      CUDA_ASSERT(cudaMemcpy(&arrivals, buffers->arrivals, sizeof(arrivals), cudaMemcpyDeviceToHost));
      EXPECT_EQ(arrivals, 0u);
    }
  }
}

TEST_F(MoeDecodeTest, LaunchersRefuseWhatTheKernelsCannotTake) {
  DeviceArray<uint16_t> x(256);
  DeviceArray<float> router(8 * 256), logits(8), weights(8);
  DeviceArray<int32_t> chosen(8);
  DeviceArray<uint32_t> arrivals(1);
  MoeDecodeRouteParams<bf16> route;
  route.x = reinterpret_cast<const bf16*>(x.get());
  route.router = router.get();
  route.rows = 1;
  route.hidden = 256;
  route.num_experts = 8;
  route.top_k = 2;
  route.logits = logits.get();
  route.chosen = chosen.get();
  route.weights = weights.get();
  EXPECT_EQ(MoeDecodeRoute(route, nullptr, cuda_test::kDefaultLaunch), cudaErrorInvalidValue);  // no counter
  route.arrivals = arrivals.get();
  route.top_k = 9;
  EXPECT_EQ(MoeDecodeRoute(route, nullptr, cuda_test::kDefaultLaunch), cudaErrorInvalidValue);
  route.top_k = 2;
  DeviceArray<float> residual(5 * 256), norm(256);
  route.norm_weight = norm.get();  // a fused norm without its residual
  EXPECT_EQ(MoeDecodeRoute(route, nullptr, cuda_test::kDefaultLaunch), cudaErrorInvalidValue);
  route.residual = residual.get();
  route.add = reinterpret_cast<const bf16*>(x.get());
  route.normed = reinterpret_cast<bf16*>(x.get());
  route.rows = 5;  // more rows than a router warp norms
  EXPECT_EQ(MoeDecodeRoute(route, nullptr, cuda_test::kDefaultLaunch), cudaErrorInvalidValue);
  EXPECT_FALSE(MoeDecodeRouteNormFits(5, 256, 2));
  EXPECT_FALSE(MoeDecodeRouteNormFits(1, 260, 2));
  EXPECT_FALSE(MoeDecodeRouteNormFits(1, 8192 + 8, 2));
  MoeGemmParams<bf16> gate_up;  // no operands
  EXPECT_EQ(MoeDecodeGateUp(gate_up, chosen.get(), 2, nullptr, cuda_test::kDefaultLaunch), cudaErrorInvalidValue);
  MoeDownCombineParams<bf16> down;
  down.act = reinterpret_cast<const bf16*>(x.get());
  down.chosen = chosen.get();
  down.weights = weights.get();
  down.down = x.get();
  down.rows = 1;
  down.top_k = 2;
  down.k = 100;  // not a multiple of 8
  down.n = 16;
  down.out = reinterpret_cast<bf16*>(x.get());
  EXPECT_EQ(MoeDecodeDownCombine(down, nullptr, cuda_test::kDefaultLaunch), cudaErrorInvalidValue);
  down.k = 96;
  down.fp8 = true;  // and no scales
  EXPECT_EQ(MoeDecodeDownCombine(down, nullptr, cuda_test::kDefaultLaunch), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kvtier::cuda
