// Tests of the CPU operators the Gemma and Phi-3 families add (GELU-tanh gating, soft-caps,
// LongRoPE frequencies, windowed attention) against values and forms computed here.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "gtest/gtest.h"

namespace kvtier {
namespace {

TEST(CpuOpsFamiliesTest, GeluTanhMulMatchesTheFormula) {
  const std::vector<float> gate = {-6.0f, -1.0f, -0.1f, 0.0f, 0.5f, 1.0f, 3.0f, 8.0f};
  const std::vector<float> up = {1.0f, 2.0f, -1.0f, 5.0f, 1.0f, 1.0f, -0.5f, 0.25f};
  std::vector<float> out(gate.size());
  GeluTanhMul(gate.data(), up.data(), static_cast<int64_t>(gate.size()), out.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double gelu = 0.5 * g * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (g + 0.044715 * g * g * g)));
    EXPECT_NEAR(out[i], gelu * up[i], 1e-6 * (1 + std::abs(gelu * up[i]))) << g;
  }
  EXPECT_NEAR(out[5], 0.8411920, 1e-6);  // gelu_tanh(1), as torch gives it
}

TEST(CpuOpsFamiliesTest, SoftCapBendsLargeValuesOnly) {
  std::vector<float> x = {-1000.0f, -30.0f, -0.01f, 0.0f, 0.01f, 30.0f, 1000.0f};
  const std::vector<float> before = x;
  SoftCap(x.data(), static_cast<int64_t>(x.size()), 30.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(x[i], 30.0 * std::tanh(before[i] / 30.0), 1e-5) << before[i];
    EXPECT_LE(std::abs(x[i]), 30.0f);
  }
  EXPECT_NEAR(x[4], 0.01f, 1e-7);  // near zero the cap is the identity
}

TEST(CpuOpsFamiliesTest, LongRopeFrequenciesDivideTheDefaultOnes) {
  const int64_t head_dim = 32;
  std::vector<float> plain(head_dim / 2), ones(head_dim / 2), scaled(head_dim / 2);
  RopeInverseFrequencies(head_dim, 10000.0, std::nullopt, plain.data());
  LongRopeInverseFrequencies(head_dim, 10000.0, std::vector<double>(head_dim / 2, 1.0), ones.data());
  EXPECT_EQ(ones, plain);
  std::vector<double> factors;
  for (int64_t i = 0; i < head_dim / 2; ++i) factors.push_back(1.0 + i);
  LongRopeInverseFrequencies(head_dim, 10000.0, factors, scaled.data());
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    EXPECT_NEAR(scaled[i], plain[i] / factors[i], 1e-6 * plain[i]) << i;
  }
}

TEST(CpuOpsFamiliesTest, ApplyRopeScalesByTheAttentionFactor) {
  std::mt19937 rng(4);
  std::normal_distribution<float> dist;
  const int64_t head_dim = 8;
  std::vector<float> inv(head_dim / 2);
  RopeInverseFrequencies(head_dim, 10000.0, std::nullopt, inv.data());
  std::vector<float> x(2 * head_dim);
  for (float& v : x) v = dist(rng);
  std::vector<float> plain = x, scaled = x;
  const std::vector<int64_t> positions = {3, 50};
  ApplyRope(plain.data(), positions.data(), 2, 1, head_dim, inv.data());
  ApplyRope(scaled.data(), positions.data(), 2, 1, head_dim, inv.data(), 1.25f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(scaled[i], 1.25f * plain[i], 1e-5);
}

// Windowed, soft-capped, rescaled attention of the last query against the same attention
// computed here over only the keys the window keeps.
TEST(CpuOpsFamiliesTest, WindowedAttentionReadsOnlyTheWindow) {
  std::mt19937 rng(6);
  std::normal_distribution<float> dist;
  KvLayout layout;
  layout.num_layers = 1;
  layout.num_kv_heads = 1;
  layout.head_dim = 4;
  layout.block_tokens = 4;
  layout.dtype = DType::kF32;
  const int64_t positions = 11, window = 5;
  std::vector<float> pool(3 * layout.BlockBytes() / sizeof(float));
  const std::vector<int32_t> table = {2, 0, 1};
  std::vector<float> k(positions * 4), v(positions * 4);
  for (float& e : k) e = dist(rng);
  for (float& e : v) e = dist(rng);
  WriteKv(layout, pool.data(), table, 0, 0, positions, k.data(), v.data());
  AttentionOptions options;
  options.scale = 0.3f;
  options.logit_softcap = 1.5f;
  options.window = window;
  // Queries at every position, two heads sharing the one kv head.
  std::vector<float> q_rows(positions * 2 * 4);
  for (float& e : q_rows) e = dist(rng);
  std::vector<float> all_out(positions * 2 * 4);
  PagedAttention(KvBlockView{&layout, pool.data(), table, {}, std::nullopt}, 0, 0, positions, 2, q_rows.data(), all_out.data(),
                 nullptr, options);
  for (int64_t r : {int64_t{0}, int64_t{3}, positions - 1}) {
    for (int64_t h = 0; h < 2; ++h) {
      const float* qh = q_rows.data() + (r * 2 + h) * 4;
      const int64_t first = std::max<int64_t>(0, r - window + 1);
      std::vector<double> w;
      double mx = -1e300, sum = 0;
      for (int64_t j = first; j <= r; ++j) {
        double dot = 0;
        for (int d = 0; d < 4; ++d) dot += double(qh[d]) * k[j * 4 + d];
        w.push_back(1.5 * std::tanh(dot * 0.3 / 1.5));
        mx = std::max(mx, w.back());
      }
      for (double& e : w) sum += (e = std::exp(e - mx));
      for (int d = 0; d < 4; ++d) {
        double want = 0;
        for (int64_t j = first; j <= r; ++j) want += w[j - first] / sum * v[j * 4 + d];
        EXPECT_NEAR(all_out[(r * 2 + h) * 4 + d], want, 1e-5) << "row " << r << " head " << h;
      }
    }
  }
}

}  // namespace
}  // namespace kvtier
