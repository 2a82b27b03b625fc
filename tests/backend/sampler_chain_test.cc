// The sampler chain's host implementation (backend/sampler_chain.h, row_sampling.h,
// logprobs.h) against reference math written out here from the definitions it cites:
// transformers' processors (SequenceBias, RepetitionPenalty, Temperature, TopK, TopP,
// MinP) and OpenAI's presence/frequency penalties, applied to whole rows the plain way
// (softmax over the vocabulary, -inf for removed tokens); log-softmax for the
// log-probabilities. The engine's token history (engine/token_history.h) feeds the same
// adjustments the reference derives from the raw token lists.
#include "backend/sampler_chain.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "backend/sampling_ranges.h"
#include "engine/token_history.h"
#include "gtest/gtest.h"

namespace kvtier {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Controls {
  float repetition = 1.0f, presence = 0.0f, frequency = 0.0f;
  std::map<int32_t, float> bias;
  RowSampling sampling;  // temperature, top_k, top_p, min_p
};

// transformers' SequenceBias + RepetitionPenalty, then OpenAI's frequency/presence, on the
// raw logits, given the prompt and the generated tokens.
std::vector<float> ReferenceAdjust(std::vector<float> logits, const Controls& c, const std::vector<int32_t>& prompt,
                                   const std::vector<int32_t>& generated) {
  for (const auto& [token, b] : c.bias) logits[static_cast<size_t>(token)] += b;
  std::vector<int32_t> context = prompt;
  context.insert(context.end(), generated.begin(), generated.end());
  std::sort(context.begin(), context.end());
  context.erase(std::unique(context.begin(), context.end()), context.end());
  for (int32_t t : context) {  // torch.where(score < 0, score * penalty, score / penalty)
    float& l = logits[static_cast<size_t>(t)];
    l = l < 0 ? l * c.repetition : l / c.repetition;
  }
  std::map<int32_t, int> counts;
  for (int32_t t : generated) ++counts[t];
  for (const auto& [t, n] : counts) {  // mu[j] -= c[j] * alpha_frequency + (c[j] > 0) * alpha_presence
    logits[static_cast<size_t>(t)] -= static_cast<float>(n) * c.frequency + c.presence;
  }
  return logits;
}

std::vector<double> Softmax(const std::vector<double>& scores) {
  double max = kNegInf;
  for (double s : scores) max = std::max(max, s);
  std::vector<double> p(scores.size());
  double total = 0;
  for (size_t i = 0; i < scores.size(); ++i) total += p[i] = std::exp(scores[i] - max);
  for (double& x : p) x /= total;
  return p;
}

// Temperature, TopK, TopP, MinP warpers in transformers' order, then softmax: the
// distribution a sampled token comes from.
std::vector<double> ReferenceDistribution(const std::vector<float>& logits, const RowSampling& s) {
  const size_t v = logits.size();
  std::vector<double> scores(v);
  for (size_t i = 0; i < v; ++i) scores[i] = static_cast<double>(logits[i]) / s.temperature;
  std::vector<size_t> order(v);  // descending, ties by lower id
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  if (s.top_k > 0 && static_cast<size_t>(s.top_k) < v) {
    for (size_t r = static_cast<size_t>(s.top_k); r < v; ++r) scores[order[r]] = kNegInf;
  }
  if (s.top_p < 1.0f) {  // remove from the least likely while the removed mass stays <= 1 - top_p
    const std::vector<double> p = Softmax(scores);
    double cum = 0;
    for (size_t r = v; r-- > 1;) {
      cum += p[order[r]];
      if (cum <= 1.0 - s.top_p) scores[order[r]] = kNegInf;
    }
  }
  if (s.min_p > 0.0f) {
    const std::vector<double> p = Softmax(scores);
    const double top = *std::max_element(p.begin(), p.end());
    for (size_t i = 0; i < v; ++i) {
      if (p[i] < s.min_p * top) scores[i] = kNegInf;
    }
  }
  return Softmax(scores);
}

std::vector<float> RandomLogits(std::mt19937& rng, int vocab, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& l : logits) l = normal(rng);
  return logits;
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int vocab, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab / 4)));
  return out;  // a quarter of the vocabulary: many repeats
}

// The adjustments the engine sends for (prompt, generated), built by TokenHistory.
std::vector<TokenAdjustment> HistoryAdjustments(const SamplingParams& params, const std::vector<int32_t>& prompt,
                                                const std::vector<int32_t>& generated) {
  TokenHistory history(params, prompt);
  for (int32_t t : generated) history.AddGenerated(t);
  std::vector<TokenAdjustment> out;
  history.AppendAdjustments(&out);
  return out;
}

SamplingParams ParamsOf(const Controls& c) {
  SamplingParams p;
  p.repetition_penalty = c.repetition;
  p.presence_penalty = c.presence;
  p.frequency_penalty = c.frequency;
  for (const auto& [t, b] : c.bias) p.logit_bias.emplace_back(t, b);
  return p;
}

TEST(SamplerChainTest, AdjustLogitFollowsEachDefinition) {
  TokenAdjustment a;
  a.repetition = 1.5f;
  EXPECT_EQ(AdjustLogit(3.0f, a), 2.0f);    // positive: divided
  EXPECT_EQ(AdjustLogit(-3.0f, a), -4.5f);  // negative: multiplied
  EXPECT_EQ(AdjustLogit(0.0f, a), 0.0f);
  a = TokenAdjustment{};
  a.bias = -2.0f;
  a.repetition = 2.0f;
  EXPECT_EQ(AdjustLogit(1.0f, a), -2.0f);  // bias first: 1 - 2 = -1, then * 2
  a = TokenAdjustment{};
  a.subtract = PenaltySubtrahend(3, 0.5f, 0.25f);
  EXPECT_EQ(a.subtract, 1.75f);
  EXPECT_EQ(AdjustLogit(1.0f, a), -0.75f);
  EXPECT_EQ(PenaltySubtrahend(0, 0.5f, 0.25f), 0.0f);  // presence only once generated
}

// Every control alone and all together, greedy and sampled: the adjusted logits equal the
// reference's bit for bit, the sampling distribution is the reference's, and each token
// SampleOnHost picks is the one the reference distribution's inverse CDF gives the draw.
TEST(SamplerChainTest, MatchesReferenceMath) {
  std::mt19937 rng(7);
  std::vector<Controls> cases;
  auto add = [&](auto edit) {
    Controls c;
    c.sampling.temperature = 0.8f;
    edit(c);
    cases.push_back(c);
  };
  add([](Controls& c) { c.repetition = 1.3f; });
  add([](Controls& c) { c.repetition = 0.7f; });
  add([](Controls& c) { c.presence = 0.6f; });
  add([](Controls& c) { c.frequency = 0.4f; });
  add([](Controls& c) { c.frequency = -0.5f; c.presence = -1.0f; });
  add([](Controls& c) { c.bias = {{5, 3.0f}, {17, -100.0f}, {60, 0.5f}}; });
  add([](Controls& c) { c.sampling.min_p = 0.05f; });
  add([](Controls& c) { c.sampling.min_p = 0.3f; c.sampling.top_k = 20; });
  add([](Controls& c) { c.sampling.top_k = 12; c.sampling.top_p = 0.7f; c.sampling.min_p = 0.1f; });
  add([](Controls& c) {
    c.repetition = 1.2f; c.presence = 0.3f; c.frequency = 0.2f; c.bias = {{3, 1.0f}, {9, -2.0f}};
    c.sampling.top_k = 50; c.sampling.top_p = 0.9f; c.sampling.min_p = 0.02f; c.sampling.temperature = 1.1f;
  });
  add([](Controls& c) { c.repetition = 1.5f; c.bias = {{4, 5.0f}}; c.sampling.temperature = 0.0f; });  // greedy
  const int vocab = 257;
  for (size_t k = 0; k < cases.size(); ++k) {
    const Controls& c = cases[k];
    for (int trial = 0; trial < 20; ++trial) {
      SCOPED_TRACE(testing::Message() << "case " << k << " trial " << trial);
      const std::vector<float> raw = RandomLogits(rng, vocab, trial % 2 == 0 ? 2.0f : 0.5f);
      const std::vector<int32_t> prompt = RandomTokens(rng, vocab, 30);
      const std::vector<int32_t> generated = RandomTokens(rng, vocab, 12);
      const std::vector<float> want = ReferenceAdjust(raw, c, prompt, generated);
      std::vector<float> got = raw;
      ApplyAdjustments(got, HistoryAdjustments(ParamsOf(c), prompt, generated));
      for (int i = 0; i < vocab; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << "token " << i;

      RowSampling s = c.sampling;
      if (s.greedy()) {
        SamplingBatch batch;
        batch.samples.push_back({0, s, -1});
        SamplingResult result;
        std::vector<float> row = raw;
        batch.row_adjustments = {{0, 0}};
        batch.adjustments = HistoryAdjustments(ParamsOf(c), prompt, generated);
        batch.row_adjustments[0].count = static_cast<int32_t>(batch.adjustments.size());
        SampleOnHost(row, vocab, batch, &result);
        EXPECT_EQ(result.tokens[0], std::max_element(want.begin(), want.end()) - want.begin());
        continue;
      }
      const std::vector<double> reference = ReferenceDistribution(want, s);
      const std::vector<double> ours = SamplingDistribution(got, s);
      for (int i = 0; i < vocab; ++i) {
        ASSERT_NEAR(ours[static_cast<size_t>(i)], reference[static_cast<size_t>(i)], 1e-12) << "token " << i;
      }
      // Draws through the whole batch path: the inverse CDF of the distribution in
      // SampleRow's order (logit descending, ties by lower id).
      std::vector<int32_t> order(static_cast<size_t>(vocab));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return want[a] > want[b]; });
      SamplingBatch batch;
      batch.adjustments = HistoryAdjustments(ParamsOf(c), prompt, generated);
      batch.row_adjustments = {{0, static_cast<int32_t>(batch.adjustments.size())}};
      for (double u : {0.0, 0.2, 0.5, 0.77, 0.999}) {
        RowSampling draw = s;
        draw.u = u;
        batch.samples.push_back({0, draw, -1});
      }
      ASSERT_TRUE(ValidateSamplingBatch(batch, 1, vocab).ok());
      SamplingResult result;
      std::vector<float> row = raw;
      SampleOnHost(row, vocab, batch, &result);
      for (size_t d = 0; d < batch.samples.size(); ++d) {
        double cum = 0;
        int32_t expect = -1;
        for (int32_t t : order) {
          if (reference[static_cast<size_t>(t)] == 0) continue;
          cum += reference[static_cast<size_t>(t)];
          expect = t;
          if (cum > batch.samples[d].sampling.u + 1e-12) break;
        }
        EXPECT_EQ(result.tokens[d], expect) << "u " << batch.samples[d].sampling.u;
      }
    }
  }
}

// Log-probabilities are of the raw row (before the chain), as log-softmax in double;
// alternatives most likely first; the picked token's is reported whatever the chain did.
TEST(SamplerChainTest, LogprobsAreOfTheRawRow) {
  std::mt19937 rng(3);
  const int vocab = 100;
  std::vector<float> raw = RandomLogits(rng, vocab, 3.0f);
  raw[42] = raw[41];  // a tie: lower id first
  double max = -1e300, sum = 0;
  for (float l : raw) max = std::max(max, static_cast<double>(l));
  for (float l : raw) sum += std::exp(l - max);
  const double lse = max + std::log(sum);
  EXPECT_NEAR(LogSumExp(raw), lse, 1e-12);

  SamplingBatch batch;
  batch.adjustments = {{7, 100.0f, 1.0f, 0.0f}};  // token 7 forced by a huge bias
  batch.row_adjustments = {{0, 1}, {0, 0}};
  batch.samples.push_back({0, RowSampling{}, 5});
  batch.samples.push_back({0, RowSampling{}, 2});   // same row, fewer alternatives
  batch.samples.push_back({0, RowSampling{}, -1});  // same row, none
  batch.scores.push_back({1, 13, 3});
  std::vector<float> rows = raw;
  rows.insert(rows.end(), raw.begin(), raw.end());
  ASSERT_TRUE(ValidateSamplingBatch(batch, 2, vocab).ok());
  SamplingResult result;
  SampleOnHost(rows, vocab, batch, &result);
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return raw[a] > raw[b]; });
  for (int i = 0; i < 3; ++i) EXPECT_EQ(result.tokens[static_cast<size_t>(i)], 7);
  const LogprobEntry& e = result.sample_logprobs[0];
  EXPECT_EQ(e.token, 7);
  EXPECT_FLOAT_EQ(e.logprob, static_cast<float>(raw[7] - lse));  // raw, not the biased logit
  ASSERT_EQ(e.top_count, 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(result.top[static_cast<size_t>(e.top_begin + i)].token, order[static_cast<size_t>(i)]);
    EXPECT_FLOAT_EQ(result.top[static_cast<size_t>(e.top_begin + i)].logprob,
                    static_cast<float>(raw[order[static_cast<size_t>(i)]] - lse));
  }
  EXPECT_EQ(result.sample_logprobs[1].top_count, 2);
  EXPECT_EQ(result.sample_logprobs[1].top_begin, e.top_begin);
  EXPECT_TRUE(std::isnan(result.sample_logprobs[2].logprob));
  ASSERT_EQ(result.scores.size(), 1u);
  EXPECT_EQ(result.scores[0].token, 13);
  EXPECT_FLOAT_EQ(result.scores[0].logprob, static_cast<float>(raw[13] - lse));
  EXPECT_EQ(result.scores[0].top_count, 3);
}

TEST(SamplerChainTest, ValidateNamesWhatIsWrong) {
  SamplingBatch ok;
  ok.samples.push_back({0, RowSampling{}, 0});
  EXPECT_TRUE(ValidateSamplingBatch(ok, 1, 10).ok());
  auto bad = [](auto edit) {
    SamplingBatch b;
    b.samples.push_back({0, RowSampling{}, 0});
    b.adjustments = {{1, 0.5f, 1.0f, 0.0f}};
    b.row_adjustments = {{0, 1}};
    edit(b);
    return ValidateSamplingBatch(b, 1, 10);
  };
  EXPECT_TRUE(bad([](SamplingBatch&) {}).ok());
  EXPECT_FALSE(bad([](SamplingBatch& b) { b.samples[0].logits_row = 1; }).ok());
  EXPECT_FALSE(bad([](SamplingBatch& b) { b.samples[0].top_logprobs = 21; }).ok());
  EXPECT_FALSE(bad([](SamplingBatch& b) { b.samples[0].sampling.min_p = 1.5f; }).ok());
  EXPECT_FALSE(bad([](SamplingBatch& b) { b.adjustments[0].token = 10; }).ok());
  EXPECT_FALSE(bad([](SamplingBatch& b) { b.adjustments[0].bias = NAN; }).ok());
  EXPECT_FALSE(bad([](SamplingBatch& b) { b.adjustments[0].repetition = 0.0f; }).ok());
  EXPECT_FALSE(bad([](SamplingBatch& b) { b.adjustments.push_back(b.adjustments[0]); b.row_adjustments[0].count = 2; }).ok());
  EXPECT_FALSE(bad([](SamplingBatch& b) { b.row_adjustments[0].count = 2; }).ok());
  EXPECT_FALSE(bad([](SamplingBatch& b) { b.row_adjustments.push_back({0, 0}); }).ok());
  EXPECT_FALSE(bad([](SamplingBatch& b) { b.scores.push_back({0, 10, 0}); }).ok());
}

TEST(SamplerChainTest, RangesOfTheControls) {
  const float nan = std::nanf("");
  EXPECT_TRUE(ValidateMinP(0.0f).ok());
  EXPECT_TRUE(ValidateMinP(1.0f).ok());
  EXPECT_FALSE(ValidateMinP(-0.1f).ok());
  EXPECT_FALSE(ValidateMinP(nan).ok());
  EXPECT_TRUE(ValidateRepetitionPenalty(1.0f).ok());
  EXPECT_FALSE(ValidateRepetitionPenalty(0.0f).ok());
  EXPECT_FALSE(ValidateRepetitionPenalty(INFINITY).ok());
  EXPECT_FALSE(ValidateRepetitionPenalty(nan).ok());
  EXPECT_TRUE(ValidatePresencePenalty(-2.0f).ok());
  EXPECT_FALSE(ValidatePresencePenalty(2.5f).ok());
  EXPECT_FALSE(ValidateFrequencyPenalty(nan).ok());
  EXPECT_TRUE(ValidateLogitBias(-100.0f).ok());
  EXPECT_FALSE(ValidateLogitBias(-100.5f).ok());
  EXPECT_FALSE(ValidateLogitBias(nan).ok());
  EXPECT_TRUE(ValidateTopLogprobs(-1, "logprobs").ok());
  EXPECT_TRUE(ValidateTopLogprobs(20, "logprobs").ok());
  EXPECT_FALSE(ValidateTopLogprobs(21, "logprobs").ok());
  EXPECT_FALSE(ValidateTopLogprobs(-2, "logprobs").ok());
  EXPECT_TRUE(ValidateNumCompletions(1).ok());
  EXPECT_FALSE(ValidateNumCompletions(0).ok());
  EXPECT_FALSE(ValidateNumCompletions(129).ok());
}

}  // namespace
}  // namespace kvtier
