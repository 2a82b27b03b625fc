// Tests of SampleToken: greedy, seeded reproducibility, top-k / top-p support, and that
// temperature sampling follows the softmax distribution; SamplingParams::Validate.
#include "engine/sampler.h"

#include <cmath>
#include <map>

#include "gtest/gtest.h"

namespace kvtier {
namespace {

TEST(SamplerTest, GreedyTakesFirstMaximum) {
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f};
  SamplingParams params;
  Rng rng(1);
  std::vector<std::pair<float, int32_t>> scratch;
  EXPECT_EQ(SampleToken(logits, params, rng, &scratch), 1);
  params.temperature = 0.7f;
  params.top_k = 1;
  EXPECT_EQ(SampleToken(logits, params, rng, &scratch), 1);
}

TEST(SamplerTest, SameSeedSameTokens) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  SamplingParams params;
  params.temperature = 1.0f;
  std::vector<std::pair<float, int32_t>> scratch;
  Rng a(123), b(123), c(124);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 40; ++i) {
    ta.push_back(SampleToken(logits, params, a, &scratch));
    tb.push_back(SampleToken(logits, params, b, &scratch));
    tc.push_back(SampleToken(logits, params, c, &scratch));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(SamplerTest, TopKAndTopPRestrictSupport) {
  // probabilities at T=1: softmax(log p) = p.
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  std::vector<std::pair<float, int32_t>> scratch;
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 2;
  Rng rng(5);
  for (int i = 0; i < 500; ++i) EXPECT_LT(SampleToken(logits, params, rng, &scratch), 2);
  params.top_k = 0;
  params.top_p = 0.79f;  // 0.5 + 0.3 reaches it: ids 0 and 1 only
  std::map<int32_t, int> seen;
  for (int i = 0; i < 2000; ++i) ++seen[SampleToken(logits, params, rng, &scratch)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[0], seen[1]);
}

TEST(SamplerTest, TemperatureSamplingFollowsSoftmax) {
  std::vector<float> logits = {1.0f, 2.0f, 0.5f};
  SamplingParams params;
  params.temperature = 2.0f;
  std::vector<double> expected(3);
  double total = 0;
  for (int i = 0; i < 3; ++i) total += expected[static_cast<size_t>(i)] = std::exp(logits[static_cast<size_t>(i)] / 2.0);
  std::vector<int> counts(3, 0);
  Rng rng(99);
  std::vector<std::pair<float, int32_t>> scratch;
  const int n = 30000;
  for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(SampleToken(logits, params, rng, &scratch))];
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(counts[static_cast<size_t>(i)] / static_cast<double>(n), expected[static_cast<size_t>(i)] / total, 0.015);
  }
}

TEST(SamplerTest, ValidateRejectsOutOfRange) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_EQ(p.Validate().code(), absl::StatusCode::kInvalidArgument);
  p = SamplingParams();
  p.top_p = 0;
  EXPECT_NE(p.Validate().message().find("top_p"), std::string::npos);
  p = SamplingParams();
  p.max_new_tokens = 0;
  EXPECT_NE(p.Validate().message().find("max_new_tokens"), std::string::npos);
  p = SamplingParams();
  p.top_k = -2;
  EXPECT_FALSE(p.Validate().ok());
}

// The ranges are stated once (backend/sampling_ranges.h): a request the engine accepts is
// one the backend samples, and the other way round.
TEST(SamplerTest, ValidateAgreesWithRowSampling) {
  const float kNaN = std::nanf("");
  for (float temperature : {0.0f, 0.5f, -0.5f, kNaN, INFINITY}) {
    for (int32_t top_k : {0, 3, -1}) {
      for (float top_p : {1.0f, 0.3f, 0.0f, 1.5f, kNaN}) {
        SamplingParams params;
        params.temperature = temperature;
        params.top_k = top_k;
        params.top_p = top_p;
        const RowSampling row{temperature, top_k, top_p, 0.5};
        EXPECT_EQ(params.Validate().ok(), ValidateRowSampling({&row, 1}, 1).ok())
            << temperature << " " << top_k << " " << top_p;
      }
    }
  }
}

}  // namespace
}  // namespace kvtier
