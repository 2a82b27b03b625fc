// What each weight and KV format of the fast CPU path costs in quality on the trained demo
// model (models/demo), against the fp32 reference backend (cpu-reference): every position of
// its held-out text scored as PyTorch scored it at training (windows of 511 tokens), KL of
// each format's next-token distribution from the reference's, top-1 agreement, and each
// format's perplexity. The reference's own perplexity must equal PyTorch's (training.json),
// which ties the scoring to an independent implementation.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "testing/format_quality.h"
#include "testing/sanitizers.h"
#include "tokenizer/tokenizer.h"

namespace kvtier {
namespace {

const std::string kDemo = std::string(KVTIER_SOURCE_DIR) + "/models/demo";

struct Format {
  const char* name;
  CpuKernels kernels;
  StorageDType weight_dtype;
  StorageDType kv_dtype;
  // Bounds: about twice what was measured (the test prints the figures) over the whole text
  // and over the sanitizers' first 255 positions, so a kernel that rounds differently passes
  // and one that computes something else does not (a wrong product moves KL by orders of
  // magnitude on this model's peaked distributions).
  double max_kl_mean;
  double min_top1;
  double max_perplexity_rise;  // relative to the reference's perplexity
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(CpuFormatsQualityTest, EachFormatStaysCloseToTheFp32Reference) {
  auto checkpoint = Checkpoint::Open(kDemo);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  auto tokenizer = tokenizer::Tokenizer::FromDirectory(kDemo);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto ids = (*tokenizer)->Encode(ReadFile(kDemo + "/heldout.txt"), tokenizer::EncodeOptions{});
  ASSERT_TRUE(ids.ok()) << ids.status();
  const nlohmann::json pytorch = nlohmann::json::parse(ReadFile(kDemo + "/training.json"))["heldout_perplexity"];
  const int64_t window = pytorch["window"].get<int64_t>();
  ASSERT_EQ(static_cast<int64_t>(ids->size()), pytorch["tokens"].get<int64_t>());

  // The demo model's checkpoint is bf16, so `auto` holds bf16 weights (AVX-512 BF16 products
  // where the processor has them: activations rounded to bf16); f16 holds its values exactly.
  const Format formats[] = {
      {"fp32 (cpu-reference)", CpuKernels::kReference, StorageDType::kAuto, StorageDType::kAuto, 0, 0, 0},
      {"bf16 weights (auto)", CpuKernels::kFast, StorageDType::kAuto, StorageDType::kAuto, 5e-5, 0.985, 1e-3},
      {"f16 weights", CpuKernels::kFast, StorageDType::kFp16, StorageDType::kAuto, 1e-8, 0.999, 1e-5},
      {"q8_0 weights", CpuKernels::kFast, StorageDType::kQ8_0, StorageDType::kAuto, 6e-4, 0.96, 2e-3},
      {"q4_k weights", CpuKernels::kFast, StorageDType::kQ4_K, StorageDType::kAuto, 4e-2, 0.83, 3e-2},
      {"fp8 weights", CpuKernels::kFast, StorageDType::kFp8, StorageDType::kAuto, 3e-3, 0.94, 2e-3},
      {"fp8 KV", CpuKernels::kFast, StorageDType::kAuto, StorageDType::kFp8, 3e-3, 0.95, 3e-3},
  };
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<Backend*> raw;
  for (const Format& f : formats) {
    BackendOptions options;
    options.cpu_kernels = f.kernels;
    options.weight_dtype = f.weight_dtype;
    options.kv_dtype = f.kv_dtype;
    options.max_sequences = window;
    options.max_tokens_per_step = window;
    auto cpu = CpuBackend::Create(**checkpoint, options);
    ASSERT_TRUE(cpu.ok()) << f.name << ": " << cpu.status();
    ASSERT_TRUE((*cpu)->AllocateKvPool((window + options.block_tokens - 1) / options.block_tokens).ok());
    raw.push_back(cpu->get());
    backends.push_back(std::move(*cpu));
  }
  // Under the sanitizers (a Debug build, about twenty times slower here) the same checks run
  // on the first 255 positions only, and the comparison with PyTorch's perplexity, which needs
  // the whole text, is left to the other builds.
  const int64_t max_positions = testing::kSanitized ? 255 : 0;
  auto run = testing::ScoreFormats(raw, *ids, testing::kSanitized ? 256 : window, max_positions);
  ASSERT_TRUE(run.ok()) << run.status();
  if (!testing::kSanitized) {
    ASSERT_EQ(run->positions, pytorch["scored_tokens"].get<int64_t>());
    ASSERT_GE(run->positions, 1000);
  }

  const double reference_perplexity = run->scores[0].Perplexity(run->positions);
  const double pytorch_perplexity = pytorch["perplexity"].get<double>();
  std::printf("%-22s %-44s %10s %10s %8s %11s\n", "format", "compute path", "KL mean", "KL p99", "top-1",
              "perplexity");
  for (size_t k = 0; k < raw.size(); ++k) {
    const testing::FormatScore& s = run->scores[k];
    std::printf("%-22s %-44s %10.3g %10.3g %8.4f %11.4f\n", formats[k].name,
                raw[k]->compute_path().c_str(), s.KlMean(), s.KlQuantile(0.99),
                k == 0 ? 1.0 : s.Top1(run->positions), s.Perplexity(run->positions));
  }
  std::printf("%lld positions in %lld windows; PyTorch's perplexity %.4f\n", static_cast<long long>(run->positions),
              static_cast<long long>(run->windows), pytorch_perplexity);
  if (!testing::kSanitized) EXPECT_NEAR(reference_perplexity, pytorch_perplexity, 1e-3 * pytorch_perplexity);
  for (size_t k = 1; k < raw.size(); ++k) {
    const testing::FormatScore& s = run->scores[k];
    EXPECT_LE(s.KlMean(), formats[k].max_kl_mean) << formats[k].name;
    EXPECT_GE(s.Top1(run->positions), formats[k].min_top1) << formats[k].name;
    EXPECT_LE(s.Perplexity(run->positions), reference_perplexity * (1 + formats[k].max_perplexity_rise))
        << formats[k].name;
  }
}

}  // namespace
}  // namespace kvtier
