// AttentionScoresOf: what each layer's attention kernels are told about its scores, from the
// model config. Runs without a GPU.
#include <cmath>

#include "backend/cuda/kernel_selection.h"
#include "gtest/gtest.h"
#include "model/random_checkpoint.h"

namespace kvtier::cuda {
namespace {

ModelConfig ConfigOf(const RandomCheckpointSpec& spec) {
  absl::StatusOr<ModelConfig> config = RandomCheckpointConfig(spec);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : ModelConfig{};
}

// Plain models tell the kernels nothing (their scale is the kernels' own 1/sqrt(head_dim),
// which keeps them on the wgmma prefill).
TEST(AttentionScoresTest, PlainModelsAreLeftAtTheDefaults) {
  const ModelConfig llama = ConfigOf(*RandomCheckpointPreset("tiny-llama"));
  for (int64_t layer = 0; layer < llama.num_layers; ++layer) {
    const AttentionScores s = AttentionScoresOf(llama, layer);
    EXPECT_EQ(s.scale, 0.0f);
    EXPECT_EQ(s.logit_softcap, 0.0f);
    EXPECT_EQ(s.window, 0);
  }
}

// Gemma 2: query_pre_attn_scalar's scale and the soft-cap on every layer, the window on the
// sliding layers only (layer 0 of 2); a scalar equal to head_dim is the default scale.
TEST(AttentionScoresTest, GemmaLayersCarryScaleSoftCapAndWindow) {
  RandomCheckpointSpec spec = *RandomCheckpointPreset("tiny-gemma2");
  const ModelConfig gemma = ConfigOf(spec);
  const AttentionScores local = AttentionScoresOf(gemma, 0), global = AttentionScoresOf(gemma, 1);
  EXPECT_FLOAT_EQ(local.scale, 1.0f / std::sqrt(static_cast<float>(*spec.query_pre_attn_scalar)));
  EXPECT_FLOAT_EQ(local.logit_softcap, static_cast<float>(*spec.attn_logit_softcap));
  EXPECT_EQ(local.window, *spec.sliding_window);
  EXPECT_EQ(global.scale, local.scale);
  EXPECT_EQ(global.logit_softcap, local.logit_softcap);
  EXPECT_EQ(global.window, 0);
  spec.query_pre_attn_scalar = static_cast<double>(spec.head_dim);
  EXPECT_EQ(AttentionScoresOf(ConfigOf(spec), 0).scale, 0.0f);
}

// Only plain scores run on the wgmma prefill's plain instances and cuDNN's graph: Gemma's
// scale, soft-cap and windows, and any sliding window, are not plain.
TEST(AttentionScoresTest, OnlyPlainScoresAreCalledPlain) {
  EXPECT_TRUE(PlainAttentionScores(ConfigOf(*RandomCheckpointPreset("tiny-llama"))));
  EXPECT_TRUE(PlainAttentionScores(ConfigOf(*RandomCheckpointPreset("tiny-qwen3"))));
  EXPECT_FALSE(PlainAttentionScores(ConfigOf(*RandomCheckpointPreset("tiny-gemma2"))));
  EXPECT_FALSE(PlainAttentionScores(ConfigOf(*RandomCheckpointPreset("tiny-gemma3"))));
  RandomCheckpointSpec windowed = *RandomCheckpointPreset("tiny-phi3");
  windowed.sliding_window = 6;  // Phi-3 reads its window; a Llama config would not
  EXPECT_FALSE(PlainAttentionScores(ConfigOf(windowed)));
}

}  // namespace
}  // namespace kvtier::cuda
