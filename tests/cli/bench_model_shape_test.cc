// ModelShape: the bench's limits from the checkpoint's own shape. Llama-3-8B's info gives the
// figures the limits always used for it; an MoE model reads only the experts its tokens chose.
#include "bench_model_shape.h"

#include <cmath>

#include <gtest/gtest.h>

namespace kvtier::cli::bench {
namespace {

nlohmann::json Llama3_8bInfo() {
  return {{"architecture", "llama"}, {"hidden_size", 4096}, {"num_layers", 32}, {"num_heads", 32},
          {"num_kv_heads", 8}, {"head_dim", 128}, {"intermediate_size", 14336}, {"vocab_size", 128256},
          {"num_parameters", 8030261248.0}, {"kv_bytes_per_token_bf16", 131072}};
}

TEST(BenchModelShapeTest, Llama3_8bInfoGivesTheLlamaFigures) {
  const ModelShape s = ModelShape::FromInfo(Llama3_8bInfo());
  const ModelShape defaults;
  EXPECT_NEAR(s.projection_parameters, defaults.projection_parameters, 1e-3 * defaults.projection_parameters);
  EXPECT_DOUBLE_EQ(s.kv_bytes_per_token, 131072);
  EXPECT_DOUBLE_EQ(s.fp8_kv_bytes_per_token, 32 * 2 * 8 * (128 + 4));
  EXPECT_DOUBLE_EQ(s.query_width, 32 * 4096);
  EXPECT_FALSE(s.IsMoe());
  EXPECT_DOUBLE_EQ(s.WeightBytesPerStep(1, false), 2 * 8030261248.0);
  EXPECT_DOUBLE_EQ(s.WeightBytesPerStep(64, false), 2 * 8030261248.0);  // dense: rows read the same
  EXPECT_DOUBLE_EQ(s.WeightBytesPerStep(1, true), 2 * 8030261248.0 - s.projection_parameters);
  EXPECT_DOUBLE_EQ(s.FlopsPerToken(), 2 * 8030261248.0);
  EXPECT_TRUE(s.IsTargetsModel());
  EXPECT_TRUE(ModelShape{}.IsTargetsModel());  // what bench writes when given no --model
}

TEST(BenchModelShapeTest, OtherModelsHaveNoAbsoluteTargets) {
  nlohmann::json info = Llama3_8bInfo();
  info["num_parameters"] = 1.2e9;  // a smaller dense model
  EXPECT_FALSE(ModelShape::FromInfo(info).IsTargetsModel());
  info = Llama3_8bInfo();  // Llama-3-8B's count, but mixture-of-experts
  info["experts"] = {{"count", 8}, {"per_token", 2}, {"intermediate_size", 64}, {"layers", {1}},
                     {"active_parameters", 4e9}};
  EXPECT_FALSE(ModelShape::FromInfo(info).IsTargetsModel());
}

TEST(BenchModelShapeTest, MissingFieldsKeepTheDefaults) {
  const ModelShape s = ModelShape::FromInfo(nlohmann::json::object());
  EXPECT_DOUBLE_EQ(s.parameters, ModelShape{}.parameters);
  EXPECT_DOUBLE_EQ(ModelShape::FromInfo(nlohmann::json::parse("not json", nullptr, false)).parameters,
                   ModelShape{}.parameters);
}

TEST(BenchModelShapeTest, MoeReadsTheChosenExpertsOnly) {
  // Two layers, the second sparse: 8 experts of width 32, top 2, over hidden 16.
  nlohmann::json info = {{"hidden_size", 16}, {"num_layers", 2}, {"num_heads", 2}, {"num_kv_heads", 1},
                         {"head_dim", 8}, {"intermediate_size", 64}, {"num_parameters", 100000.0}};
  info["experts"] = {{"count", 8}, {"per_token", 2}, {"intermediate_size", 32}, {"layers", {1}},
                     {"active_parameters", 100000 - 0.75 * 8.0 * 3 * 16 * 32}};
  const ModelShape s = ModelShape::FromInfo(info);
  const double attention = 16.0 * (16 + 2 * 8) + 16 * 16;
  const double experts = 8.0 * 3 * 16 * 32;
  EXPECT_TRUE(s.IsMoe());
  EXPECT_DOUBLE_EQ(s.expert_parameters, experts);
  EXPECT_DOUBLE_EQ(s.projection_parameters, 2 * attention + 3 * 16 * 64 + experts);
  EXPECT_DOUBLE_EQ(s.ExpertFractionRead(1), 0.25);
  EXPECT_DOUBLE_EQ(s.ExpertFractionRead(2), 1 - 0.75 * 0.75);
  EXPECT_DOUBLE_EQ(s.WeightBytesPerStep(1, false), 2 * (100000 - 0.75 * experts));
  EXPECT_DOUBLE_EQ(s.WeightBytesPerStep(1, true), 2 * (100000 - 0.75 * experts) - (s.projection_parameters - 0.75 * experts));
  EXPECT_GT(s.WeightBytesPerStep(64, false), s.WeightBytesPerStep(1, false));
  EXPECT_LT(s.WeightBytesPerStep(64, false), 2 * 100000.0 + 1e-6);
  EXPECT_DOUBLE_EQ(s.FlopsPerToken(), 2 * (100000 - 0.75 * experts));
}

TEST(BenchModelShapeTest, PrefillIsBoundByFlopsOrByTheWeightsItReads) {
  const ModelShape dense;  // Llama-3-8B: 512 tokens' FLOPs take longer than its 16 GB at 3 TB/s
  EXPECT_DOUBLE_EQ(dense.PrefillTokS(512, false, 750e12, 3e12), 750e12 / dense.FlopsPerToken());
  // A mixture of experts with few active parameters: a 512-token step reads nearly every
  // expert, and that takes longer than its FLOPs.
  ModelShape moe;
  moe.parameters = 30.5e9;
  moe.projection_parameters = 29e9;
  moe.expert_parameters = 28e9;
  moe.experts = 128;
  moe.experts_per_token = 8;
  moe.active_parameters = 3.3e9;
  const double weights_s = moe.WeightBytesPerStep(512, false) / 3e12;
  EXPECT_GT(weights_s, 512 * moe.FlopsPerToken() / 750e12);
  EXPECT_DOUBLE_EQ(moe.PrefillTokS(512, false, 750e12, 3e12), 512 / weights_s);
  EXPECT_GT(moe.PrefillTokS(512, true, 750e12, 3e12), moe.PrefillTokS(512, false, 750e12, 3e12));
}

}  // namespace
}  // namespace kvtier::cli::bench
