// The whole mixture-of-experts MLP on the GPU (backend/cuda/moe_layer.h EnqueueMoeMlp) against
// the CPU backend's MoeMlp (cpu_moe.h) on the same weights and inputs: Mixtral's and
// Qwen3-MoE's routing, 1 row to hundreds, every tile shape, the library path (cuBLAS per
// expert; fp8 experts W8A8 on cuBLASLt, or the tiles without it) and the grouped skinny path
// (compute capability 9.0), 16-bit and fp8 experts; and the same MLP captured as a CUDA graph
// (as a decode step is) and replayed on new inputs, where the library path, not capturable,
// falls back to the tiles. Skips without a GPU, but for the skinny path's host-side problem
// list.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/moe_skinny.h"
#include "backend/cuda/skinny_gemm.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "moe_layer_world.h"
#include "moe_test_data.h"

namespace kvtier::cuda {
namespace {

using cuda_test::Data16;
using cuda_test::DeviceArray;
using cuda_test::MoeLayerWorld;
using cuda_test::RelativeError;
using cuda_test::Tolerance;

using LayerShape = cuda_test::MoeLayerShape;
constexpr LayerShape kShapes[] = {{"mixtral-like", 64, 8, 2, 96, true},
                                  {"qwen3moe-like", 128, 16, 4, 48, false},
                                  {"qwen3moe-many-experts", 256, 128, 8, 64, true}};

// fp8 experts on the library path quantize the activations too (x and the gated product, per
// row to E4M3: W8A8), which the CPU's MoeMlp (W8A16) does not: 0.03 to 0.06 of relative error
// on these shapes over many rows, up to 0.095 seen for a single row (its few outputs average
// less of the rounding away). A row given another row's scale (RowScaledInput's factors differ
// up to 8x) or a route given another expert errs by far more.
constexpr double kW8A8Tolerance = 0.12;
constexpr size_t kFp8GemmWorkspace = 32 << 20;

class MoeLayerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVT_SKIP_WITHOUT_CUDA();
    ASSERT_EQ(cublasCreate(&cublas_), CUBLAS_STATUS_SUCCESS);
    fp8_workspace_ = std::make_unique<DeviceArray<uint8_t>>(kFp8GemmWorkspace);
    absl::StatusOr<std::unique_ptr<Fp8Gemm>> gemm = Fp8Gemm::Create(fp8_workspace_->get(), kFp8GemmWorkspace);
    if (gemm.ok()) fp8_gemm_ = std::move(*gemm);  // else fp8 experts' library runs fall back to the tiles
    if (SkinnyGemmDeviceOk(0)) {  // else the skinny path falls back to the tiles
      ASSERT_EQ(SkinnyGemmInit(), cudaSuccess);
      ASSERT_EQ(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
      const size_t bytes = SkinnyGemmWorkspaceBytes(kSkinnyGemmMaxRows, sm_count_);
      skinny_workspace_ = std::make_unique<DeviceArray<uint8_t>>(bytes);
      ASSERT_EQ(cudaMemset(skinny_workspace_->get(), 0, bytes), cudaSuccess);
    }
  }
  // Points `run` at the skinny path's workspace (none without a compute capability 9.0 GPU).
  void AllowSkinny(MoeRun& run) const {
    run.skinny_workspace = skinny_workspace_ != nullptr ? skinny_workspace_->get() : nullptr;
    run.sm_count = sm_count_;
  }
  void TearDown() override {
    fp8_gemm_.reset();
    if (cublas_ != nullptr) cublasDestroy(cublas_);
  }
  std::mt19937 rng_{std::random_device{}()};
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<DeviceArray<uint8_t>> fp8_workspace_;
  std::unique_ptr<Fp8Gemm> fp8_gemm_;
  std::unique_ptr<DeviceArray<uint8_t>> skinny_workspace_;
  int sm_count_ = 0;
};

// x (rows, hidden) with each row scaled by its own factor (1 to 8), so a row given another
// row's per-token fp8 scale is off by a visible factor.
template <typename T>
Data16 RowScaledInput(int rows, int hidden, std::mt19937& rng) {
  Data16 x = cuda_test::Random16<T>(static_cast<size_t>(rows) * hidden, rng);
  for (int r = 0; r < rows; ++r) {
    const float factor = static_cast<float>(1 + (r * 5) % 8);
    for (int c = 0; c < hidden; ++c) {
      const size_t i = static_cast<size_t>(r) * hidden + c;
      x.bits[i] = cuda_test::Elem16<T>::Bits(x.values[i] * factor);
      x.values[i] = cuda_test::Elem16<T>::Value(x.bits[i]);
    }
  }
  return x;
}

TEST_F(MoeLayerTest, MatchesTheCpuBackendsMoeMlp) {
  cuda_test::ForEachElem([&]<typename T>() {
    for (const LayerShape& s : kShapes) {
      for (bool fp8 : {false, true}) {
        SCOPED_TRACE(::testing::Message() << s.name << (fp8 ? ", fp8 experts" : ", 16-bit experts"));
        MoeLayerWorld world = MoeLayerWorld::Make<T>(s, fp8, rng_);
        const ModelConfig config = cuda_test::MoeLayerConfig(s);
        constexpr int kMaxRows = 200;
        DeviceMemoryAccount memory(0);
        absl::StatusOr<MoeBuffers> buffers =
            MoeBuffers::Allocate(config, kMaxRows, memory, /*library=*/true, /*library_fp8=*/true);
        ASSERT_TRUE(buffers.ok()) << buffers.status();
        for (int rows : {1, 2, 17, kMaxRows}) {
          Data16 x = RowScaledInput<T>(rows, s.hidden, rng_);
          const std::vector<float> want = world.CpuMlp(config, x.values, rows);
          DeviceArray<uint16_t> d_x(x.bits.size());
          d_x.Upload(x.bits);
          for (MoeTile tile :
               {MoeTile::kAuto, MoeTile::kGemv, MoeTile::kGemvFused, MoeTile::k16x16, MoeTile::k16x16Deep,
                MoeTile::k16x64, MoeTile::k64x64, MoeTile::kLibrary, MoeTile::kSkinny}) {
            // fp8 experts' library path with cuBLASLt's fp8 GEMMs and without (the tiles instead);
            // 16-bit experts' as a GEMM per expert and as one grouped GEMM per projection.
            for (bool variant : {false, true}) {
              const bool with_fp8_gemm = fp8 && !variant, grouped = !fp8 && variant;
              if (variant && tile != MoeTile::kLibrary && (tile != MoeTile::kAuto || !fp8)) continue;
              SCOPED_TRACE(::testing::Message() << rows << " rows, tile " << MoeTileName(tile)
                                                << (fp8 && !with_fp8_gemm ? ", no fp8 GEMM" : "")
                                                << (grouped ? ", grouped" : ""));
              MoeRun run = MoeRun::Of(config);
              run.tile = tile;
              run.cublas = cublas_;
              run.fp8_gemm = with_fp8_gemm ? fp8_gemm_.get() : nullptr;
              if (tile == MoeTile::kLibrary) run.library_grouped = grouped;  // kAuto: the model's default
              AllowSkinny(run);
              const bool w8a8 =
                  std::is_same_v<T, bf16> && fp8 && run.fp8_gemm != nullptr &&
                  MoeTileRun(run, static_cast<int64_t>(rows) * s.top_k, world.device) == MoeTile::kLibrary;
              DeviceArray<uint16_t> d_out(want.size());
              const absl::Status status =
                  EnqueueMoeMlp(run, world.device, *buffers, reinterpret_cast<const T*>(d_x.get()), rows,
                                reinterpret_cast<T*>(d_out.get()), nullptr);
              ASSERT_TRUE(status.ok()) << status;
              const double error = RelativeError(cuda_test::ToF32<T>(d_out.Download()), want);
              EXPECT_LT(error, w8a8 ? kW8A8Tolerance : Tolerance<T>());
              if (w8a8) std::printf("[w8a8] %s, %d rows: relative error %.4f\n", s.name, rows, error);
            }
          }
        }
        MoeRun run = MoeRun::Of(config);
        DeviceArray<uint16_t> d_x(static_cast<size_t>(kMaxRows + 1) * s.hidden), d_out(d_x.size());
        EXPECT_FALSE(EnqueueMoeMlp(run, world.device, *buffers, reinterpret_cast<const T*>(d_x.get()), kMaxRows + 1,
                                   reinterpret_cast<T*>(d_out.get()), nullptr)
                         .ok());
      }
    }
  });
}

// A row of NaN (an overflow upstream) routes to real experts on every path: the step runs,
// nothing is read out of bounds, and the other rows' outputs are the CPU's.
TEST_F(MoeLayerTest, ANanRowLeavesTheOtherRowsAlone) {
  const LayerShape& s = kShapes[0];
  for (bool fp8 : {false, true}) {
    MoeLayerWorld world = MoeLayerWorld::Make<bf16>(s, fp8, rng_);
    const ModelConfig config = cuda_test::MoeLayerConfig(s);
    DeviceMemoryAccount memory(0);
    absl::StatusOr<MoeBuffers> buffers =
        MoeBuffers::Allocate(config, 200, memory, /*library=*/true, /*library_fp8=*/true);
    ASSERT_TRUE(buffers.ok()) << buffers.status();
    for (int rows : {1, 17, 200}) {
      Data16 x = cuda_test::Random16<bf16>(static_cast<size_t>(rows) * s.hidden, rng_);
      x.bits[3] = 0x7fc0;  // row 0: one NaN
      x.values[3] = NAN;
      const std::vector<float> want = world.CpuMlp(config, x.values, rows);
      DeviceArray<uint16_t> d_x(x.bits.size());
      d_x.Upload(x.bits);
      for (MoeTile tile : {MoeTile::kAuto, MoeTile::k16x16, MoeTile::kGemv, MoeTile::kLibrary}) {
        SCOPED_TRACE(::testing::Message() << (fp8 ? "fp8" : "bf16") << ", " << rows << " rows, " << MoeTileName(tile));
        MoeRun run = MoeRun::Of(config);
        run.tile = tile;
        run.cublas = cublas_;
        run.fp8_gemm = fp8_gemm_.get();
        DeviceArray<uint16_t> d_out(want.size());
        ASSERT_TRUE(EnqueueMoeMlp(run, world.device, *buffers, reinterpret_cast<const bf16*>(d_x.get()), rows,
                                  reinterpret_cast<bf16*>(d_out.get()), nullptr)
                        .ok());
        CUDA_ASSERT(cudaDeviceSynchronize());
        if (rows == 1) continue;
        const std::vector<float> got = cuda_test::ToF32<bf16>(d_out.Download());
        const auto rest = [&](const std::vector<float>& v) {
          return std::vector<float>(v.begin() + s.hidden, v.end());
        };
        const bool w8a8 =
            fp8 && MoeTileRun(run, static_cast<int64_t>(rows) * s.top_k, world.device) == MoeTile::kLibrary;
        EXPECT_LT(RelativeError(rest(got), rest(want)), w8a8 ? kW8A8Tolerance : Tolerance<bf16>());
      }
    }
  }
}

// A decode step's MLP captured once and replayed on other inputs: the graph gives what a direct
// run gives (no host sync inside, launches sized by the row count only).
TEST_F(MoeLayerTest, ReplaysAsACapturedGraph) {
  const LayerShape& s = kShapes[2];
  MoeLayerWorld world = MoeLayerWorld::Make<bf16>(s, /*fp8=*/false, rng_);
  const ModelConfig config = cuda_test::MoeLayerConfig(s);
  DeviceMemoryAccount memory(0);
  absl::StatusOr<MoeBuffers> buffers = MoeBuffers::Allocate(config, 9, memory, /*library=*/true);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  MoeRun run = MoeRun::Of(config);
  AllowSkinny(run);
  for (int rows : {1, 4, 8, 9}) {
    // The library and skinny paths read the grouping back to the host: under capture kAuto's
    // tiles run instead, which the direct run (not capturing) is given by name.
    run.tile = rows == 8 ? MoeTile::kLibrary : rows == 9 ? MoeTile::kSkinny : MoeTile::kAuto;
    run.cublas = cublas_;
    MoeRun direct = run;
    direct.tile = MoeTile::kAuto;
    SCOPED_TRACE(::testing::Message() << rows << " rows");
    const size_t n = static_cast<size_t>(rows) * s.hidden;
    DeviceArray<uint16_t> d_x(n), d_graph_out(n), d_direct_out(n);
    cudaStream_t stream;
    CUDA_ASSERT(cudaStreamCreate(&stream));
    cudaGraph_t graph;
    CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const absl::Status captured = EnqueueMoeMlp(run, world.device, *buffers, reinterpret_cast<const bf16*>(d_x.get()),
                                                rows, reinterpret_cast<bf16*>(d_graph_out.get()), stream);
    CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
    ASSERT_TRUE(captured.ok()) << captured;
    cudaGraphExec_t exec;
    CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 3; ++replay) {
      d_x.Upload(cuda_test::Random16<bf16>(n, rng_).bits);
      CUDA_ASSERT(cudaGraphLaunch(exec, stream));
      CUDA_ASSERT(cudaStreamSynchronize(stream));
      ASSERT_TRUE(EnqueueMoeMlp(direct, world.device, *buffers, reinterpret_cast<const bf16*>(d_x.get()), rows,
                                reinterpret_cast<bf16*>(d_direct_out.get()), stream)
                      .ok());
      CUDA_ASSERT(cudaStreamSynchronize(stream));
      EXPECT_EQ(d_graph_out.Download(), d_direct_out.Download()) << "replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

// The skinny path's problems: every route of every expert in exactly one problem, in slot
// order, none longer than the token tile, which is the smallest that holds the busiest expert.
TEST(MoeSkinnyProblemsTest, CoverEveryRouteOnceWithinTheTile) {
  const std::vector<int32_t> offsets = {0, 5, 5, 40, 300, 301};  // 5, 0, 35, 260 and 1 routes
  EXPECT_EQ(MoeSkinnyTileRows(offsets), kSkinnyGemmMaxRows);
  EXPECT_EQ(MoeSkinnyTileRows({0, 5, 5, 40}), 64);
  EXPECT_EQ(MoeSkinnyTileRows({0, 16, 32}), 16);
  EXPECT_EQ(MoeSkinnyTileRows({0, 0, 0}), 16);
  for (int tile : {16, 64, 128}) {
    const std::vector<int4> problems = MoeSkinnyProblems(offsets, tile);
    int32_t next = 0;
    for (const int4& q : problems) {
      ASSERT_EQ(q.y, next) << "tile " << tile;
      ASSERT_GE(q.z, 1);
      ASSERT_LE(q.z, tile);
      ASSERT_GE(q.y, offsets[q.x]);
      ASSERT_LE(q.y + q.z, offsets[q.x + 1]) << "a problem past its expert's routes";
      next += q.z;
    }
    EXPECT_EQ(next, offsets.back());
    EXPECT_LE(static_cast<int64_t>(problems.size()), MoeSkinnyMaxProblems(offsets.back(), 5));
  }
  EXPECT_EQ(MoeSkinnyProblems(offsets, 128).size(), 6u);  // 5; 35; 128, 128 and 4; 1
  EXPECT_TRUE(MoeSkinnyProblems({0, 0, 0}, 16).empty());
}

}  // namespace
}  // namespace kvtier::cuda
