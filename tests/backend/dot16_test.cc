// Tests of the 16-bit matrix products of the fast CPU path (dot16.h): every exact kernel set
// this processor runs, on sizes that are no multiple of the kernels' blocks, against a
// double sum (within the fp32 error bound) and against the fp32 reference kernels (the same
// bits); the inexact BF16 kernel (dot16_bf16pairs.h) within its stated bound of a double sum
// and of the reference, where the processor has AVX-512 BF16 (skipped elsewhere); and the
// CPU backend on F16 and BF16 checkpoints against its reference kernels.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_matrix.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/dot16.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/random_checkpoint.h"
#include "model/tensor.h"
#include "testing/random_values.h"

namespace kvtier {
namespace {

const DType kTypes[] = {DType::kF16, DType::kBF16};
const int64_t kCols[] = {1, 5, 8, 13, 16, 33, 203};
const int64_t kWeightRows[] = {1, 7, 8, 9, 19};
const int64_t kActivationRows[] = {1, 3, 8, 17};

uint16_t Narrow(DType type, float v) { return type == DType::kBF16 ? FloatToBf16(v) : FloatToFp16(v); }
float Widen(DType type, uint16_t v) { return type == DType::kBF16 ? Bf16ToFloat(v) : Fp16ToFloat(v); }

struct Problem {
  int64_t n = 0, cols = 0, rows = 0;
  std::vector<uint16_t> w;   // (n, cols)
  std::vector<float> wf;     // w widened
  std::vector<float> x;      // (rows, cols)
  std::vector<float> bias;   // (n) or empty
};

Problem MakeProblem(DType type, int64_t n, int64_t cols, int64_t rows, bool with_bias, std::mt19937& rng) {
  Problem p;
  p.n = n;
  p.cols = cols;
  p.rows = rows;
  const std::vector<float> w = testing::RandomNormal(static_cast<size_t>(n * cols), rng);
  for (float v : w) p.w.push_back(Narrow(type, v));
  for (uint16_t v : p.w) p.wf.push_back(Widen(type, v));
  p.x = testing::RandomNormal(static_cast<size_t>(rows * cols), rng, 3.0f);
  if (with_bias) p.bias = testing::RandomNormal(static_cast<size_t>(n), rng);
  return p;
}

uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

// The kernel over weight rows [n0, n); every other output must stay NaN.
std::vector<float> Apply(Dot16Fn kernel, const Problem& p, int64_t n0) {
  std::vector<float> out(static_cast<size_t>(p.rows * p.n), std::numeric_limits<float>::quiet_NaN());
  kernel(p.w.data(), p.cols, n0, p.n, p.x.data(), p.rows, p.bias.empty() ? nullptr : p.bias.data(), out.data(), p.n);
  return out;
}

TEST(Dot16Test, EverySetIsWithinTheFp32BoundOfADoubleSum) {
  std::mt19937 rng(11);
  const std::vector<const Dot16Kernels*> sets = SupportedDot16();
  std::printf("16-bit kernel sets on this processor:");
  for (const Dot16Kernels* set : sets) std::printf(" %.*s", static_cast<int>(set->isa.size()), set->isa.data());
  std::printf(" (best: %.*s)\n", static_cast<int>(BestDot16().isa.size()), BestDot16().isa.data());
  for (DType type : kTypes) {
    for (int64_t cols : kCols) {
      for (int64_t n : kWeightRows) {
        for (int64_t rows : kActivationRows) {
          const Problem p = MakeProblem(type, n, cols, rows, (cols + n) % 2 == 0, rng);
          const int64_t n0 = n / 3;
          for (const Dot16Kernels* set : sets) {
            if (!set->exact) continue;  // its bound: Bf16PairsTest
            const std::vector<float> out = Apply(set->For(type), p, n0);
            for (int64_t t = 0; t < rows; ++t) {
              for (int64_t j = 0; j < n; ++j) {
                const float got = out[t * n + j];
                if (j < n0) {
                  EXPECT_TRUE(std::isnan(got)) << set->isa << ": wrote outside its rows, " << t << "," << j;
                  continue;
                }
                double exact = p.bias.empty() ? 0.0 : p.bias[j];
                double magnitude = std::fabs(exact);
                for (int64_t k = 0; k < cols; ++k) {
                  const double product = double{p.x[t * cols + k]} * p.wf[j * cols + k];
                  exact += product;
                  magnitude += std::fabs(product);
                }
                // Eight lanes of ceil(cols / 8) rounded products and sums each, three folds
                // and the bias: at most (cols / 8 + 5) roundings of 2^-24 of the magnitude,
                // doubled for margin.
                const double bound = (static_cast<double>(cols) / 8 + 5) * std::ldexp(1.0, -23) * magnitude;
                EXPECT_NEAR(got, exact, bound) << set->isa << " " << DTypeName(type) << " cols " << cols << " n " << n
                                               << " rows " << rows << " at " << t << "," << j;
              }
            }
          }
        }
      }
    }
  }
}

TEST(Dot16Test, EverySetGivesTheReferenceBits) {
  std::mt19937 rng(12);
  for (DType type : kTypes) {
    for (int64_t cols : kCols) {
      for (int64_t n : kWeightRows) {
        for (int64_t rows : kActivationRows) {
          Problem p = MakeProblem(type, n, cols, rows, rows % 2 == 1, rng);
          // Signed zeros, magnitudes far apart and subnormal products: any change of order
          // or rounding shows in the bits.
          for (size_t i = 0; i < p.x.size(); i += 7) p.x[i] = i % 2 == 0 ? -0.0f : p.x[i] * 1e6f;
          for (size_t i = 3; i < p.x.size(); i += 11) p.x[i] = 1e-38f;
          for (size_t i = 0; i < p.w.size(); i += 5) p.w[i] = Narrow(type, -0.0f);
          for (size_t i = 0; i < p.w.size(); ++i) p.wf[i] = Widen(type, p.w[i]);
          std::vector<float> want(static_cast<size_t>(rows * n));
          MatMulTransposed(p.x.data(), p.wf.data(), p.bias.empty() ? nullptr : p.bias.data(), rows, cols, n,
                           want.data(), nullptr);
          for (const Dot16Kernels* set : SupportedDot16()) {
            if (!set->exact) continue;
            const std::vector<float> got = Apply(set->For(type), p, 0);
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_EQ(Bits(got[i]), Bits(want[i])) << set->isa << " " << DTypeName(type) << " cols " << cols
                                                     << " n " << n << " rows " << rows << " output " << i << ": "
                                                     << got[i] << " vs " << want[i];
            }
          }
        }
      }
    }
  }
}

CpuMatrix Matrix(DType type, const Problem& p, const Dot16Kernels& kernels) {
  CpuMatrix m;
  m.dtype = type;
  m.rows = p.n;
  m.cols = p.cols;
  m.dot16 = &kernels;
  m.packed.resize(p.w.size() * sizeof(uint16_t));
  std::memcpy(m.packed.data(), p.w.data(), m.packed.size());
  return m;
}

// MatMul over a 16-bit CpuMatrix with the exact kernels on two threads, with the activation
// rows in blocks larger than one of the kernels' cache blocks.
TEST(Dot16Test, MatMulOverThreadsGivesTheReferenceBits) {
  std::mt19937 rng(13);
  ThreadPool pool(2);
  for (DType type : kTypes) {
    for (const int64_t rows : {1, 8, 70}) {
      const Problem p = MakeProblem(type, 45, 2051, rows, true, rng);
      const CpuMatrix m = Matrix(type, p, BestExactDot16());
      std::vector<float> got(static_cast<size_t>(rows * p.n)), want(got.size());
      std::vector<uint8_t> scratch;
      MatMul(m, p.x.data(), p.bias.data(), rows, got.data(), &pool, &scratch);
      MatMulTransposed(p.x.data(), p.wf.data(), p.bias.data(), rows, p.cols, p.n, want.data(), nullptr);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(Bits(got[i]), Bits(want[i])) << DTypeName(type) << " " << i;
    }
  }
}

// ---- The BF16 kernel with activations rounded to bf16 (dot16_bf16pairs.h).

// The inexact set, or nullptr where the processor has no AVX-512 BF16.
const Dot16Kernels* PairsSet() {
  for (const Dot16Kernels* set : SupportedDot16()) {
    if (!set->exact) return set;
  }
  return nullptr;
}

// Checks out (p.rows x p.n, weight rows [n0, n)) against dot16_bf16pairs.h's bound, twice:
// against a double sum of the stored weights and the activations rounded to bf16, within the
// fp32 additions' part of the bound alone, (2 ceil(cols / 32) + 5) 2^-24 M, doubled for
// margin: tight enough that a column left out or counted twice shows; and against the fp32
// reference on the unrounded activations (what the exact kernels give), within the whole
// bound, 2^-8 M for rounding the activations plus the additions' part, plus the
// reference's own (cols / 8 + 5) 2^-24 M. The data has no subnormal values, so the
// instruction's flushing to zero adds nothing.
void ExpectWithinThePairsBound(const Problem& p, int64_t n0, const std::vector<float>& out, const std::string& what) {
  std::vector<float> reference(static_cast<size_t>(p.rows * p.n));
  MatMulTransposed(p.x.data(), p.wf.data(), p.bias.empty() ? nullptr : p.bias.data(), p.rows, p.cols, p.n,
                   reference.data(), nullptr);
  const double steps = std::ceil(static_cast<double>(p.cols) / 32);
  const double additions = 2 * (2 * steps + 5) * std::ldexp(1.0, -24);
  const double reference_bound = (static_cast<double>(p.cols) / 8 + 5) * std::ldexp(1.0, -24);
  for (int64_t t = 0; t < p.rows; ++t) {
    for (int64_t j = 0; j < p.n; ++j) {
      const float got = out[t * p.n + j];
      if (j < n0) {
        EXPECT_TRUE(std::isnan(got)) << what << ": wrote outside its rows, " << t << "," << j;
        continue;
      }
      double rounded_sum = p.bias.empty() ? 0.0 : p.bias[j];
      double magnitude = std::fabs(rounded_sum);
      for (int64_t k = 0; k < p.cols; ++k) {
        const double w = p.wf[j * p.cols + k];
        rounded_sum += double{Bf16ToFloat(FloatToBf16(p.x[t * p.cols + k]))} * w;
        magnitude += std::fabs(double{p.x[t * p.cols + k]} * w);
      }
      const double rounded_magnitude = magnitude * (1 + std::ldexp(1.0, -8));
      ASSERT_NEAR(got, rounded_sum, additions * rounded_magnitude)
          << what << " against the rounded activations' sum at " << t << "," << j;
      ASSERT_NEAR(got, reference[t * p.n + j],
                  std::ldexp(1.0, -8) * magnitude + additions * rounded_magnitude + reference_bound * magnitude)
          << what << " against the reference at " << t << "," << j;
    }
  }
}

TEST(Bf16PairsTest, WithinItsBoundOfADoubleSumAndOfTheReference) {
  const Dot16Kernels* pairs = PairsSet();
  if (pairs == nullptr) GTEST_SKIP() << "no AVX-512 BF16 on this processor: the exact kernels serve BF16";
  std::mt19937 rng(14);
  // Columns around the 32-column step, weight rows around the four-row group, activation rows
  // around the six-row tile.
  for (const int64_t cols : {1, 2, 31, 32, 33, 64, 95, 203, 2051}) {
    for (const int64_t n : {1, 3, 4, 5, 9}) {
      for (const int64_t rows : {1, 5, 6, 7, 13}) {
        const Problem p = MakeProblem(DType::kBF16, n, cols, rows, (cols + rows) % 2 == 0, rng);
        const int64_t n0 = n / 3;
        ExpectWithinThePairsBound(p, n0, Apply(pairs->bf16, p, n0),
                                  absl::StrCat("cols ", cols, " n ", n, " rows ", rows));
      }
    }
  }
}

// The best set through MatMul, on two threads and on one: within the bound, the same bits
// either way (each output's bits depend only on its row and weights), and on a processor
// with AVX-512 BF16 not the reference's bits (the activations really are rounded).
TEST(Bf16PairsTest, MatMulIsWithinTheBoundOnAnyThreadCount) {
  const Dot16Kernels* pairs = PairsSet();
  if (pairs == nullptr) GTEST_SKIP() << "no AVX-512 BF16 on this processor: the exact kernels serve BF16";
  std::mt19937 rng(15);
  ThreadPool pool(2);
  for (const int64_t rows : {1, 8, 70}) {
    const Problem p = MakeProblem(DType::kBF16, 45, 2051, rows, true, rng);
    const CpuMatrix m = Matrix(DType::kBF16, p, *pairs);
    std::vector<float> two(static_cast<size_t>(rows * p.n)), one(two.size()), reference(two.size());
    std::vector<uint8_t> scratch;
    MatMul(m, p.x.data(), p.bias.data(), rows, two.data(), &pool, &scratch);
    MatMul(m, p.x.data(), p.bias.data(), rows, one.data(), nullptr, &scratch);
    ExpectWithinThePairsBound(p, 0, two, absl::StrCat("MatMul rows ", rows));
    for (size_t i = 0; i < two.size(); ++i) ASSERT_EQ(Bits(two[i]), Bits(one[i])) << "rows " << rows << " " << i;
    MatMulTransposed(p.x.data(), p.wf.data(), p.bias.data(), rows, p.cols, p.n, reference.data(), nullptr);
    EXPECT_NE(two, reference);
  }
}

// ---- The backend end to end.

constexpr int64_t kBlockTokens = 4;

struct Run16 {
  std::unique_ptr<CpuBackend> backend;
  int next_block = 0;
};

Run16 Create(const Checkpoint& checkpoint, CpuKernels kernels, int threads,
             StorageDType weight_dtype = StorageDType::kAuto) {
  BackendOptions options;
  options.weight_dtype = weight_dtype;
  options.cpu_kernels = kernels;
  options.num_threads = threads;
  options.block_tokens = kBlockTokens;
  auto backend = CpuBackend::Create(checkpoint, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return {};
  EXPECT_TRUE((*backend)->AllocateKvPool(64).ok());
  return {std::move(*backend)};
}

// Prefill of every prompt (its every position's logits) as one batch, then two decode steps
// of all of them together (the greedy token of each, one step a batch): every logits row,
// in order.
std::vector<float> PrefillThenDecode(CpuBackend* backend, const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<std::vector<int32_t>> tables;
  for (size_t s = 0; s < prompts.size(); ++s) {
    tables.push_back({static_cast<int32_t>(3 * s), static_cast<int32_t>(3 * s + 1), static_cast<int32_t>(3 * s + 2)});
  }
  std::vector<float> all, logits;
  ForwardBatch prefill;
  for (size_t s = 0; s < prompts.size(); ++s) {
    prefill.chunks.push_back(
        {.tokens = prompts[s], .start_position = 0, .block_table = tables[s], .need_logits = true, .all_logits = true});
  }
  EXPECT_TRUE(backend->Forward(prefill, &logits).ok());
  all.insert(all.end(), logits.begin(), logits.end());
  std::vector<int32_t> next(prompts.size());
  std::vector<int64_t> positions(prompts.size());
  const int64_t vocab = static_cast<int64_t>(logits.size() / prefill.num_logit_rows());
  for (size_t s = 0, row = 0; s < prompts.size(); row += prompts[s].size(), ++s) {
    const float* last = logits.data() + (row + prompts[s].size() - 1) * vocab;
    next[s] = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
    positions[s] = static_cast<int64_t>(prompts[s].size());
  }
  for (int step = 0; step < 2; ++step) {
    ForwardBatch decode;
    std::vector<std::vector<int32_t>> tokens(prompts.size());
    for (size_t s = 0; s < prompts.size(); ++s) {
      tokens[s] = {next[s]};
      decode.chunks.push_back({.tokens = tokens[s], .start_position = positions[s], .block_table = tables[s],
                               .need_logits = true});
    }
    EXPECT_TRUE(backend->Forward(decode, &logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
    for (size_t s = 0; s < prompts.size(); ++s) {
      const float* row = logits.data() + s * vocab;
      next[s] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      ++positions[s];
    }
  }
  return all;
}

// Odd sizes, so that every matrix has a short last group and a column tail: hidden 72,
// intermediate 100, vocab 515.
RandomCheckpointSpec OddSizes(DType type) {
  RandomCheckpointSpec spec = *RandomCheckpointPreset("tiny-llama");
  spec.dtype = type;
  spec.hidden = 72;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 18;
  spec.intermediate = 100;
  spec.vocab = 515;
  spec.seed = 21;
  return spec;
}

// Eight prompts of 1 to 9 tokens.
std::vector<std::vector<int32_t>> Prompts() {
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < 8; ++s) {
    std::vector<int32_t> prompt;
    for (int i = 0; i <= s + (s == 7 ? 1 : 0); ++i) prompt.push_back((37 * s + 11 * i + 5) % 515);
    prompts.push_back(prompt);
  }
  return prompts;
}

// The exact 16-bit path's logits equal the reference's bit for bit (dot16.h gives the
// reference's order), in prefill and with 8 sequences decoding.
TEST(Dot16BackendTest, F16AndBf16CheckpointsGiveTheReferenceLogitsWithTheExactKernels) {
  const std::string base = absl::StrCat(::testing::TempDir(), "/kvtier_dot16_", getpid());
  const std::vector<std::vector<int32_t>> prompts = Prompts();
  for (DType type : kTypes) {
    RandomCheckpointSpec spec = OddSizes(type);
    const std::string dir = absl::StrCat(base, "_", std::string(DTypeName(type)));
    ASSERT_TRUE(WriteRandomCheckpoint(spec, dir).ok());
    auto checkpoint = Checkpoint::Open(dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    Run16 fast = Create(**checkpoint, CpuKernels::kExact, 2);
    Run16 reference = Create(**checkpoint, CpuKernels::kReference, 1);
    ASSERT_NE(fast.backend, nullptr);
    ASSERT_NE(reference.backend, nullptr);
    EXPECT_EQ(fast.backend->compute_path(), absl::StrCat("cpu: ", std::string(DTypeName(type)),
                                                         " weights, 16-bit dot products (",
                                                         std::string(BestExactDot16().isa), ")"));
    const std::vector<float> got = PrefillThenDecode(fast.backend.get(), prompts);
    const std::vector<float> want = PrefillThenDecode(reference.backend.get(), prompts);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_FALSE(got.empty());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(Bits(got[i]), Bits(want[i])) << DTypeName(type) << " " << i;
    std::filesystem::remove_all(dir);
  }
}

// The default kernels on a BF16 checkpoint: the best set (with AVX-512 BF16, activations
// rounded to bf16) in prefill and decode, near the reference. Each product is within about
// 2^-8 of its magnitude of the exact one (dot16_bf16pairs.h; measured rms 1.7e-3 relative,
// bench/micro/cpu_gemm.cc); over two layers of seven products each, with lm_head in fp32, the
// logits may move by some multiple of that: 2% of the largest |logit| allows five times the
// worst case of one product, where leaving out a weight row or an activation row moves a
// logit by its whole size.
TEST(Dot16BackendTest, Bf16CheckpointWithTheDefaultKernelsIsNearTheReference) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/kvtier_dot16_best_", getpid());
  ASSERT_TRUE(WriteRandomCheckpoint(OddSizes(DType::kBF16), dir).ok());
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  Run16 fast = Create(**checkpoint, CpuKernels::kFast, 2);
  Run16 reference = Create(**checkpoint, CpuKernels::kReference, 1);
  ASSERT_NE(fast.backend, nullptr);
  ASSERT_NE(reference.backend, nullptr);
  EXPECT_EQ(fast.backend->compute_path(),
            absl::StrCat("cpu: BF16 weights, 16-bit dot products (", std::string(BestDot16().isa), ")"));
  const std::vector<float> got = PrefillThenDecode(fast.backend.get(), Prompts());
  const std::vector<float> want = PrefillThenDecode(reference.backend.get(), Prompts());
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  double largest = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    largest = std::max(largest, std::fabs(double{want[i]}));
    worst = std::max(worst, std::fabs(double{got[i]} - want[i]));
  }
  std::printf("BF16 with %.*s against the reference: logits at most %.3g apart, largest |logit| %.3g\n",
              static_cast<int>(BestDot16().isa.size()), BestDot16().isa.data(), worst, largest);
  EXPECT_LE(worst, 0.02 * largest);
  std::filesystem::remove_all(dir);
}

// weight_dtype fp16 / bf16 on an fp32 checkpoint: the exact kernels hold the projections in
// 16 bits and give the logits of the reference kernels on the rounded values.
TEST(Dot16BackendTest, WeightDtype16HoldsTheProjectionsIn16Bits) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/kvtier_dot16_f32_", getpid());
  ASSERT_TRUE(WriteRandomCheckpoint(OddSizes(DType::kF32), dir).ok());
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  for (StorageDType dtype : {StorageDType::kFp16, StorageDType::kBf16}) {
    Run16 fast = Create(**checkpoint, CpuKernels::kExact, 2, dtype);
    Run16 reference = Create(**checkpoint, CpuKernels::kReference, 1, dtype);
    ASSERT_NE(fast.backend, nullptr);
    ASSERT_NE(reference.backend, nullptr);
    const std::string type = dtype == StorageDType::kFp16 ? "F16" : "BF16";
    // The projections in 16 bits; lm_head (and the embeddings) stay fp32, as on the GPU.
    EXPECT_EQ(fast.backend->compute_path(), absl::StrCat("cpu: ", type, "+F32 weights, 16-bit dot products (",
                                                         std::string(BestExactDot16().isa), ")"));
    const std::vector<float> got = PrefillThenDecode(fast.backend.get(), Prompts());
    const std::vector<float> want = PrefillThenDecode(reference.backend.get(), Prompts());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(Bits(got[i]), Bits(want[i])) << type << " " << i;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier
