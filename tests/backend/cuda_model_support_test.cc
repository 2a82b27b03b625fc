// Tests of CudaForwardSupports: the model features the CUDA forward lacks are refused by
// name before anything is loaded (the check needs no GPU).
#include "backend/cuda_model_support.h"

#include <cstdlib>
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

// The wgmma prefill's scored instances are asked for by exactly "1".
TEST(CudaModelSupportTest, WgmmaScoresSwitchIsOnForOneOnly) {
  const char* before = std::getenv(kCudaWgmmaScoresUnverifiedEnv);
  const std::string saved = before != nullptr ? before : "";
  unsetenv(kCudaWgmmaScoresUnverifiedEnv);
  EXPECT_FALSE(CudaWgmmaScoresUnverifiedEnabled());
  for (const char* value : {"0", "", "true", "11"}) {
    setenv(kCudaWgmmaScoresUnverifiedEnv, value, 1);
    EXPECT_FALSE(CudaWgmmaScoresUnverifiedEnabled()) << '"' << value << '"';
  }
  setenv(kCudaWgmmaScoresUnverifiedEnv, "1", 1);
  EXPECT_TRUE(CudaWgmmaScoresUnverifiedEnabled());
  if (before != nullptr) {
    setenv(kCudaWgmmaScoresUnverifiedEnv, saved.c_str(), 1);
  } else {
    unsetenv(kCudaWgmmaScoresUnverifiedEnv);
  }
}

// Every dense family runs: Phi-3's fused projections and LongRoPE; Gemma 2's soft-caps,
// GeGLU, (1 + w) and sandwich norms, scaled embeddings and query_pre_attn_scalar; Gemma 3's
// q/k norms, two RoPE bases and linear RoPE scaling; sliding windows of any length.
TEST(CudaModelSupportTest, RunsEveryDenseFamily) {
  for (const char* preset :
       {"tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-phi3", "tiny-gemma2", "tiny-gemma3"}) {
    absl::StatusOr<ModelConfig> config = RandomCheckpointConfig(*RandomCheckpointPreset(preset));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_TRUE(CudaForwardSupports(*config).ok()) << preset;
  }
  RandomCheckpointSpec gemma3 = *RandomCheckpointPreset("tiny-gemma3");
  gemma3.rope_linear_factor = 8.0;
  gemma3.sliding_window = 4;
  const absl::StatusOr<ModelConfig> config = RandomCheckpointConfig(gemma3);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->gemma3_rope.linear_factor, 8.0);
  EXPECT_EQ(config->LayerWindow(0), 4);
  EXPECT_TRUE(CudaForwardSupports(*config).ok());
}

}  // namespace
}  // namespace kvtier
