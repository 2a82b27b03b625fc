// Tests of the oneDNN path for BF16 products (onednn_bf16.h): that MatMul's dispatch takes it
// for many rows on a large BF16 matrix and only there; that it runs on the calling threads
// (oneDNN's OpenMP starts no threads of its own); that its results are within the bound of
// dot16_bf16pairs.h against the fp32 reference and close to a double sum of the rounded
// activations; that they do not depend on the thread count; and the backend on a BF16
// checkpoint with such matrices: its compute_path says when oneDNN ran, its logits near the
// reference's. Skipped where the build has
// no oneDNN or the processor no AVX-512 BF16.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_matrix.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/dot16.h"
#include "backend/cpu/onednn_bf16.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/random_checkpoint.h"
#include "model/tensor.h"
#include "testing/random_values.h"
#include "testing/sanitizers.h"

namespace kvtier {
namespace {

// A large BF16 matrix whose shape is no multiple of oneDNN's blocks: 2100 rows (slices of
// 256 and a tail of 52), 2000 columns (no multiple of 32), 4.2M values.
constexpr int64_t kOut = 2100;
constexpr int64_t kIn = 2000;

const Dot16Kernels* InexactSet() {
  for (const Dot16Kernels* set : SupportedDot16()) {
    if (!set->exact) return set;
  }
  return nullptr;
}

struct Bf16Problem {
  CpuMatrix m;
  std::vector<float> wf;    // the stored weights, widened
  std::vector<float> x;     // (rows, kIn)
  std::vector<float> bias;  // (kOut)
};

Bf16Problem MakeBf16Problem(int64_t rows, const Dot16Kernels& set, std::mt19937& rng) {
  Bf16Problem p;
  p.m.dtype = DType::kBF16;
  p.m.rows = kOut;
  p.m.cols = kIn;
  p.m.dot16 = &set;
  p.m.packed.resize(static_cast<size_t>(kOut * kIn) * sizeof(uint16_t));
  uint16_t* w = reinterpret_cast<uint16_t*>(p.m.packed.data());
  const std::vector<float> values = testing::RandomNormal(static_cast<size_t>(kOut * kIn), rng, 0.05f);
  for (size_t i = 0; i < values.size(); ++i) {
    w[i] = FloatToBf16(values[i]);
    p.wf.push_back(Bf16ToFloat(w[i]));
  }
  p.x = testing::RandomNormal(static_cast<size_t>(rows * kIn), rng, 3.0f);
  p.bias = testing::RandomNormal(static_cast<size_t>(kOut), rng);
  return p;
}

int ThreadsOfThisProcess() {
  int count = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (const dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
  closedir(dir);
  return count;
}

uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

// First in the file, so that no earlier test has run oneDNN in this process: an OpenMP team
// started by oneDNN would stay, and the thread count would not grow here.
TEST(OnednnBf16Test, RunsOnThePoolsThreadsWithoutStartingAny) {
  const Dot16Kernels* set = InexactSet();
  if (set == nullptr || !OnednnBf16Available()) GTEST_SKIP() << "no oneDNN bf16 path in this build or processor";
  std::mt19937 rng(21);
  const Bf16Problem p = MakeBf16Problem(kOnednnBf16MinRows, *set, rng);
  ASSERT_TRUE(UsesOnednnBf16(p.m, kOnednnBf16MinRows));
  ThreadPool pool(2, ThreadPool::Options{.spin_us = 100, .pin_workers = false});
  std::vector<float> out(static_cast<size_t>(kOnednnBf16MinRows * kOut));
  std::vector<uint8_t> scratch;
  const int before = ThreadsOfThisProcess();
  ASSERT_GT(before, 0);
  for (ThreadPool* threads : {&pool, static_cast<ThreadPool*>(nullptr)}) {
    ASSERT_TRUE(OnednnBf16MatMul(p.m, p.x.data(), nullptr, kOnednnBf16MinRows, out.data(), threads, &scratch));
  }
  EXPECT_EQ(ThreadsOfThisProcess(), before);
}

TEST(OnednnBf16Test, DispatchTakesItForManyRowsOnALargeBf16MatrixOnly) {
  const Dot16Kernels* set = InexactSet();
  if (set == nullptr || !OnednnBf16Available()) GTEST_SKIP() << "no oneDNN bf16 path in this build or processor";
  CpuMatrix m;
  m.dtype = DType::kBF16;
  m.rows = 2048;
  m.cols = 2048;
  m.dot16 = set;
  EXPECT_TRUE(UsesOnednnBf16(m, kOnednnBf16MinRows));
  EXPECT_TRUE(UsesOnednnBf16(m, 512));
  EXPECT_FALSE(UsesOnednnBf16(m, kOnednnBf16MinRows - 1));  // decode and short prompts: the kernel
  m.dot16 = &BestExactDot16();
  EXPECT_FALSE(UsesOnednnBf16(m, 512));  // kExact keeps the reference's bits
  m.dot16 = set;
  m.dtype = DType::kF16;
  EXPECT_FALSE(UsesOnednnBf16(m, 512));  // F16 stays exact
  m.dtype = DType::kBF16;
  m.rows = 512;
  EXPECT_FALSE(UsesOnednnBf16(m, 512));  // below kOnednnBf16MinValues: the kernel is as fast
}

// MatMul through oneDNN against the fp32 reference within dot16_bf16pairs.h's bound,
// 2^-8 M + (2 ceil(cols / 32) + 5) 2^-24 M plus the reference's own (cols / 8 + 5) 2^-24 M;
// and against a double sum of the activations rounded to bf16 within the additions' part
// for oneDNN's order (each output's products summed along k, two roundings per vdpbf16ps:
// cols + 5 roundings of 2^-24 M), doubled for margin, so a column lost or counted twice
// shows. One thread and two give the same bits (fixed slices), and the activation rows are
// really rounded (not the reference's bits).
TEST(OnednnBf16Test, MatMulIsWithinThePairsBoundOnAnyThreadCount) {
  const Dot16Kernels* set = InexactSet();
  if (set == nullptr || !OnednnBf16Available()) GTEST_SKIP() << "no oneDNN bf16 path in this build or processor";
  std::mt19937 rng(22);
  ThreadPool pool(2);
  for (const int64_t rows : {kOnednnBf16MinRows, int64_t{131}}) {
    const Bf16Problem p = MakeBf16Problem(rows, *set, rng);
    ASSERT_TRUE(UsesOnednnBf16(p.m, rows));
    std::vector<float> two(static_cast<size_t>(rows * kOut)), one(two.size()), reference(two.size());
    std::vector<uint8_t> scratch;
    MatMul(p.m, p.x.data(), p.bias.data(), rows, two.data(), &pool, &scratch);
    MatMul(p.m, p.x.data(), p.bias.data(), rows, one.data(), nullptr, &scratch);
    MatMulTransposed(p.x.data(), p.wf.data(), p.bias.data(), rows, kIn, kOut, reference.data(), nullptr);
    for (size_t i = 0; i < two.size(); ++i) ASSERT_EQ(Bits(two[i]), Bits(one[i])) << "rows " << rows << " " << i;
    EXPECT_NE(two, reference);
    const double steps = std::ceil(static_cast<double>(kIn) / 32);
    const double pairs_bound_additions = (2 * steps + 5) * std::ldexp(1.0, -24);
    const double reference_bound = (static_cast<double>(kIn) / 8 + 5) * std::ldexp(1.0, -24);
    const double sequential_additions = 2 * (static_cast<double>(kIn) + 5) * std::ldexp(1.0, -24);
    std::vector<float> rounded(p.x.size());
    for (size_t i = 0; i < p.x.size(); ++i) rounded[i] = Bf16ToFloat(FloatToBf16(p.x[i]));
    // The double sums are most of this test's time; the sanitizer builds (several times
    // slower) check every eighth output of each row, a different eighth on each of the next
    // rows, so that every column is still checked in some rows.
    const int64_t column_stride = testing::kSanitized ? 8 : 1;
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t j = t % column_stride; j < kOut; j += column_stride) {
        double rounded_sum = p.bias[j], magnitude = std::fabs(p.bias[j]);
        for (int64_t k = 0; k < kIn; ++k) {
          const double w = p.wf[j * kIn + k];
          rounded_sum += double{rounded[t * kIn + k]} * w;
          magnitude += std::fabs(double{p.x[t * kIn + k]} * w);
        }
        const double rounded_magnitude = magnitude * (1 + std::ldexp(1.0, -8));
        const float got = two[t * kOut + j];
        ASSERT_NEAR(got, rounded_sum, sequential_additions * rounded_magnitude)
            << "rows " << rows << ": against the rounded activations' sum at " << t << "," << j;
        ASSERT_NEAR(got, reference[t * kOut + j],
                    std::ldexp(1.0, -8) * magnitude + pairs_bound_additions * rounded_magnitude +
                        reference_bound * magnitude)
            << "rows " << rows << ": against the reference at " << t << "," << j;
      }
    }
  }
}

// One layer with Llama-3.2-1B's widths (q, o, gate, up, down of 2048 x 2048: five matrices
// for oneDNN; k and v of 512 x 2048 stay on the kernel), in BF16.
RandomCheckpointSpec WideBf16() {
  RandomCheckpointSpec spec = *RandomCheckpointPreset("tiny-llama");
  spec.dtype = DType::kBF16;
  spec.hidden = 2048;
  spec.layers = 1;
  spec.heads = 16;
  spec.kv_heads = 4;
  spec.head_dim = 128;
  spec.intermediate = 2048;
  spec.vocab = 256;
  spec.seed = 23;
  return spec;
}

std::unique_ptr<CpuBackend> CreateBackend(const Checkpoint& checkpoint, CpuKernels kernels) {
  BackendOptions options;
  options.cpu_kernels = kernels;
  options.num_threads = 2;
  options.block_tokens = 16;
  auto backend = CpuBackend::Create(checkpoint, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return nullptr;
  EXPECT_TRUE((*backend)->AllocateKvPool(16).ok());
  return std::move(*backend);
}

// The logits of a prompt of `tokens` tokens, every position's.
std::vector<float> Prefill(CpuBackend* backend, int64_t tokens) {
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < tokens; ++i) prompt.push_back(static_cast<int32_t>((37 * i + 5) % 256));
  const std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  ForwardBatch batch;
  batch.chunks.push_back({.tokens = prompt, .start_position = 0, .block_table = table, .need_logits = true,
                          .all_logits = true});
  std::vector<float> logits;
  EXPECT_TRUE(backend->Forward(batch, &logits).ok());
  return logits;
}

// compute_path names oneDNN only once a step of enough rows has run, and never for kExact;
// the logits stay near the reference's (as Dot16BackendTest's bound for the vdpbf16ps
// kernel: 2% of the largest |logit|).
TEST(OnednnBf16BackendTest, ComputePathSaysWhenOnednnRanAndLogitsStayNearTheReference) {
  const Dot16Kernels* set = InexactSet();
  if (set == nullptr || !OnednnBf16Available()) GTEST_SKIP() << "no oneDNN bf16 path in this build or processor";
  const std::string dir = absl::StrCat(::testing::TempDir(), "/kvtier_onednn_bf16_", getpid());
  ASSERT_TRUE(WriteRandomCheckpoint(WideBf16(), dir).ok());
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  std::unique_ptr<CpuBackend> fast = CreateBackend(**checkpoint, CpuKernels::kFast);
  std::unique_ptr<CpuBackend> exact = CreateBackend(**checkpoint, CpuKernels::kExact);
  ASSERT_NE(fast, nullptr);
  ASSERT_NE(exact, nullptr);
  const std::string before = fast->compute_path();
  EXPECT_EQ(before.find("oneDNN"), std::string::npos) << before;
  Prefill(fast.get(), kOnednnBf16MinRows - 1);
  EXPECT_EQ(fast->compute_path(), before) << "a step of fewer rows than kOnednnBf16MinRows";
  const std::vector<float> got = Prefill(fast.get(), kOnednnBf16MinRows);
  EXPECT_EQ(fast->compute_path(), before + ", prefill through oneDNN bf16 matmul (5 matrices, steps of >= " +
                                      std::to_string(kOnednnBf16MinRows) + " rows)");
  const std::vector<float> exact_logits = Prefill(exact.get(), kOnednnBf16MinRows);
  EXPECT_EQ(exact->compute_path().find("oneDNN"), std::string::npos) << exact->compute_path();
  // kExact gives kReference's bits on a BF16 checkpoint (CpuKernels): the normal build checks
  // that here; the sanitizer builds (several times slower, where the reference's fp32
  // products are most of this test's time) take kExact's logits as the reference's.
  std::vector<float> want = exact_logits;
  if (!testing::kSanitized) {
    std::unique_ptr<CpuBackend> reference = CreateBackend(**checkpoint, CpuKernels::kReference);
    ASSERT_NE(reference, nullptr);
    want = Prefill(reference.get(), kOnednnBf16MinRows);
    EXPECT_EQ(exact_logits, want) << "kExact's logits are not kReference's bits";
  }
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  double largest = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    largest = std::max(largest, std::fabs(double{want[i]}));
    worst = std::max(worst, std::fabs(double{got[i]} - want[i]));
  }
  std::printf("BF16 through oneDNN against the reference: logits at most %.3g apart, largest |logit| %.3g\n", worst,
              largest);
  EXPECT_LE(worst, 0.02 * largest);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier
