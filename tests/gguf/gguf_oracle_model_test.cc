// kvtier against llama.cpp on the same GGUF files (llama_oracle.h), and against the
// safetensors checkpoints the files were converted from.
//  - F32 files of random Llama, Mistral-shaped, Qwen2 and Qwen3 checkpoints (converted by
//    kvtier convert, and one written by kvtier mkmodel --format gguf) and of the demo
//    model: 3 prompts x 32 greedy tokens identical, and the distribution before each of
//    them (the first: the prompt's last position) within kLogProbBound of llama.cpp's. A
//    random model's top two tokens can be near-tied; a divergence is accepted only where
//    llama.cpp's own top-2 log-probability gap is below kNearTie, and the prompt's
//    comparison ends there (none occur with these seeds; the count is printed).
//  - Files of the demo model (BF16, F16 and Q8_0 written by kvtier convert; Q4_0, Q4_K_M,
//    Q5_K_M and Q6_K written by llama.cpp's quantizer, so the Q4_K, Q5_K and Q6_K blocks
//    come from llama.cpp itself): kvtier reads every tensor as llama.cpp does, bit for
//    bit; and on the Q8_0 and Q4_K_M files, over 1024 positions of held-out text, top-1
//    agreement >= 99% raw and counting llama.cpp's near-ties (kQuantizedTie), and mean
//    KL(llama.cpp || kvtier) <= kMaxMeanKl. Both quantize the activations of their dot
//    products (kvtier's fast kernels, as llama.cpp does); kvtier's fast kernels stay within
//    the bounds of what quantizing costs (kMinQuantizationTop1 raw) of its fp32 reference
//    kernels; and the reference kernels, against
//    llama.cpp on the F32 file of the same weights, agree on top-1 raw (>= 99.9%) with
//    log-probabilities within kExactLogProbBound.
//  - Round trip: safetensors -> kvtier convert -> GGUF gives the same logits bit for bit
//    (F32, and the demo's BF16 kept as it is) and the same greedy tokens; the demo as F16
//    and Q8_0 stays within the bounds of what quantizing costs of its safetensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "gguf_models.h"
#include "model/block_quants.h"
#include "model/gguf_file.h"
#include "kvtier_runner.h"
#include "llama_oracle.h"
#include "testing/sanitizers.h"
#include "tokenizer/tokenizer.h"

namespace kvtier::testing {
namespace {

// Sanitizer builds (Debug, instrumented: kvtier's side runs ~20x slower) make the same
// comparisons on fewer tokens: 8 greedy tokens per prompt, the first 256 positions of the
// held-out text. The bounds below are the normal build's, over 32 tokens and 1024 positions.
constexpr int kNewTokens = kSanitized ? 8 : 32;
// Measured: at most 4e-6 on the random models and 3.3e-5 on the demo model (6e-6 at its
// first token), llama.cpp with an fp32 KV cache as kvtier's CPU backend keeps it; the bound
// leaves room for other CPUs' summation orders.
constexpr double kLogProbBound = 1e-4;  // max |log p| difference, tokens with p > 1e-6
constexpr double kNearTie = 2 * kLogProbBound;  // nats between llama.cpp's top two tokens
constexpr double kMinTop1 = 0.99;
// llama.cpp quantizes the activations of a quantized matrix's dot products (to Q8_0, or to
// Q8_K for the K types), and so do kvtier's fast kernels, in the same integer blocks and, for
// Q4_K, Q5_K and Q6_K, in the float order of llama.cpp's x86 kernels (quant_dot.h).
// Measured on the demo model's held-out text, kvtier's fast kernels against llama.cpp: Q8_0
// raw top-1 99.1%, mean KL 1.5e-4 nats; Q4_K_M 99.0% (1014 of 1024), 2.0e-4 (in kvtier's
// former K-quant order 98.8%; the fp32 reference kernels 97.9%, 4.4e-4); every disagreement
// where llama.cpp's own top two are within 0.1 nats.
// Why they differ at all: the first positions of the first sequence agree within 3e-5 in
// log-probability (19 on the Q8_0 file, 7 on the Q4_K_M file); then float rounding
// differences in the unquantized ops (norms, softmax, RoPE, SiLU, their summation orders)
// move one activation across a rounding step of its quantization, that position's output
// or K/V change, and later positions differ by up to ~0.1 nats. llama.cpp against itself, a
// 512-token batch against one token at a time, shows the same effect: 99.8% top-1, worst
// 0.08 nats.
// Where they are within kQuantizedTie, either pick counts as agreeing.
constexpr double kQuantizedTie = 0.1;  // nats
// The bound, over 1024 positions. The sanitizer builds' 256 positions keep 97%: one
// disagreement there is 0.4% (the Q8_0 file has 3 in its first 256).
constexpr double kMinRawTop1 = kSanitized ? 0.97 : 0.99;
// Q4_K_M's raw agreement depends on the CPU: llama.cpp's K-quant dot products and kvtier's
// take the float order of the instruction set they run on, and on a CPU with AVX-512 VNNI and
// AMX both differ from the AVX2 order above: 98.8% (1012 of 1024) there, every disagreement a
// near-tie (counting them: 100%). Its bound leaves room for that; the near-tie count keeps 99%.
constexpr double kMinRawTop1Q4K = kSanitized ? 0.97 : 0.985;
// kvtier's fast kernels against its own fp32 reference kernels measure what quantizing the
// activations costs, not a difference from llama.cpp: llama.cpp's quantized file against the
// F32 of its weights loses as much (Q4_K_M 97.9% raw), so that comparison has this bound.
constexpr double kMinQuantizationTop1 = 0.97;
constexpr double kMaxMeanKl = 2e-3;  // nats
// kvtier against llama.cpp on the F32 file of a quantized file's weights, no activation
// quantization on either side: measured top-1 100%, log-probabilities at most 6e-5 apart
// over the 1024 positions (sequences of 256: longer sums than the F32 tests' 96 positions
// of short prompts, so a bound of their own with the same margin). The mean KL printed for
// it, ~3e-6 nats, is the floor of a KL between float32 probabilities (llama.cpp's do not
// sum to 1 closer than ~1e-6), not a difference.
constexpr double kMinExactTop1 = 0.999;
constexpr double kExactLogProbBound = 2e-4;
constexpr int64_t kPositions = kSanitized ? 256 : 1024;

#define SKIP_WITHOUT_ORACLE()                                                        \
  if (std::optional<std::string> missing = LlamaOracleMissing()) GTEST_SKIP() << *missing

// "tiny-llama" -> "tiny_llama" (gtest names).
std::string TestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

std::vector<std::string> PromptTexts() {
  return {"The meaning of life is", "Never trust a man who", "A computer is a machine that"};
}

std::vector<std::vector<int32_t>> Prompts(const std::string& gguf) {
  auto tokenizer = tokenizer::Tokenizer::FromGgufFile(gguf);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& text : PromptTexts()) {
    auto ids = (*tokenizer)->Encode(text);
    EXPECT_TRUE(ids.ok());
    prompts.push_back(*ids);
  }
  return prompts;
}

double MaxLogProbDifference(const std::vector<float>& probs, const std::vector<float>& logprobs) {
  double worst = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] > 1e-6f) worst = std::max(worst, std::fabs(std::log(double{probs[i]}) - logprobs[i]));
  }
  return worst;
}

class F32OracleTest : public ::testing::TestWithParam<std::string> {};

// "demo", "mkmodel:<preset>" (kvtier mkmodel --format gguf) or a preset (kvtier convert).
std::string F32Gguf(const std::string& param) {
  if (param == "demo") return DemoGguf("f32");
  if (param.starts_with("mkmodel:")) return MkmodelGguf(param.substr(8));
  return RandomGguf(param, "f32");
}

TEST_P(F32OracleTest, GreedyTokensAndLogitsMatchLlamaCpp) {
  SKIP_WITHOUT_ORACLE();
  const std::string gguf = F32Gguf(GetParam());
  ASSERT_FALSE(gguf.empty());
  const std::vector<std::vector<int32_t>> prompts = Prompts(gguf);
  auto llama = LlamaGenerate(gguf, prompts, kNewTokens);
  ASSERT_TRUE(llama.ok()) << llama.status();
  auto kvtier = KvtierRunner::Open(gguf);
  ASSERT_TRUE(kvtier.ok()) << kvtier.status();
  ASSERT_EQ(llama->vocab, (*kvtier)->checkpoint().config().vocab_size);
  int near_ties = 0;
  double worst_first = 0, worst = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> logprobs;
    ASSERT_TRUE((*kvtier)->Generate(prompts[p], kNewTokens, &tokens, &logprobs).ok());
    const std::vector<int32_t>& want = llama->tokens[p];
    ASSERT_EQ(want.size(), static_cast<size_t>(kNewTokens));
    for (int s = 0; s < kNewTokens; ++s) {
      const std::vector<float>& ref = llama->probs[p * kNewTokens + s];
      const double difference = MaxLogProbDifference(ref, logprobs[s]);
      if (s == 0) worst_first = std::max(worst_first, difference);
      worst = std::max(worst, difference);
      EXPECT_LE(difference, kLogProbBound) << "prompt " << p << " step " << s;
      if (tokens[s] == want[s]) continue;
      const double gap = std::fabs(std::log(double{ref[want[s]]}) - std::log(double{ref[tokens[s]]}));
      EXPECT_LT(gap, kNearTie) << "prompt " << p << " step " << s << ": kvtier " << tokens[s] << ", llama.cpp "
                               << want[s];
      ++near_ties;
      break;  // the continuations differ from here on
    }
  }
  std::printf("%s: worst log-prob difference %.3g (first token %.3g), near-ties %d\n", GetParam().c_str(), worst,
              worst_first, near_ties);
}

INSTANTIATE_TEST_SUITE_P(Models, F32OracleTest,
                         ::testing::Values("tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "demo",
                                           "mkmodel:tiny-llama"),
                         TestName);

// The first kPositions tokens (and a few more) of the demo's held-out text, in sequences of
// 256.
std::vector<std::vector<int32_t>> HeldOut(const std::string& gguf) {
  const std::string text = ReadFileText(std::string(KVTIER_SOURCE_DIR) + "/models/demo/heldout.txt");
  auto tokenizer = tokenizer::Tokenizer::FromGgufFile(gguf);
  EXPECT_TRUE(tokenizer.ok());
  auto ids = (*tokenizer)->Encode(text);
  EXPECT_TRUE(ids.ok());
  std::vector<std::vector<int32_t>> sequences;
  for (size_t at = 0; at < static_cast<size_t>(kPositions) && at + 1 < ids->size(); at += 256) {
    sequences.emplace_back(ids->begin() + at, ids->begin() + std::min(ids->size(), at + 256));
  }
  return sequences;
}

// Nats between the two most likely tokens of a distribution given as probabilities.
double TopTwoGap(const std::vector<float>& probs) {
  float first = 0, second = 0;
  for (float p : probs) {
    if (p > first) {
      second = first;
      first = p;
    } else if (p > second) {
      second = p;
    }
  }
  return second > 0 ? std::log(double{first}) - std::log(double{second}) : INFINITY;
}

// Top-1 agreement and KL of kvtier's distributions against a reference's, position by position.
struct Agreement {
  int64_t positions = 0, top1 = 0, top1_or_tie = 0, reference_ties = 0;
  double kl = 0;

  void Add(const std::vector<float>& reference_probs, const std::vector<float>& logprobs) {
    const int32_t pick = ArgMax(logprobs), want = ArgMax(reference_probs);
    reference_ties += TopTwoGap(reference_probs) < kQuantizedTie;
    top1 += pick == want;
    top1_or_tie +=
        pick == want || std::log(double{reference_probs[want]}) - std::log(double{reference_probs[pick]}) < kQuantizedTie;
    kl += KlDivergence(reference_probs, logprobs);
    ++positions;
  }

  void Print(const std::string& what) const {
    const double n = static_cast<double>(positions);
    std::printf(
        "%s: %lld positions, top-1 agreement %.4f (%.4f counting near-ties; the reference's top two are within %.2g "
        "nats at %.4f of the positions), mean KL %.3g nats\n",
        what.c_str(), static_cast<long long>(positions), top1 / n, top1_or_tie / n, kQuantizedTie, reference_ties / n,
        kl / n);
  }

  // Prints the measures and checks them: top-1 counting near-ties >= kMinTop1, raw top-1
  // >= min_raw_top1, mean KL <= kMaxMeanKl.
  void Check(const std::string& what, double min_raw_top1 = kMinRawTop1) const {
    Print(what);
    const double n = static_cast<double>(positions);
    EXPECT_GE(positions, kPositions);
    EXPECT_GE(top1_or_tie / n, kMinTop1) << what;
    EXPECT_GE(top1 / n, min_raw_top1) << what;
    EXPECT_LE(kl / n, kMaxMeanKl) << what;
  }
};

// Distributions given as probabilities, to compare as log-probabilities (a probability that
// underflowed to 0 taken as the least float above it).
std::vector<float> Logs(const std::vector<float>& probs) {
  std::vector<float> logs(probs.size());
  for (size_t i = 0; i < probs.size(); ++i) {
    logs[i] = static_cast<float>(std::log(double{std::max(probs[i], std::numeric_limits<float>::denorm_min())}));
  }
  return logs;
}

class QuantizedOracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizedOracleTest, TopOneAndKlMatchLlamaCpp) {
  SKIP_WITHOUT_ORACLE();
  const std::string gguf = DemoGguf(GetParam());
  ASSERT_FALSE(gguf.empty());
  const std::vector<std::vector<int32_t>> sequences = HeldOut(gguf);
  auto llama = LlamaScore(gguf, sequences);
  ASSERT_TRUE(llama.ok()) << llama.status();
  auto kvtier = KvtierRunner::Open(gguf);
  auto reference = KvtierRunner::Open(gguf, CpuKernels::kReference);
  ASSERT_TRUE(kvtier.ok()) << kvtier.status();
  ASSERT_TRUE(reference.ok()) << reference.status();
  Agreement agreement, fast_to_reference;
  std::vector<std::vector<float>> kvtier_rows;  // the reference kernels'
  for (const std::vector<int32_t>& sequence : sequences) {
    auto rows = (*kvtier)->Score(sequence);
    auto reference_rows = (*reference)->Score(sequence);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_TRUE(reference_rows.ok()) << reference_rows.status();
    for (size_t i = 0; i < rows->size(); ++i) {
      agreement.Add(llama->probs[agreement.positions], (*rows)[i]);
      std::vector<float> reference_probs((*reference_rows)[i].size());
      for (size_t t = 0; t < reference_probs.size(); ++t) reference_probs[t] = std::exp((*reference_rows)[i][t]);
      fast_to_reference.Add(reference_probs, (*rows)[i]);
      kvtier_rows.push_back(std::move((*reference_rows)[i]));
    }
  }
  ASSERT_EQ(agreement.positions, static_cast<int64_t>(llama->probs.size()));
  agreement.Check(GetParam() + " against llama.cpp", GetParam() == "q4_k_m" ? kMinRawTop1Q4K : kMinRawTop1);
  // The quantized products against kvtier's own fp32 reference on the same blocks: the
  // cost of quantizing the activations.
  fast_to_reference.Check(GetParam() + ": kvtier's fast kernels against its reference kernels", kMinQuantizationTop1);

  // Without quantized activations on either side: llama.cpp on the F32 file its quantizer
  // makes of the weights (whose every value equals kvtier's reading: DequantizeOracleTest)
  // agrees with kvtier's reference kernels on the quantized file as on any F32 file: top-1
  // at every position, log-probabilities within kExactLogProbBound. llama.cpp on the
  // quantized file is as far from it as kvtier is (printed).
  const std::string f32 = gguf + ".llama-f32.gguf";
  const absl::Status dequantized = LlamaQuantize(gguf, f32, /*LLAMA_FTYPE_ALL_F32=*/0);
  ASSERT_TRUE(dequantized.ok()) << dequantized;
  auto exact = LlamaScore(f32, sequences);
  ASSERT_TRUE(exact.ok()) << exact.status();
  ASSERT_EQ(exact->probs.size(), kvtier_rows.size());
  Agreement kvtier_to_exact, llama_to_exact;
  double worst = 0;
  for (size_t i = 0; i < kvtier_rows.size(); ++i) {
    kvtier_to_exact.Add(exact->probs[i], kvtier_rows[i]);
    llama_to_exact.Add(exact->probs[i], Logs(llama->probs[i]));
    worst = std::max(worst, MaxLogProbDifference(exact->probs[i], kvtier_rows[i]));
  }
  kvtier_to_exact.Check(GetParam() + ": kvtier against llama.cpp on the F32 of its weights", kMinExactTop1);
  std::printf("%s: kvtier against llama.cpp on the F32 of its weights: worst log-prob difference %.3g\n",
              GetParam().c_str(), worst);
  EXPECT_LE(worst, kExactLogProbBound);
  llama_to_exact.Print(GetParam() + ": llama.cpp on the quantized file against llama.cpp on the F32 of its weights");
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizedOracleTest, ::testing::Values("q8_0", "q4_k_m"));

class DequantizeOracleTest : public ::testing::TestWithParam<std::string> {};

// The weights themselves: llama.cpp's quantizer turns the file back into F32 (its
// dequantization), and every tensor must equal kvtier's dequantization of the same blocks,
// bit for bit. Q4_K_M files hold Q4_K and Q6_K blocks, Q5_K_M files Q5_K and Q6_K; "auto"
// is the demo's BF16 as kvtier convert keeps it, "f16" kvtier's F16 (llama.cpp reads
// kvtier's 16-bit files as kvtier does).
TEST_P(DequantizeOracleTest, DequantizesAsLlamaCpp) {
  SKIP_WITHOUT_ORACLE();
  const std::string gguf = DemoGguf(GetParam());
  ASSERT_FALSE(gguf.empty());
  const std::string f32 = gguf + ".llama-f32.gguf";
  const absl::Status dequantized = LlamaQuantize(gguf, f32, /*LLAMA_FTYPE_ALL_F32=*/0);
  ASSERT_TRUE(dequantized.ok()) << dequantized;
  auto quantized = GgufFile::Open(gguf);
  auto reference = GgufFile::Open(f32);
  ASSERT_TRUE(quantized.ok() && reference.ok());
  std::map<std::string, int> types;
  for (const GgufTensorInfo& t : (*quantized)->tensors()) {
    const GgufTensorInfo* want = (*reference)->FindTensor(t.name);
    ASSERT_NE(want, nullptr) << t.name;
    ASSERT_EQ(want->type->dtype, DType::kF32) << t.name;
    ASSERT_EQ(want->dims, t.dims) << t.name;
    ASSERT_TRUE(t.type->dtype.has_value()) << t.name << " " << t.type->name;
    TensorView view{t.name, *t.type->dtype, t.Shape(), t.data};
    std::vector<float> got;
    ToFloat32(view, &got);
    const float* expected = reinterpret_cast<const float*>(want->data);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], expected[i]) << t.name << " (" << t.type->name << ") " << i;
    }
    ++types[std::string(t.type->name)];
  }
  for (const auto& [type, count] : types) std::printf("%s: %d tensors as llama.cpp dequantizes them\n", type.c_str(), count);
}

INSTANTIATE_TEST_SUITE_P(Types, DequantizeOracleTest,
                         ::testing::Values("auto", "f16", "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k"));

// kvtier's Q4_K quantizer (convert --type q4_k, weight_dtype q4_k) writes the bytes
// llama.cpp's does: every Q4_K tensor of llama.cpp's Q4_K_M file of the demo model equals
// QuantizeQ4_K of the same tensor of the F32 file it was made from.
TEST(QuantizeOracleTest, Q4KBlocksAsLlamaCpp) {
  SKIP_WITHOUT_ORACLE();
  const std::string f32_path = DemoGguf("f32"), q4_path = DemoGguf("q4_k_m");
  ASSERT_FALSE(f32_path.empty() || q4_path.empty());
  auto f32 = GgufFile::Open(f32_path);
  auto q4 = GgufFile::Open(q4_path);
  ASSERT_TRUE(f32.ok() && q4.ok());
  int compared = 0;
  for (const GgufTensorInfo& t : (*q4)->tensors()) {
    if (t.type->dtype != DType::kQ4_K) continue;
    const GgufTensorInfo* source = (*f32)->FindTensor(t.name);
    ASSERT_NE(source, nullptr) << t.name;
    ASSERT_EQ(source->type->dtype, DType::kF32) << t.name;
    const int64_t n = source->num_elements();
    std::vector<uint8_t> ours(static_cast<size_t>(DTypeBytes(DType::kQ4_K, n)));
    QuantizeQ4_K(reinterpret_cast<const float*>(source->data), n, ours.data());
    ASSERT_EQ(0, std::memcmp(ours.data(), t.data, ours.size())) << t.name;
    ++compared;
  }
  std::printf("%d Q4_K tensors quantized as llama.cpp quantizes them\n", compared);
  EXPECT_GE(compared, 6);
}

class RoundTripTest : public ::testing::TestWithParam<std::string> {};

// Needs no oracle: kvtier on the safetensors checkpoint and on its GGUF.
TEST_P(RoundTripTest, F32GgufGivesTheSameLogitsAsItsSafetensors) {
  const bool demo = GetParam() == "demo";
  const std::string dir = demo ? std::string(KVTIER_SOURCE_DIR) + "/models/demo" : RandomCheckpoint(GetParam());
  const std::string gguf = demo ? DemoGguf("auto") : RandomGguf(GetParam(), "f32");
  ASSERT_FALSE(gguf.empty());
  auto source = KvtierRunner::Open(dir);
  auto converted = KvtierRunner::Open(gguf);
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_TRUE(converted.ok()) << converted.status();
  for (const std::vector<int32_t>& prompt : Prompts(gguf)) {
    std::vector<int32_t> a, b;
    std::vector<std::vector<float>> la, lb;
    ASSERT_TRUE((*source)->Generate(prompt, kNewTokens, &a, &la).ok());
    ASSERT_TRUE((*converted)->Generate(prompt, kNewTokens, &b, &lb).ok());
    EXPECT_EQ(a, b);
    EXPECT_EQ(la, lb);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, RoundTripTest,
                         ::testing::Values("tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "demo"),
                         TestName);

class NarrowRoundTripTest : public ::testing::TestWithParam<std::string> {};

// The demo's BF16 weights narrowed to F16 (a few small values lose bits) or quantized to
// Q8_0 by kvtier convert: within the quantized bounds of the BF16 original (what quantizing
// costs: kMinQuantizationTop1 raw).
TEST_P(NarrowRoundTripTest, GgufStaysCloseToItsSafetensors) {
  const std::string gguf = DemoGguf(GetParam());
  ASSERT_FALSE(gguf.empty());
  auto source = KvtierRunner::Open(std::string(KVTIER_SOURCE_DIR) + "/models/demo");
  auto converted = KvtierRunner::Open(gguf);
  ASSERT_TRUE(source.ok() && converted.ok());
  Agreement agreement;
  for (const std::vector<int32_t>& sequence : HeldOut(gguf)) {
    auto a = (*source)->Score(sequence);
    auto b = (*converted)->Score(sequence);
    ASSERT_TRUE(a.ok() && b.ok());
    for (size_t i = 0; i < a->size(); ++i) {
      std::vector<float> p((*a)[i].size());
      for (size_t t = 0; t < p.size(); ++t) p[t] = std::exp((*a)[i][t]);
      agreement.Add(p, (*b)[i]);
    }
  }
  agreement.Check(GetParam() + " against its bf16 safetensors", kMinQuantizationTop1);
}

INSTANTIATE_TEST_SUITE_P(Types, NarrowRoundTripTest, ::testing::Values("f16", "q8_0"));

}  // namespace
}  // namespace kvtier::testing
