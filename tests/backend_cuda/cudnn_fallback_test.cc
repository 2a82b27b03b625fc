// Prefill attention asked of cuDNN where none loads: the backend is created all the same,
// runs prefill on its own kernel (logits as the CPU backend's), and compute_path says why.
// Its own binary: the process's cuDNN is loaded once (CudnnLibrary::Shared), and here it must
// be the absent one. Skips without a GPU.
#include <stdlib.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cudnn_library.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/random_checkpoint.h"

namespace kvtier {
namespace {

TEST(CudnnFallbackTest, AbsentLibraryRunsTheOwnKernelAndSaysWhy) {
  KVT_SKIP_WITHOUT_CUDA();
  setenv(cuda::CudnnLibrary::kPathVariable, "/nonexistent/libcudnn.so.9", 1);
  auto spec = RandomCheckpointPreset("small-llama");
  ASSERT_TRUE(spec.ok());
  spec->head_dim = 128;
  spec->dtype = DType::kBF16;
  const std::string dir = ::testing::TempDir() + "/kvtier_cudnn_fallback";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteRandomCheckpoint(*spec, dir).ok());
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  BackendOptions options;
  options.cuda.prefill_cudnn = CudnnPrefillUse::kEveryChunk;
  auto gpu = CudaBackend::Create(**checkpoint, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::string path = (*gpu)->compute_path();
  EXPECT_NE(path.find("(cudnn not used: cuDNN (/nonexistent/libcudnn.so.9) cannot be loaded"),
            std::string::npos)
      << path;
  EXPECT_EQ(path.rfind("cuda, prefill attention ", 0), 0u) << path;
  auto cpu = CpuBackend::Create(**checkpoint, options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE((*cpu)->AllocateKvPool(16).ok());
  ASSERT_TRUE((*gpu)->AllocateKvPool(16).ok());
  std::vector<int32_t> tokens(100), table = {3, 1, 4, 0, 2, 5, 7};
  std::mt19937 rng(7);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % spec->vocab);
  ForwardBatch batch;
  batch.chunks.push_back({tokens, 0, table, true});
  std::vector<float> ref, got;
  ASSERT_TRUE((*cpu)->Forward(batch, &ref).ok());
  const absl::Status st = (*gpu)->Forward(batch, &got);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_LT(cuda_test::RelativeError(got, ref), 3e-2);
  EXPECT_EQ((*gpu)->compute_path(), path);
}

}  // namespace
}  // namespace kvtier
