// The whole mixture-of-experts MLP on the GPU (backend/cuda/moe_layer.h EnqueueMoeMlp) against
// the CPU backend's MoeMlp (cpu_moe.h) on the same weights and inputs: Mixtral's and
// Qwen3-MoE's routing, 1 row to hundreds, every tile shape, 16-bit and fp8 experts; and the
// same MLP captured as a CUDA graph (as a decode step is) and replayed on new inputs. Skips
// without a GPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/cpu_moe.h"
#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/moe_layer.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "moe_test_data.h"

namespace kvtier::cuda {
namespace {

using cuda_test::Data16;
using cuda_test::DeviceArray;
using cuda_test::ExpertMatrices;
using cuda_test::RandomExperts;
using cuda_test::RandomF32;
using cuda_test::RelativeError;
using cuda_test::Tolerance;

using LayerShape = cuda_test::MoeLayerShape;
constexpr LayerShape kShapes[] = {{"mixtral-like", 64, 8, 2, 96, true},
                                  {"qwen3moe-like", 128, 16, 4, 48, false},
                                  {"qwen3moe-many-experts", 256, 128, 8, 64, true}};

CpuMatrix F32Matrix(const float* values, int64_t rows, int64_t cols) {
  CpuMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.f32.assign(values, values + rows * cols);
  return m;
}

// One layer's weights on both sides: the device's stacked experts and the CPU's per-expert
// matrices of the same values.
class MoeLayerWorld {
 public:
  template <typename T>
  static MoeLayerWorld Make(const LayerShape& s, bool fp8, std::mt19937& rng) {
    MoeLayerWorld w;
    const std::vector<float> router = RandomF32(static_cast<size_t>(s.num_experts) * s.hidden, rng);
    const ExpertMatrices gate_up = RandomExperts<T>(s.num_experts, 2 * s.inter, s.hidden, fp8, rng);
    const ExpertMatrices down = RandomExperts<T>(s.num_experts, s.hidden, s.inter, fp8, rng);
    w.cpu.router = F32Matrix(router.data(), s.num_experts, s.hidden);
    for (int e = 0; e < s.num_experts; ++e) {
      const float* gu = gate_up.values.data() + static_cast<size_t>(e) * 2 * s.inter * s.hidden;
      w.cpu.experts.push_back({F32Matrix(gu, s.inter, s.hidden), F32Matrix(gu + s.inter * s.hidden, s.inter, s.hidden),
                               F32Matrix(down.values.data() + static_cast<size_t>(e) * s.hidden * s.inter, s.hidden,
                                         s.inter)});
    }
    w.Upload(router, &w.device.router);
    if (fp8) {
      w.Upload(gate_up.codes, &w.device.gate_up_codes);
      w.Upload(gate_up.scales, &w.device.gate_up_scales);
      w.Upload(down.codes, &w.device.down_codes);
      w.Upload(down.scales, &w.device.down_scales);
    } else {
      w.Upload(gate_up.bits, &w.device.gate_up);
      w.Upload(down.bits, &w.device.down);
    }
    return w;
  }

  CpuMoeWeights cpu;
  MoeExperts device;

 private:
  MoeLayerWorld() : memory_(std::make_unique<DeviceMemoryAccount>(0)) {}
  template <typename V>
  void Upload(const std::vector<V>& host, V** out) {
    absl::StatusOr<void*> p = memory_->Allocate(host.size() * sizeof(V), "test weights");
    ASSERT_TRUE(p.ok()) << p.status();
    *out = static_cast<V*>(*p);
    ASSERT_EQ(cudaMemcpy(*out, host.data(), host.size() * sizeof(V), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::unique_ptr<DeviceMemoryAccount> memory_;  // the device weights (a unique_ptr: the world moves)
};

class MoeLayerTest : public ::testing::Test {
 protected:
  void SetUp() override { KVT_SKIP_WITHOUT_CUDA(); }
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(MoeLayerTest, MatchesTheCpuBackendsMoeMlp) {
  cuda_test::ForEachElem([&]<typename T>() {
    for (const LayerShape& s : kShapes) {
      for (bool fp8 : {false, true}) {
        SCOPED_TRACE(::testing::Message() << s.name << (fp8 ? ", fp8 experts" : ", 16-bit experts"));
        MoeLayerWorld world = MoeLayerWorld::Make<T>(s, fp8, rng_);
        const ModelConfig config = cuda_test::MoeLayerConfig(s);
        constexpr int kMaxRows = 200;
        DeviceMemoryAccount memory(0);
        absl::StatusOr<MoeBuffers> buffers = MoeBuffers::Allocate(config, kMaxRows, memory);
        ASSERT_TRUE(buffers.ok()) << buffers.status();
        for (int rows : {1, 2, 17, kMaxRows}) {
          Data16 x = cuda_test::Random16<T>(static_cast<size_t>(rows) * s.hidden, rng_);
          CpuMoeScratch scratch;
          scratch.Reserve(config, rows);
          std::vector<uint8_t> activations;
          const float* cpu_out = MoeMlp(world.cpu, config.moe, x.values.data(), rows, s.hidden, nullptr, &scratch,
                                        &activations);
          const std::vector<float> want(cpu_out, cpu_out + static_cast<size_t>(rows) * s.hidden);
          DeviceArray<uint16_t> d_x(x.bits.size());
          d_x.Upload(x.bits);
          for (MoeTile tile :
               {MoeTile::kAuto, MoeTile::kGemv, MoeTile::k16x16, MoeTile::k16x16Deep, MoeTile::k16x64,
                MoeTile::k64x64}) {
            SCOPED_TRACE(::testing::Message() << rows << " rows, tile " << MoeTileName(tile));
            MoeRun run = MoeRun::Of(config);
            run.tile = tile;
            DeviceArray<uint16_t> d_out(want.size());
            const absl::Status status =
                EnqueueMoeMlp(run, world.device, *buffers, reinterpret_cast<const T*>(d_x.get()), rows,
                              reinterpret_cast<T*>(d_out.get()), nullptr);
            ASSERT_TRUE(status.ok()) << status;
            EXPECT_LT(RelativeError(cuda_test::ToF32<T>(d_out.Download()), want), Tolerance<T>());
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

// A decode step's MLP captured once and replayed on other inputs: the graph gives what a direct
// run gives (no host sync inside, launches sized by the row count only).
TEST_F(MoeLayerTest, ReplaysAsACapturedGraph) {
  const LayerShape& s = kShapes[2];
  MoeLayerWorld world = MoeLayerWorld::Make<bf16>(s, /*fp8=*/false, rng_);
  const ModelConfig config = cuda_test::MoeLayerConfig(s);
  DeviceMemoryAccount memory(0);
  absl::StatusOr<MoeBuffers> buffers = MoeBuffers::Allocate(config, 8, memory);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  const MoeRun run = MoeRun::Of(config);
  for (int rows : {1, 4}) {
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
      ASSERT_TRUE(EnqueueMoeMlp(run, world.device, *buffers, reinterpret_cast<const bf16*>(d_x.get()), rows,
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

}  // namespace
}  // namespace kvtier::cuda
