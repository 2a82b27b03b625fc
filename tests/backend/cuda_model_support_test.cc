// Tests of CudaForwardSupports: the model features the CUDA forward lacks are refused by
// name before anything is loaded (the check needs no GPU).
#include "backend/cuda_model_support.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/random_checkpoint.h"

namespace kvtier {
namespace {

using ::testing::HasSubstr;

TEST(CudaModelSupportTest, RefusesTheFamiliesFeaturesByName) {
  const std::pair<const char*, const char*> refused[] = {
      {"tiny-gemma2", "Gemma2ForCausalLM needs logit soft-capping"},
      {"tiny-gemma3", "Gemma3ForCausalLM needs the GELU-tanh (GeGLU) MLP"},
      {"tiny-mixtral", "MixtralForCausalLM needs mixture-of-experts layers"},
      {"tiny-qwen3moe", "Qwen3MoeForCausalLM needs mixture-of-experts layers"}};
  for (const auto& [preset, message] : refused) {
    absl::StatusOr<RandomCheckpointSpec> spec = RandomCheckpointPreset(preset);
    ASSERT_TRUE(spec.ok());
    absl::StatusOr<ModelConfig> config = RandomCheckpointConfig(*spec);
    ASSERT_TRUE(config.ok()) << config.status();
    const absl::Status status = CudaForwardSupports(*config);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << preset;
    EXPECT_THAT(status.message(), HasSubstr(message));
    EXPECT_THAT(status.message(), HasSubstr("--backend cpu"));
  }
  // Without soft-caps the next missing feature is named.
  RandomCheckpointSpec gemma2 = *RandomCheckpointPreset("tiny-gemma2");
  gemma2.attn_logit_softcap.reset();
  gemma2.final_logit_softcap.reset();
  EXPECT_THAT(CudaForwardSupports(*RandomCheckpointConfig(gemma2)).message(), HasSubstr("GeGLU"));

  // Phi-3's fused qkv_proj / gate_up_proj and LongRoPE run on CUDA.
  for (const char* preset : {"tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-phi3"}) {
    EXPECT_TRUE(CudaForwardSupports(*RandomCheckpointConfig(*RandomCheckpointPreset(preset))).ok()) << preset;
  }
}

// Sliding-window layers run on CUDA as full attention, which is exact while a sequence is
// within the smallest window: the backend caps sequences there, and says why.
TEST(CudaModelSupportTest, SlidingWindowsCapTheContextAtTheSmallestWindow) {
  RandomCheckpointSpec mistral = *RandomCheckpointPreset("tiny-mistral");
  EXPECT_EQ(CudaPositionLimit(*RandomCheckpointConfig(mistral)), std::nullopt);
  mistral.sliding_window = 16;
  const ModelConfig windowed = *RandomCheckpointConfig(mistral);
  EXPECT_TRUE(CudaForwardSupports(windowed).ok());
  std::optional<PositionLimit> limit = CudaPositionLimit(windowed);
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->positions, 16);
  EXPECT_THAT(limit->reason, HasSubstr("MistralForCausalLM's sliding-window attention (window 16)"));
  EXPECT_THAT(limit->reason, HasSubstr("--backend cpu"));
  // A window no shorter than the context never binds.
  mistral.sliding_window = mistral.max_positions;
  EXPECT_EQ(CudaPositionLimit(*RandomCheckpointConfig(mistral)), std::nullopt);
  // Gemma 3: the sliding layers' window, not the full layers' context.
  RandomCheckpointSpec gemma3 = *RandomCheckpointPreset("tiny-gemma3");
  limit = CudaPositionLimit(*RandomCheckpointConfig(gemma3));
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->positions, *gemma3.sliding_window);
}

}  // namespace
}  // namespace kvtier
