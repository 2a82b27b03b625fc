// Tests of CudaForwardSupports: the model features the CUDA forward lacks are refused by
// name before anything is loaded (the check needs no GPU).
#include "backend/cuda_model_support.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/random_checkpoint.h"

namespace kvtier {
namespace {

using ::testing::HasSubstr;

// The mixture-of-experts families run on CUDA at the shapes the expert kernels take; other
// shapes are refused by name, pointing at the CPU backend.
TEST(CudaModelSupportTest, RunsMixtureOfExpertsAtTheKernelsShapes) {
  for (const char* preset : {"tiny-mixtral", "tiny-qwen3moe"}) {
    absl::StatusOr<ModelConfig> config = RandomCheckpointConfig(*RandomCheckpointPreset(preset));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_TRUE(CudaForwardSupports(*config).ok()) << preset;
    ModelConfig too_many = *config;
    too_many.moe.num_experts = 512;
    EXPECT_EQ(CudaForwardSupports(too_many).code(), absl::StatusCode::kUnimplemented) << preset;
    EXPECT_THAT(CudaForwardSupports(too_many).message(), HasSubstr("512 experts"));
    EXPECT_THAT(CudaForwardSupports(too_many).message(), HasSubstr("--backend cpu"));
    ModelConfig deep = *config;
    deep.moe.top_k = 17;
    EXPECT_THAT(CudaForwardSupports(deep).message(), HasSubstr("top 17"));
    ModelConfig odd = *config;
    odd.moe.expert_intermediate_size = 40;
    EXPECT_THAT(CudaForwardSupports(odd).message(), HasSubstr("multiples of 16"));
  }
}

}  // namespace
}  // namespace kvtier
