// Timing of the mixture-of-experts MLP of one layer (backend/cuda/moe_layer.h EnqueueMoeMlp:
// router, routing, grouping, the two grouped expert GEMMs, combine) on Qwen3-30B-A3B's shape
// (hidden 2048, 128 experts, top 8, expert intermediate 768) and Mixtral 8x7B's (hidden 4096,
// 8 experts, top 2, intermediate 14336), at 1 to 2,048 rows, with bf16 and fp8
// experts and every tile shape of the grouped GEMMs; the decode path (gemv-fused: moe_decode.h's
// three kernels; fused-regs: its down+combine through registers) against the grouped path's GEMV
// (gemv) at a row or two; and the library path
// (cublas: a cuBLAS GEMM per expert, moe_library.h; fp8 experts W8A8 on cuBLASLt; grouped: 16-bit
// experts as one cublasGemmGroupedBatchedEx per projection); and the grouped skinny kernel
// (skinny: every expert's routes in one wgmma launch per projection, moe_skinny.h; compute
// capability 9.0). Each MLP runs as a captured
// CUDA graph (as a decode step does), except where the run takes the library or skinny path, which reads
// the grouping back to the host and is timed eagerly (as a prefill step runs it); the runs
// alternate between two copies of the layer's weights where they fit, so the chosen experts
// come from HBM. Prints microseconds per MLP, the bytes of the experts the routing chose (each
// read once: the least a step must stream), their rate, and that rate against the HBM ceiling
// measured in the same run (a device-to-device copy, read + write).
// Not a test. usage: kvtier_cuda_moe_bench [qwen3|mixtral]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda/weight_loaders.h"
#include "bench_check.h"
#include "moe_test_data.h"
#include "model/config.h"

namespace kvtier {
namespace {

using cuda::bf16;

using Shape = cuda_test::MoeLayerShape;
constexpr Shape kShapes[] = {cuda_test::kQwen3MoeShape, cuda_test::kMixtralShape};
constexpr int kRows[] = {1, 2, 32, 64, 128, 256, 512, 1024, 2048};
constexpr cuda::MoeTile kTiles[] = {cuda::MoeTile::kAuto,   cuda::MoeTile::kGemv,       cuda::MoeTile::kGemvFused,
                                    cuda::MoeTile::k16x16,  cuda::MoeTile::k16x16Deep, cuda::MoeTile::k16x64,
                                    cuda::MoeTile::k64x64,  cuda::MoeTile::kLibrary,    cuda::MoeTile::kSkinny};

template <typename T>
T* Allocate(cuda::DeviceMemoryAccount& memory, int64_t count, const char* what) {
  absl::StatusOr<void*> p = memory.Allocate(static_cast<size_t>(count) * sizeof(T), what);
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", std::string(p.status().message()).c_str());
    std::exit(1);
  }
  return static_cast<T*>(*p);
}

// Read + write bytes per second of a 1 GiB device-to-device copy.
double HbmCeiling() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&a, bytes));
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&b, bytes));
  KVT_BENCH_CUDA_CHECK(cudaMemset(a, 1, bytes));
  cudaEvent_t start, stop;
  KVT_BENCH_CUDA_CHECK(cudaEventCreate(&start));
  KVT_BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < 13; ++i) {
    KVT_BENCH_CUDA_CHECK(cudaEventRecord(start));
    KVT_BENCH_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    KVT_BENCH_CUDA_CHECK(cudaEventRecord(stop));
    KVT_BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    KVT_BENCH_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    if (i >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaFree(a);
  cudaFree(b);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3);
}

// One copy of a layer's experts: bf16, and the same quantized to fp8.
struct LayerCopy {
  cuda::MoeExperts bf16_experts, fp8_experts;
};

LayerCopy MakeLayer(const Shape& s, uint64_t seed, cuda::DeviceMemoryAccount& memory) {
  const int64_t e = s.num_experts, h = s.hidden, inter = s.inter;
  LayerCopy copy;
  float* router = Allocate<float>(memory, e * h, "router");
  KVT_BENCH_CUDA_CHECK(cuda::FillRandom(router, e * h, seed, 0.0f, 0.05f, nullptr));
  auto* gate_up = Allocate<uint16_t>(memory, e * 2 * inter * h, "gate_up");
  auto* down = Allocate<uint16_t>(memory, e * h * inter, "down");
  KVT_BENCH_CUDA_CHECK(cuda::FillRandom(reinterpret_cast<bf16*>(gate_up), e * 2 * inter * h, seed + 1, 0.0f, 0.03f,
                                        nullptr));
  KVT_BENCH_CUDA_CHECK(cuda::FillRandom(reinterpret_cast<bf16*>(down), e * h * inter, seed + 2, 0.0f, 0.03f, nullptr));
  copy.bf16_experts = {router, gate_up, down};
  copy.fp8_experts.router = router;
  copy.fp8_experts.gate_up_codes = Allocate<uint8_t>(memory, e * 2 * inter * h, "gate_up codes");
  copy.fp8_experts.gate_up_scales = Allocate<float>(memory, e * 2 * inter, "gate_up scales");
  copy.fp8_experts.down_codes = Allocate<uint8_t>(memory, e * h * inter, "down codes");
  copy.fp8_experts.down_scales = Allocate<float>(memory, e * h, "down scales");
  for (auto [src, rows, cols, codes, scales] :
       {std::tuple{gate_up, e * 2 * inter, h, copy.fp8_experts.gate_up_codes, copy.fp8_experts.gate_up_scales},
        std::tuple{down, e * h, inter, copy.fp8_experts.down_codes, copy.fp8_experts.down_scales}}) {
    const absl::Status status = cuda::QuantizeOnDevice(src, DType::kBF16, rows, cols, codes, scales);
    if (!status.ok()) {
      std::fprintf(stderr, "quantize: %s\n", std::string(status.message()).c_str());
      std::exit(1);
    }
  }
  return copy;
}

void RunShape(const Shape& s, double ceiling) {
  const ModelConfig config = cuda_test::MoeLayerConfig(s);
  cuda::DeviceMemoryAccount memory(0);
  const int max_rows = *std::max_element(std::begin(kRows), std::end(kRows));
  absl::StatusOr<cuda::MoeBuffers> buffers =
      cuda::MoeBuffers::Allocate(config, max_rows, memory, /*library=*/true, /*library_fp8=*/true);
  if (!buffers.ok()) {
    std::fprintf(stderr, "%s\n", std::string(buffers.status().message()).c_str());
    std::exit(1);
  }
  // Two copies where both fit with room to spare, so consecutive MLPs read different bytes.
  const int64_t layer_bytes = 3LL * s.num_experts * s.inter * s.hidden * 3;  // bf16 + fp8
  size_t free_bytes = 0, total_bytes = 0;
  KVT_BENCH_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int copies = static_cast<int64_t>(free_bytes) > 3 * layer_bytes ? 2 : 1;
  std::vector<LayerCopy> layers;
  for (int c = 0; c < copies; ++c) layers.push_back(MakeLayer(s, 100 + 10 * static_cast<uint64_t>(c), memory));
  auto* x = Allocate<bf16>(memory, static_cast<int64_t>(max_rows) * s.hidden, "x");
  auto* out = Allocate<bf16>(memory, static_cast<int64_t>(max_rows) * s.hidden, "out");
  KVT_BENCH_CUDA_CHECK(cuda::FillRandom(x, static_cast<int64_t>(max_rows) * s.hidden, 7, 0.0f, 1.0f, nullptr));
  cudaStream_t stream;
  KVT_BENCH_CUDA_CHECK(cudaStreamCreate(&stream));
  cublasHandle_t cublas = nullptr;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    std::exit(1);
  }
  constexpr size_t kFp8Workspace = 32 << 20;
  void* fp8_workspace = Allocate<uint8_t>(memory, kFp8Workspace, "fp8 gemm workspace");
  absl::StatusOr<std::unique_ptr<cuda::Fp8Gemm>> fp8_gemm = cuda::Fp8Gemm::Create(fp8_workspace, kFp8Workspace);
  if (!fp8_gemm.ok()) {
    std::printf("no fp8 GEMM (fp8 experts run the tiles): %s\n", fp8_gemm.status().ToString().c_str());
  }
  // The grouped skinny kernel's workspace (MoeTile::kSkinny), where the GPU runs it.
  int device_sms = 0;
  KVT_BENCH_CUDA_CHECK(cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, 0));
  void* skinny_workspace = nullptr;
  if (cuda::SkinnyGemmDeviceOk(0)) {
    KVT_BENCH_CUDA_CHECK(cuda::SkinnyGemmInit());
    const size_t bytes = cuda::SkinnyGemmWorkspaceBytes(cuda::kSkinnyGemmMaxRows, device_sms);
    skinny_workspace = Allocate<uint8_t>(memory, static_cast<int64_t>(bytes), "skinny workspace");
    KVT_BENCH_CUDA_CHECK(cudaMemset(skinny_workspace, 0, bytes));
  }
  cudaEvent_t start, stop;
  KVT_BENCH_CUDA_CHECK(cudaEventCreate(&start));
  KVT_BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  std::printf("%s: hidden %d, %d experts, top %d, expert intermediate %d; %d weight copies\n", s.name, s.hidden,
              s.num_experts, s.top_k, s.inter, copies);
  for (int rows : kRows) {
    for (bool fp8 : {false, true}) {
      for (cuda::MoeTile tile : kTiles) for (bool grouped : {false, true}) {
        // The library path with 16-bit experts also as one grouped GEMM per projection; the decode
        // path also with its down+combine's weights through registers (moe_down_bulk 0); the
        // skinny path also on its serial pipeline.
        const bool fused = tile == cuda::MoeTile::kGemvFused, skinny = tile == cuda::MoeTile::kSkinny;
        if (grouped && !fused && !skinny && (tile != cuda::MoeTile::kLibrary || fp8)) continue;
        if (skinny && rows < 32) continue;  // prefill-sized steps only
        // The per-route GEMV reads an expert once per route: only a data point past decode sizes.
        if ((tile == cuda::MoeTile::kGemv || tile == cuda::MoeTile::kGemvFused) && rows > 64) continue;
        // The library path reads the grouping back to the host: not capturable, so where the run
        // takes it (named, or kAuto's pick) the MLP is timed eagerly, as a prefill step runs it.
        cuda::MoeRun run = cuda::MoeRun::Of(config);
        run.tile = tile;
        run.cublas = cublas;
        run.fp8_gemm = fp8_gemm.ok() ? fp8_gemm->get() : nullptr;
        if (tile == cuda::MoeTile::kLibrary) run.library_grouped = grouped;  // kAuto: the model's default
        if (tile == cuda::MoeTile::kSkinny && skinny_workspace == nullptr) continue;
        run.skinny_workspace = skinny_workspace;  // kAuto takes it only where run.skinny (the default) says so
        run.sm_count = device_sms;
        if (skinny && grouped) run.skinny_pipeline = cuda::SkinnyPipeline::kSerial;
        if (fused) run.launch.moe_down_bulk = grouped ? 0 : 1;
        if (fp8 && run.fp8_gemm == nullptr) run.cublas = nullptr;  // the tiles, as EnqueueMoeMlp would fall back
        const cuda::MoeExperts& any_copy = fp8 ? layers[0].fp8_experts : layers[0].bf16_experts;
        const cuda::MoeTile runs = cuda::MoeTileRun(run, static_cast<int64_t>(rows) * s.top_k, any_copy);
        const bool library = runs == cuda::MoeTile::kLibrary || runs == cuda::MoeTile::kSkinny;
        if (tile == cuda::MoeTile::kLibrary && run.cublas == nullptr) continue;
        // One graph per weight copy, each one MLP.
        std::vector<cudaGraphExec_t> graphs;
        for (const LayerCopy& layer : library ? std::vector<LayerCopy>{} : layers) {
          cudaGraph_t graph;
          KVT_BENCH_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
          const absl::Status status =
              cuda::EnqueueMoeMlp(run, fp8 ? layer.fp8_experts : layer.bf16_experts, *buffers, x, rows, out, stream);
          KVT_BENCH_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
          if (!status.ok()) {
            std::fprintf(stderr, "moe mlp: %s\n", std::string(status.message()).c_str());
            std::exit(1);
          }
          cudaGraphExec_t exec;
          KVT_BENCH_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
          cudaGraphDestroy(graph);
          graphs.push_back(exec);
        }
        auto run_one = [&](int i) {
          if (!library) {
            KVT_BENCH_CUDA_CHECK(cudaGraphLaunch(graphs[i % graphs.size()], stream));
            return;
          }
          const LayerCopy& layer = layers[static_cast<size_t>(i) % layers.size()];
          const absl::Status status =
              cuda::EnqueueMoeMlp(run, fp8 ? layer.fp8_experts : layer.bf16_experts, *buffers, x, rows, out, stream);
          if (!status.ok()) {
            std::fprintf(stderr, "moe mlp: %s\n", std::string(status.message()).c_str());
            std::exit(1);
          }
        };
        for (int i = 0; i < 4; ++i) run_one(i);
        constexpr int kIters = 20;
        KVT_BENCH_CUDA_CHECK(cudaEventRecord(start, stream));
        for (int i = 0; i < kIters; ++i) run_one(i);
        KVT_BENCH_CUDA_CHECK(cudaEventRecord(stop, stream));
        KVT_BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        KVT_BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        for (cudaGraphExec_t g : graphs) cudaGraphExecDestroy(g);
        const double us = 1000.0 * ms / kIters;
        // The experts the last MLP chose (the same input every time: the same experts).
        std::vector<int32_t> chosen(static_cast<size_t>(rows) * s.top_k);
        KVT_BENCH_CUDA_CHECK(cudaMemcpy(chosen.data(), buffers->chosen, chosen.size() * sizeof(int32_t),
                                        cudaMemcpyDeviceToHost));
        const size_t distinct = std::set<int32_t>(chosen.begin(), chosen.end()).size();
        const double per_expert =
            3.0 * s.inter * s.hidden * (fp8 ? 1.0 : 2.0) + (fp8 ? 4.0 * (2 * s.inter + s.hidden) : 0);
        const double bytes = static_cast<double>(distinct) * per_expert + 4.0 * s.num_experts * s.hidden;
        const double flops = 2.0 * 3.0 * static_cast<double>(rows) * s.top_k * s.inter * s.hidden;
        const double rate = bytes / (us * 1e-6);
        std::printf("moe %-14s %-4s rows %4d tile %-10s (%s) %9.1f us  %3zu experts %7.1f MB  %5.2f TB/s"
                    " = %.2f of HBM %.2f  %6.1f TFLOP/s\n",
                    s.name, fp8 ? "fp8" : "bf16", rows,
                    grouped ? (fused ? "fused-regs" : skinny ? "skinny/ser" : "grouped") : cuda::MoeTileName(tile),
                    cuda::MoeTileName(runs), us,
                    distinct, bytes / 1e6, rate / 1e12, rate / ceiling, ceiling / 1e12, flops / (us * 1e-6) / 1e12);
        std::fflush(stdout);
      }
    }
  }
  cublasDestroy(cublas);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) {
  const char* only = argc > 1 ? argv[1] : nullptr;
  const double ceiling = kvtier::HbmCeiling();
  std::printf("HBM copy ceiling (read + write): %.2f TB/s\n", ceiling / 1e12);
  for (const kvtier::Shape& s : kvtier::kShapes) {
    if (only != nullptr && std::strncmp(s.name, only, std::strlen(only)) != 0) continue;
    kvtier::RunShape(s, ceiling);
  }
  return 0;
}
