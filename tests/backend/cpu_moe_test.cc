// Tests of the CPU backend's mixture-of-experts MLP (cpu_moe.h): top-k routing against a
// straightforward double-precision reference (ties, renormalization), and the grouped
// experts against running each token's experts one by one, reading no unchosen expert.
#include "backend/cpu/cpu_moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "common/thread_pool.h"
#include "gtest/gtest.h"

namespace kvtier {
namespace {

struct Routes {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routes Route(const std::vector<float>& logits, int64_t num_experts, int64_t top_k, bool renormalize) {
  const int64_t rows = static_cast<int64_t>(logits.size()) / num_experts;
  Routes r{std::vector<int32_t>(rows * top_k), std::vector<float>(rows * top_k)};
  RouteTopK(logits.data(), rows, num_experts, top_k, renormalize, r.experts.data(), r.weights.data());
  return r;
}

// transformers: softmax over every expert, topk, then (renormalize) divide by their sum.
Routes ReferenceRoute(const std::vector<float>& logits, int64_t num_experts, int64_t top_k, bool renormalize) {
  Routes r;
  for (size_t row = 0; row < logits.size() / num_experts; ++row) {
    std::vector<double> p(logits.begin() + row * num_experts, logits.begin() + (row + 1) * num_experts);
    const double mx = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (double& v : p) sum += (v = std::exp(v - mx));
    std::vector<int32_t> order(num_experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    double chosen = 0;
    for (int64_t j = 0; j < top_k; ++j) chosen += p[order[j]] / sum;
    for (int64_t j = 0; j < top_k; ++j) {
      r.experts.push_back(order[j]);
      r.weights.push_back(static_cast<float>(p[order[j]] / sum / (renormalize ? chosen : 1.0)));
    }
  }
  return r;
}

TEST(RouteTopKTest, MatchesTheReferenceOnRandomLogits) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const auto& [num_experts, top_k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {4, 1}, {4, 2}, {8, 2}, {8, 8}, {128, 8}, {60, 4}}) {
    for (bool renormalize : {false, true}) {
      std::vector<float> logits(static_cast<size_t>(37 * num_experts));
      for (float& l : logits) l = normal(rng);
      const Routes got = Route(logits, num_experts, top_k, renormalize);
      const Routes want = ReferenceRoute(logits, num_experts, top_k, renormalize);
      ASSERT_EQ(got.experts, want.experts) << num_experts << " experts, top " << top_k;
      for (size_t i = 0; i < want.weights.size(); ++i) {
        EXPECT_NEAR(got.weights[i], want.weights[i], 1e-6) << i;
      }
    }
  }
}

TEST(RouteTopKTest, TiesGoToTheLowerExpertIndex) {
  // All equal: experts 0..k-1, each 1/E (1/k renormalized).
  std::vector<float> flat(6, 0.5f);
  Routes r = Route(flat, 6, 3, false);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1, 2}));
  for (float w : r.weights) EXPECT_FLOAT_EQ(w, 1.0f / 6.0f);
  r = Route(flat, 6, 3, true);
  for (float w : r.weights) EXPECT_FLOAT_EQ(w, 1.0f / 3.0f);
  // A tie for the second place between experts 3 and 1: 1 wins; the top stays first.
  r = Route({0.0f, 2.0f, -1.0f, 2.0f, 5.0f}, 5, 2, false);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{4, 1}));
  r = Route({0.0f, 2.0f, -1.0f, 2.0f, 5.0f}, 5, 3, false);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{4, 1, 3}));
}

TEST(RouteTopKTest, RenormalizedWeightsSumToOneAndKeepTheirRatios) {
  const std::vector<float> logits = {1.0f, 3.0f, 0.5f, 2.0f};
  const Routes raw = Route(logits, 4, 2, false);
  const Routes norm = Route(logits, 4, 2, true);
  EXPECT_EQ(raw.experts, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(norm.experts, raw.experts);
  EXPECT_LT(raw.weights[0] + raw.weights[1], 0.99f);
  EXPECT_NEAR(norm.weights[0] + norm.weights[1], 1.0f, 1e-6);
  // Mixtral's form: the softmax over the chosen logits alone.
  EXPECT_NEAR(norm.weights[0], 1.0 / (1.0 + std::exp(2.0 - 3.0)), 1e-6);
  EXPECT_NEAR(norm.weights[0] / norm.weights[1], raw.weights[0] / raw.weights[1], 1e-5);
}

CpuMatrix RandomMatrix(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  CpuMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.f32.resize(static_cast<size_t>(rows * cols));
  for (float& v : m.f32) v = u(rng) / std::sqrt(static_cast<float>(cols));
  return m;
}

std::vector<double> Product(const CpuMatrix& w, const float* x) {
  std::vector<double> y(static_cast<size_t>(w.rows));
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) y[r] += double(w.f32[r * w.cols + c]) * x[c];
  }
  return y;
}

class MoeMlpTest : public testing::Test {
 protected:
  static constexpr int64_t kHidden = 24, kInter = 20, kExperts = 6, kTopK = 2;
  void SetUp() override {
    std::mt19937 rng(11);
    weights_.router = RandomMatrix(kExperts, kHidden, rng);
    for (int64_t e = 0; e < kExperts; ++e) {
      weights_.experts.push_back(
          {RandomMatrix(kInter, kHidden, rng), RandomMatrix(kInter, kHidden, rng), RandomMatrix(kHidden, kInter, rng)});
    }
    config_.hidden_size = kHidden;
    config_.moe = {kExperts, kTopK, kInter, true, {true}};
  }
  // Each token's experts one after another, in double.
  std::vector<double> Reference(const float* x) {
    std::vector<float> logits(kExperts);
    const std::vector<double> l = Product(weights_.router, x);
    std::copy(l.begin(), l.end(), logits.begin());
    const Routes r = ReferenceRoute(logits, kExperts, kTopK, true);
    std::vector<double> out(kHidden);
    for (int64_t j = 0; j < kTopK; ++j) {
      const CpuExpert& e = weights_.experts[r.experts[j]];
      const std::vector<double> g = Product(e.gate, x), u = Product(e.up, x);
      std::vector<float> act(kInter);
      for (int64_t i = 0; i < kInter; ++i) act[i] = static_cast<float>(g[i] / (1 + std::exp(-g[i])) * u[i]);
      const std::vector<double> d = Product(e.down, act.data());
      for (int64_t i = 0; i < kHidden; ++i) out[i] += r.weights[j] * d[i];
    }
    return out;
  }
  CpuMoeWeights weights_;
  ModelConfig config_;
  ThreadPool pool_{2};
};

TEST_F(MoeMlpTest, GroupedExpertsMatchEachTokenThroughItsOwnExperts) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const int64_t rows = 33;
  std::vector<float> x(rows * kHidden);
  for (float& v : x) v = normal(rng);
  CpuMoeScratch scratch;
  scratch.Reserve(config_, rows);
  std::vector<uint8_t> activations;
  const float* out = MoeMlp(weights_, config_.moe, x.data(), rows, kHidden, &pool_, &scratch, &activations);
  std::set<std::vector<int32_t>> expert_sets;
  for (int64_t t = 0; t < rows; ++t) {
    const std::vector<double> want = Reference(x.data() + t * kHidden);
    for (int64_t i = 0; i < kHidden; ++i) EXPECT_NEAR(out[t * kHidden + i], want[i], 1e-5) << t << "," << i;
    expert_sets.insert({scratch.chosen[t * kTopK], scratch.chosen[t * kTopK + 1]});
  }
  EXPECT_GT(expert_sets.size(), 4u) << "the tokens should spread over the experts";
}

TEST_F(MoeMlpTest, DecodeReadsOnlyTheChosenExperts) {
  std::mt19937 rng(8);
  std::normal_distribution<float> normal;
  std::vector<float> x(kHidden);
  for (float& v : x) v = normal(rng);
  CpuMoeScratch scratch;
  scratch.Reserve(config_, 1);
  std::vector<uint8_t> activations;
  const std::vector<double> want = Reference(x.data());
  MoeMlp(weights_, config_.moe, x.data(), 1, kHidden, &pool_, &scratch, &activations);
  const std::set<int32_t> chosen(scratch.chosen.begin(), scratch.chosen.begin() + kTopK);
  // Poison every other expert: a read of one would turn the output into NaN.
  for (int64_t e = 0; e < kExperts; ++e) {
    if (chosen.count(static_cast<int32_t>(e))) continue;
    for (CpuMatrix* m : {&weights_.experts[e].gate, &weights_.experts[e].up, &weights_.experts[e].down}) {
      std::fill(m->f32.begin(), m->f32.end(), std::numeric_limits<float>::quiet_NaN());
    }
  }
  const float* out = MoeMlp(weights_, config_.moe, x.data(), 1, kHidden, &pool_, &scratch, &activations);
  for (int64_t i = 0; i < kHidden; ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << i;
}

}  // namespace
}  // namespace kvtier
