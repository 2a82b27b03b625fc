// Tests of the reference CPU operators against naive double-precision implementations
// written here independently, on fresh random inputs.
#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <numeric>
#include <random>
#include <vector>

#include "common/fp8_e4m3.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "testing/random_values.h"

namespace kvtier {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f) {
  return testing::RandomNormal(n, rng, scale);
}

// fp32 results of a sum of n terms may differ from the exact sum by about n * eps * the
// sum of the terms' magnitudes; tests bound the error by that magnitude.
constexpr double kRelTol = 2e-6;

TEST(CpuOpsTest, RmsNormMatchesDouble) {
  std::mt19937 rng(1);
  ThreadPool pool(3);
  for (int64_t dim : {1, 7, 64, 333}) {
    const int64_t rows = 5;
    const double eps = 1e-5;
    std::vector<float> x = Random(rows * dim, rng, 3.0f), w = Random(dim, rng);
    std::vector<float> out(rows * dim), out_inline(rows * dim);
    RmsNorm(x.data(), w.data(), rows, dim, eps, out.data(), &pool);
    RmsNorm(x.data(), w.data(), rows, dim, eps, out_inline.data(), nullptr);
    EXPECT_EQ(out, out_inline);
    for (int64_t t = 0; t < rows; ++t) {
      double sum_squares = 0;
      for (int64_t i = 0; i < dim; ++i) sum_squares += double(x[t * dim + i]) * x[t * dim + i];
      const double scale = 1.0 / std::sqrt(sum_squares / dim + eps);
      for (int64_t i = 0; i < dim; ++i) {
        const double want = double(x[t * dim + i]) * scale * w[i];
        EXPECT_NEAR(out[t * dim + i], want, 1e-5 * (std::abs(want) + 1e-3)) << t << "," << i;
      }
    }
    // In place.
    RmsNorm(x.data(), w.data(), rows, dim, eps, x.data(), nullptr);
    EXPECT_EQ(x, out);
  }
}

TEST(CpuOpsTest, MatMulTransposedMatchesDoubleAndIgnoresThreadCount) {
  std::mt19937 rng(2);
  ThreadPool pool2(2), pool5(5);
  for (auto [rows, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 37, 19},
                            {9, 256, 70}, {1, 1000, 33}}) {
    std::vector<float> x = Random(rows * k, rng), w = Random(n * k, rng), b = Random(n, rng);
    for (bool with_bias : {false, true}) {
      const float* bias = with_bias ? b.data() : nullptr;
      std::vector<float> out(rows * n), out2(rows * n), out5(rows * n);
      MatMulTransposed(x.data(), w.data(), bias, rows, k, n, out.data(), nullptr);
      MatMulTransposed(x.data(), w.data(), bias, rows, k, n, out2.data(), &pool2);
      MatMulTransposed(x.data(), w.data(), bias, rows, k, n, out5.data(), &pool5);
      EXPECT_EQ(out, out2);
      EXPECT_EQ(out, out5);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t j = 0; j < n; ++j) {
          double want = with_bias ? b[j] : 0.0, magnitude = std::abs(want);
          for (int64_t i = 0; i < k; ++i) {
            want += double(x[t * k + i]) * w[j * k + i];
            magnitude += std::abs(double(x[t * k + i]) * w[j * k + i]);
          }
          EXPECT_NEAR(out[t * n + j], want, kRelTol * magnitude + 1e-30) << t << "," << j;
        }
      }
      // The same row gives the same bits whatever other rows share the call.
      std::vector<float> single(n);
      MatMulTransposed(x.data() + (rows - 1) * k, w.data(), bias, 1, k, n, single.data(),
                       &pool2);
      EXPECT_TRUE(std::equal(single.begin(), single.end(), out.begin() + (rows - 1) * n));
    }
  }
}

TEST(CpuOpsTest, RopeInverseFrequenciesDefault) {
  for (auto [head_dim, theta] : {std::pair<int64_t, double>{64, 10000.0}, {128, 500000.0},
                                 {80, 1000000.0}}) {
    std::vector<float> inv(head_dim / 2);
    RopeInverseFrequencies(head_dim, theta, std::nullopt, inv.data());
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const double want = 1.0 / std::pow(theta, 2.0 * i / head_dim);
      EXPECT_NEAR(inv[i], want, 1e-6 * want) << i;
    }
  }
}

// HF _compute_llama3_parameters, in double.
std::vector<double> Llama3InvFreq(int64_t head_dim, double theta, const Llama3RopeScaling& s) {
  std::vector<double> result;
  const double low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (int64_t i = 0; i < head_dim; i += 2) {
    const double freq = 1.0 / std::pow(theta, double(i) / head_dim);
    const double wavelen = 2 * std::numbers::pi / freq;
    if (wavelen < high_freq_wavelen) {
      result.push_back(freq);
    } else if (wavelen > low_freq_wavelen) {
      result.push_back(freq / s.factor);
    } else {
      const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      result.push_back((1 - smooth) * freq / s.factor + smooth * freq);
    }
  }
  return result;
}

TEST(CpuOpsTest, RopeInverseFrequenciesLlama3) {
  // Llama 3.1 8B parameters, and a small-context variant that puts many frequencies in
  // the smoothly interpolated band.
  Llama3RopeScaling llama31;
  Llama3RopeScaling small{.factor = 4.0, .low_freq_factor = 1.0, .high_freq_factor = 8.0,
                          .original_max_position_embeddings = 256};
  for (const Llama3RopeScaling& scaling : {llama31, small}) {
    const int64_t head_dim = 128;
    const double theta = 500000.0;
    std::vector<float> inv(head_dim / 2);
    RopeInverseFrequencies(head_dim, theta, scaling, inv.data());
    const std::vector<double> want = Llama3InvFreq(head_dim, theta, scaling);
    int scaled = 0, kept = 0, medium = 0;
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      EXPECT_NEAR(inv[i], want[i], 2e-6 * want[i]) << i;
      const double unscaled = 1.0 / std::pow(theta, 2.0 * i / head_dim);
      if (std::abs(want[i] - unscaled) < 1e-9 * unscaled) {
        ++kept;
      } else if (std::abs(want[i] - unscaled / scaling.factor) < 1e-9 * unscaled) {
        ++scaled;
      } else {
        ++medium;
      }
    }
    // Every regime is exercised.
    EXPECT_GT(kept, 0);
    EXPECT_GT(scaled, 0);
    EXPECT_GT(medium, 0);
  }
}

TEST(CpuOpsTest, ApplyRopeRotatesHalves) {
  std::mt19937 rng(3);
  const int64_t rows = 4, heads = 3, head_dim = 16, half = head_dim / 2;
  std::vector<float> inv(half);
  RopeInverseFrequencies(head_dim, 10000.0, std::nullopt, inv.data());
  const std::vector<int64_t> positions = {0, 1, 17, 100};
  std::vector<float> x = Random(rows * heads * head_dim, rng);
  std::vector<float> y = x;
  ApplyRope(y.data(), positions.data(), rows, heads, head_dim, inv.data());
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* xh = x.data() + (t * heads + h) * head_dim;
      const float* yh = y.data() + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(inv[i]) * positions[t];
        const double c = std::cos(angle), s = std::sin(angle);
        const double tol = 1e-6 * (1 + angle) * (std::abs(xh[i]) + std::abs(xh[i + half]));
        EXPECT_NEAR(yh[i], xh[i] * c - xh[i + half] * s, tol);
        EXPECT_NEAR(yh[i + half], xh[i + half] * c + xh[i] * s, tol);
      }
    }
  }
  // Position 0 is the identity.
  EXPECT_TRUE(std::equal(y.begin(), y.begin() + heads * head_dim, x.begin()));
}

TEST(CpuOpsTest, SiluMulEmbeddingAdd) {
  std::mt19937 rng(4);
  const int64_t n = 1000;
  std::vector<float> g = Random(n, rng, 4.0f), u = Random(n, rng), out(n);
  SiluMul(g.data(), u.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const double want = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
    EXPECT_NEAR(out[i], want, 1e-6 * std::abs(want) + 1e-30);
  }
  SiluMul(g.data(), u.data(), n, g.data());  // aliasing out = gate
  EXPECT_EQ(g, out);

  const int64_t vocab = 10, dim = 6;
  std::vector<float> table = Random(vocab * dim, rng), rows(3 * dim);
  const std::vector<int32_t> tokens = {9, 0, 4};
  EmbeddingLookup(table.data(), tokens.data(), 3, dim, rows.data());
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < dim; ++i) EXPECT_EQ(rows[t * dim + i], table[tokens[t] * dim + i]);
  }
  std::vector<float> a = Random(n, rng), b = Random(n, rng), sum = a;
  AddInPlace(sum.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(sum[i], a[i] + b[i]);
}

// Paged-attention fixture: a sequence of `length` positions whose K/V are written into
// layer `layer` of a pool through a shuffled block table.
struct PagedCase {
  KvLayout layout{.num_layers = 2, .num_kv_heads = 2, .head_dim = 8, .block_tokens = 4};
  int64_t num_heads = 6;  // GQA group of 3
  int64_t layer = 1;
  int64_t length = 23;
  int64_t num_blocks = 12;
  std::vector<float> k, v;  // (length, kv_heads, head_dim), contiguous
  std::vector<float> pool;

  explicit PagedCase(std::mt19937& rng, int64_t head_dim = 8, int64_t positions = 23) {
    layout.head_dim = head_dim;
    length = positions;
    num_blocks = 2 * ((positions + layout.block_tokens - 1) / layout.block_tokens);
    const int64_t kv_dim = layout.num_kv_heads * layout.head_dim;
    k = Random(length * kv_dim, rng);
    v = Random(length * kv_dim, rng);
    pool.assign(num_blocks * layout.ElementsPerBlock(), 0.0f);
  }

  // Writes positions [0, length) in two WriteKv calls (split at a block interior).
  void Write(const std::vector<int32_t>& table, int64_t split) {
    const int64_t kv_dim = layout.num_kv_heads * layout.head_dim;
    WriteKv(layout, pool.data(), table, layer, 0, split, k.data(), v.data());
    WriteKv(layout, pool.data(), table, layer, split, length - split, k.data() + split * kv_dim,
            v.data() + split * kv_dim);
  }
};

std::vector<int32_t> ShuffledTable(int64_t num_blocks, int64_t needed, std::mt19937& rng) {
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(needed);
  return ids;
}

TEST(CpuOpsTest, WriteKvPlacesRowsAtDocumentedOffsets) {
  std::mt19937 rng(5);
  PagedCase c(rng);
  const std::vector<int32_t> table = ShuffledTable(c.num_blocks, 6, rng);
  c.Write(table, 5);
  const KvLayout& L = c.layout;
  int64_t nonzero_other_layer = 0;
  for (int64_t p = 0; p < c.length; ++p) {
    for (int64_t h = 0; h < L.num_kv_heads; ++h) {
      for (int64_t d = 0; d < L.head_dim; ++d) {
        // [layer][k|v][kv_head][token][head_dim] inside the block.
        const int64_t block_base = table[p / L.block_tokens] * L.ElementsPerBlock();
        const int64_t token = p % L.block_tokens;
        const int64_t k_at = block_base +
            (((c.layer * 2 + 0) * L.num_kv_heads + h) * L.block_tokens + token) * L.head_dim + d;
        const int64_t v_at = block_base +
            (((c.layer * 2 + 1) * L.num_kv_heads + h) * L.block_tokens + token) * L.head_dim + d;
        const int64_t src = (p * L.num_kv_heads + h) * L.head_dim + d;
        ASSERT_EQ(c.pool[k_at], c.k[src]);
        ASSERT_EQ(c.pool[v_at], c.v[src]);
      }
    }
  }
  // Layer 0 of every block is untouched.
  for (int64_t b = 0; b < c.num_blocks; ++b) {
    for (int64_t i = 0; i < L.ElementsPerBlock() / L.num_layers; ++i) {
      nonzero_other_layer += c.pool[b * L.ElementsPerBlock() + i] != 0.0f;
    }
  }
  EXPECT_EQ(nonzero_other_layer, 0);
}

TEST(CpuOpsTest, PagedAttentionMatchesContiguousCausalGqa) {
  std::mt19937 rng(6);
  PagedCase c(rng);
  const KvLayout& L = c.layout;
  const int64_t needed = (c.length + L.block_tokens - 1) / L.block_tokens;
  const std::vector<int32_t> shuffled = ShuffledTable(c.num_blocks, needed, rng);
  c.Write(shuffled, 9);
  std::vector<int32_t> identity(needed);
  std::iota(identity.begin(), identity.end(), 0);
  PagedCase contiguous = c;
  std::fill(contiguous.pool.begin(), contiguous.pool.end(), 0.0f);
  contiguous.Write(identity, 9);

  ThreadPool pool(3);
  const int64_t start = 14, rows = c.length - start, hd = L.head_dim;
  const int64_t group = c.num_heads / L.num_kv_heads;
  std::vector<float> q = Random(rows * c.num_heads * hd, rng);
  std::vector<float> out(q.size()), out_identity(q.size()), out_inline(q.size());
  PagedAttention(L, c.pool.data(), shuffled, c.layer, start, rows, c.num_heads, q.data(),
                 out.data(), &pool);
  PagedAttention(L, contiguous.pool.data(), identity, c.layer, start, rows, c.num_heads,
                 q.data(), out_identity.data(), &pool);
  PagedAttention(L, c.pool.data(), shuffled, c.layer, start, rows, c.num_heads, q.data(),
                 out_inline.data(), nullptr);
  EXPECT_EQ(out, out_identity);  // block placement does not change a bit
  EXPECT_EQ(out, out_inline);

  const int64_t kv_dim = L.num_kv_heads * hd;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < c.num_heads; ++h) {
      const int64_t kvh = h / group;
      const float* qh = q.data() + (r * c.num_heads + h) * hd;
      const int64_t keys = start + r + 1;
      std::vector<double> score(keys);
      for (int64_t j = 0; j < keys; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += double(qh[d]) * c.k[j * kv_dim + kvh * hd + d];
        score[j] = dot / std::sqrt(double(hd));
      }
      const double mx = *std::max_element(score.begin(), score.end());
      double denom = 0;
      for (double& s : score) denom += (s = std::exp(s - mx));
      for (int64_t d = 0; d < hd; ++d) {
        double want = 0, magnitude = 0;
        for (int64_t j = 0; j < keys; ++j) {
          want += score[j] / denom * c.v[j * kv_dim + kvh * hd + d];
          magnitude += std::abs(score[j] / denom * c.v[j * kv_dim + kvh * hd + d]);
        }
        EXPECT_NEAR(out[(r * c.num_heads + h) * hd + d], want, 1e-5 * magnitude + 1e-7)
            << "row " << r << " head " << h << " dim " << d;
      }
    }
  }
}

TEST(CpuOpsTest, PagedAttentionFirstTokenReturnsItsValue) {
  // With one key, softmax is 1 and the output is exactly that position's value row.
  std::mt19937 rng(7);
  PagedCase c(rng);
  const std::vector<int32_t> table = ShuffledTable(c.num_blocks, 6, rng);
  c.Write(table, 1);
  const int64_t hd = c.layout.head_dim;
  std::vector<float> q = Random(c.num_heads * hd, rng), out(q.size());
  PagedAttention(c.layout, c.pool.data(), table, c.layer, 0, 1, c.num_heads, q.data(),
                 out.data(), nullptr);
  for (int64_t h = 0; h < c.num_heads; ++h) {
    const int64_t kvh = h / (c.num_heads / c.layout.num_kv_heads);
    for (int64_t d = 0; d < hd; ++d) EXPECT_EQ(out[h * hd + d], c.v[kvh * hd + d]);
  }
}

// kv_dtype fp8: WriteKv stores E4M3 codes and one fp32 scale (amax / 448) per (layer, k|v,
// head, token) row at the offsets kv_layout.h documents; PagedAttention over them equals
// PagedAttention over an fp32 pool holding code x scale.
// fp8 rows take the scalar attention and fp32 rows of 64 or 128 dimensions the vector one
// (attention_rows.h), so with head_dim 64 this also checks that the two give the same bits.
void CheckFp8AgainstF32(int64_t head_dim, int64_t length, int64_t start, uint32_t seed) {
  std::mt19937 rng(seed);
  PagedCase c(rng, head_dim, length);
  KvLayout fp8 = c.layout;
  fp8.dtype = DType::kF8E4M3;
  ASSERT_EQ(fp8.BlockBytes(), static_cast<size_t>(fp8.ElementsPerBlock()) +
                                  static_cast<size_t>(2 * 2 * 2 * 4) * sizeof(float));
  std::vector<uint8_t> pool(c.num_blocks * fp8.BlockBytes(), 0);
  const std::vector<int32_t> table =
      ShuffledTable(c.num_blocks, (c.length + fp8.block_tokens - 1) / fp8.block_tokens, rng);
  const int64_t kv_dim = fp8.num_kv_heads * fp8.head_dim;
  WriteKv(fp8, pool.data(), table, c.layer, 0, 9, c.k.data(), c.v.data());
  WriteKv(fp8, pool.data(), table, c.layer, 9, c.length - 9, c.k.data() + 9 * kv_dim, c.v.data() + 9 * kv_dim);

  // The dequantized copy, in the f32 layout, through the same table.
  c.Write(table, 9);  // fills c.pool's structure (values replaced below)
  for (int64_t p = 0; p < c.length; ++p) {
    const uint8_t* block = pool.data() + table[p / fp8.block_tokens] * fp8.BlockBytes();
    float* f32_block = c.pool.data() + table[p / fp8.block_tokens] * c.layout.ElementsPerBlock();
    for (int64_t kv = 0; kv < 2; ++kv) {
      for (int64_t h = 0; h < fp8.num_kv_heads; ++h) {
        const float* src = (kv == 0 ? c.k : c.v).data() + (p * fp8.num_kv_heads + h) * fp8.head_dim;
        float amax = 0;
        for (int64_t d = 0; d < fp8.head_dim; ++d) amax = std::max(amax, std::fabs(src[d]));
        float scale;
        std::memcpy(&scale, block + fp8.ScaleByteOffset(c.layer, kv, h, p % fp8.block_tokens), sizeof(scale));
        ASSERT_EQ(scale, amax / 448.0f);
        const int64_t offset = fp8.ElementOffset(c.layer, kv, h, p % fp8.block_tokens);
        for (int64_t d = 0; d < fp8.head_dim; ++d) {
          ASSERT_EQ(block[offset + d], FloatToFp8E4M3(src[d] / scale)) << p << " " << kv << " " << h << " " << d;
          f32_block[offset + d] = Fp8E4M3ToFloat(block[offset + d]) * scale;
        }
      }
    }
  }
  const int64_t rows = c.length - start;
  const std::vector<float> q = Random(rows * c.num_heads * fp8.head_dim, rng);
  std::vector<float> from_fp8(q.size()), from_f32(q.size());
  PagedAttention(fp8, pool.data(), table, c.layer, start, rows, c.num_heads, q.data(), from_fp8.data(), nullptr);
  PagedAttention(c.layout, c.pool.data(), table, c.layer, start, rows, c.num_heads, q.data(), from_f32.data(),
                 nullptr);
  EXPECT_EQ(from_fp8, from_f32);
  // And fp8 rounding is visible against the exact K/V.
  std::vector<float> exact(q.size());
  c.Write(table, 9);
  PagedAttention(c.layout, c.pool.data(), table, c.layer, start, rows, c.num_heads, q.data(), exact.data(), nullptr);
  EXPECT_NE(exact, from_fp8);
}

TEST(CpuOpsTest, Fp8KvRowsAndAttentionOverThem) { CheckFp8AgainstF32(8, 23, 15, 17); }

// Keys past a multiple of the vector kernel's 16 scores, and a prefill from position 0.
TEST(CpuOpsTest, VectorAttentionGivesTheScalarBits) {
  CheckFp8AgainstF32(64, 37, 15, 18);
  CheckFp8AgainstF32(64, 21, 0, 19);
  CheckFp8AgainstF32(128, 40, 33, 20);
}

}  // namespace
}  // namespace kvtier
