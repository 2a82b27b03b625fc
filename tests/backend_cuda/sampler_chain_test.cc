// The sampler chain on the GPU against its host reference (backend/sampler_chain.h) and
// against transformers: the adjustment kernel bit for bit, the log-probability kernel, min-p
// in SampleRows, DeviceSamplerChain over several rows with shared rows and groups, the
// backend's ForwardAndSample (eager and graph-replayed decode steps) against SampleOnHost
// of its own logits, and the goldens' processor outputs and log-softmax
// (tests/parity/goldens.json, scripts/make_goldens.py). Skips without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_sampler_chain.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sampler_chain_kernels.h"
#include "backend/sampler_chain.h"
#include "cuda_test_util.h"
#include "engine/token_history.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sampling_check.h"
#include "testing/test_model.h"

namespace kvtier {
namespace {

using cuda_test::DeviceArray;
using cuda_test::kDefaultLaunch;

std::vector<float> RandomRows(std::mt19937& rng, int rows, int vocab, float scale, bool ties) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(static_cast<size_t>(rows) * vocab);
  for (float& v : out) v = ties ? std::round(normal(rng)) : normal(rng);
  return out;
}

// Random adjustments: each row a random set of distinct tokens with bias, repetition and
// subtrahend as the engine makes them.
std::vector<TokenAdjustment> RandomAdjustments(std::mt19937& rng, int vocab, int count) {
  std::vector<int32_t> tokens(static_cast<size_t>(vocab));
  std::iota(tokens.begin(), tokens.end(), 0);
  std::shuffle(tokens.begin(), tokens.end(), rng);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<TokenAdjustment> out;
  for (int i = 0; i < count && i < vocab; ++i) {
    TokenAdjustment a;
    a.token = tokens[static_cast<size_t>(i)];
    a.bias = i % 3 == 0 ? 4.0f * unit(rng) - 2.0f : 0.0f;
    a.repetition = i % 2 == 0 ? 0.5f + unit(rng) : 1.0f;
    a.subtract = i % 4 == 0 ? PenaltySubtrahend(1 + i % 5, 0.3f, 0.7f) : 0.0f;
    out.push_back(a);
  }
  return out;
}

using DeviceMemory = std::vector<std::unique_ptr<DeviceArray<uint8_t>>>;

DeviceSamplerChain::Allocator TestAllocator(DeviceMemory* keep) {
  return [keep](size_t bytes, const char*) -> absl::StatusOr<void*> {
    keep->push_back(std::make_unique<DeviceArray<uint8_t>>(bytes));
    return static_cast<void*>(keep->back()->get());
  };
}

TEST(SamplerChainKernelsTest, AdjustLogitsIsBitForBitTheHostReference) {
  KVT_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(11);
  const int rows = 5, vocab = 3001;
  std::vector<float> logits = RandomRows(rng, rows, vocab, 3.0f, false);
  std::vector<TokenAdjustment> adjustments;
  std::vector<cuda::AdjustRange> ranges;
  for (int r = 0; r < rows; ++r) {
    const std::vector<TokenAdjustment> row = RandomAdjustments(rng, vocab, r == 2 ? 0 : 100 * (r + 1));
    ranges.push_back({static_cast<int32_t>(adjustments.size()), static_cast<int32_t>(row.size())});
    adjustments.insert(adjustments.end(), row.begin(), row.end());
  }
  std::vector<float> want = logits;
  for (int r = 0; r < rows; ++r) {
    ApplyAdjustments(std::span<float>(want).subspan(static_cast<size_t>(r) * vocab, vocab),
                     std::span<const TokenAdjustment>(adjustments).subspan(static_cast<size_t>(ranges[r].begin),
                                                                           static_cast<size_t>(ranges[r].count)));
  }
  DeviceArray<float> d_logits(logits.size());
  d_logits.Upload(logits);
  DeviceArray<cuda::AdjustRange> d_ranges(ranges.size());
  d_ranges.Upload(ranges);
  std::vector<cuda::DeviceAdjustment> dev(adjustments.size());
  std::memcpy(dev.data(), adjustments.data(), adjustments.size() * sizeof(TokenAdjustment));
  DeviceArray<cuda::DeviceAdjustment> d_adj(dev.size());
  d_adj.Upload(dev);
  DeviceArray<float> d_raw(adjustments.size());
  CUDA_ASSERT(cuda::AdjustLogits(d_logits.get(), rows, vocab, d_ranges.get(), d_adj.get(), d_raw.get(), nullptr));
  const std::vector<float> got = d_logits.Download();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
  const std::vector<float> raw = d_raw.Download();
  for (int r = 0; r < rows; ++r) {
    for (int j = ranges[r].begin; j < ranges[r].begin + ranges[r].count; ++j) {
      ASSERT_EQ(raw[static_cast<size_t>(j)],
                logits[static_cast<size_t>(r) * vocab + static_cast<size_t>(adjustments[static_cast<size_t>(j)].token)]);
    }
  }
}

TEST(SamplerChainKernelsTest, RowLogprobsMatchTheHostReference) {
  KVT_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(12);
  for (int vocab : {7, 1000, 128256}) {
    for (bool ties : {false, true}) {
      const std::vector<int32_t> tops = {0, 1, 5, 20, 20};
      const int rows = static_cast<int>(tops.size());
      const std::vector<float> logits = RandomRows(rng, rows, vocab, 4.0f, ties);
      std::vector<cuda::LogprobTask> tasks;
      int offset = 0;
      for (int r = 0; r < rows; ++r) {
        const int n = std::min(tops[static_cast<size_t>(r)], vocab);
        tasks.push_back({rows - 1 - r, n, offset, r});  // rows read in reverse
        offset += n;
      }
      DeviceArray<float> d_logits(logits.size());
      d_logits.Upload(logits);
      DeviceArray<cuda::LogprobTask> d_tasks(tasks.size());
      d_tasks.Upload(tasks);
      DeviceArray<float> d_lse(tasks.size());
      DeviceArray<int32_t> d_ids(std::max(offset, 1));
      DeviceArray<float> d_lp(std::max(offset, 1));
      CUDA_ASSERT(cuda::RowLogprobs(d_logits.get(), vocab, d_tasks.get(), rows, d_lse.get(), d_ids.get(), d_lp.get(),
                                    nullptr));
      const std::vector<float> lse = d_lse.Download();
      const std::vector<int32_t> ids = d_ids.Download();
      const std::vector<float> lp = d_lp.Download();
      for (const cuda::LogprobTask& t : tasks) {
        const std::span<const float> row(logits.data() + static_cast<size_t>(t.logits_row) * vocab, vocab);
        const double want_lse = LogSumExp(row);
        EXPECT_NEAR(lse[static_cast<size_t>(t.sample)], want_lse, 1e-5 * std::max(1.0, std::abs(want_lse)));
        std::vector<TokenLogprob> want;
        std::vector<int32_t> scratch;
        AppendTopLogprobs(row, want_lse, t.top_n, &want, &scratch);
        for (int i = 0; i < t.top_n; ++i) {
          EXPECT_EQ(ids[static_cast<size_t>(t.top_offset + i)], want[static_cast<size_t>(i)].token)
              << "vocab " << vocab << " ties " << ties << " rank " << i;
          EXPECT_NEAR(lp[static_cast<size_t>(t.top_offset + i)], want[static_cast<size_t>(i)].logprob, 1e-5);
        }
      }
    }
  }
}

TEST(SamplerChainKernelsTest, SampleRowsMinPMatchesTheHostReference) {
  KVT_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(13);
  const std::vector<RowSampling> params = {
      {1.0f, 0, 1.0f, 0.0, 0.05f}, {0.7f, 40, 1.0f, 0.0, 0.1f}, {1.2f, 0, 0.9f, 0.0, 0.02f},
      {0.5f, 2000, 0.95f, 0.0, 0.3f}, {1.0f, 1024, 1.0f, 0.0, 1.0f}, {2.0f, 0, 1.0f, 0.0, 0.5f}};
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int vocab : {37, 1000, 128256}) {
    std::vector<RowSampling> rows;
    for (const RowSampling& p : params) {
      for (double u : {0.0, 0.5, 0.999999, unit(rng)}) {
        RowSampling r = p;
        r.u = u;
        rows.push_back(r);
      }
    }
    const int n = static_cast<int>(rows.size());
    const std::vector<float> logits = RandomRows(rng, n, vocab, 3.0f, false);
    std::vector<cuda::SampleParams> dev(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      dev[r].temperature = rows[r].temperature;
      dev[r].top_k = rows[r].top_k;
      dev[r].top_p = rows[r].top_p;
      dev[r].min_p = rows[r].min_p;
      dev[r].u = rows[r].u;
    }
    DeviceArray<float> d_logits(logits.size());
    d_logits.Upload(logits);
    DeviceArray<cuda::SampleParams> d_params(dev.size());
    d_params.Upload(dev);
    DeviceArray<int32_t> d_ids(static_cast<size_t>(n));
    CUDA_ASSERT(cuda::SampleRows(d_logits.get(), n, vocab, d_params.get(), d_ids.get(), nullptr, kDefaultLaunch));
    const std::vector<int32_t> ids = d_ids.Download();
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(cuda_test::SampledLikeReference(
          std::span<const float>(logits).subspan(static_cast<size_t>(r) * vocab, vocab), rows[r], ids[r]))
          << "vocab " << vocab << " row " << r;
    }
  }
}

// The whole chain on the device against SampleOnHost: rows shared by many samples (they
// run in several groups: the buffers hold 3 rows + 128 samples), adjustments, logprobs.
TEST(SamplerChainKernelsTest, DeviceSamplerChainMatchesSampleOnHost) {
  KVT_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(14);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int rows = 3, vocab = 5000;
  std::vector<float> logits = RandomRows(rng, rows, vocab, 2.5f, false);
  SamplingBatch batch;
  for (int r = 0; r < rows; ++r) {
    const std::vector<TokenAdjustment> adj = RandomAdjustments(rng, vocab, r == 1 ? 0 : 300);
    batch.row_adjustments.push_back({static_cast<int32_t>(batch.adjustments.size()), static_cast<int32_t>(adj.size())});
    batch.adjustments.insert(batch.adjustments.end(), adj.begin(), adj.end());
    for (int s = 0; s < 100; ++s) {
      RowSampling sampling{0.9f, s % 3 == 0 ? 40 : 0, s % 2 == 0 ? 0.9f : 1.0f, unit(rng), s % 5 == 0 ? 0.05f : 0.0f};
      if (s == 7) sampling.temperature = 0.0f;  // greedy after adjustments
      batch.samples.push_back({r, sampling, s % 4 == 0 ? -1 : s % 21});
    }
  }
  ASSERT_TRUE(ValidateSamplingBatch(batch, rows, vocab).ok());
  std::vector<float> host_logits = logits;
  SamplingResult want;
  SampleOnHost(host_logits, vocab, batch, &want);

  DeviceMemory memory;
  auto chain = DeviceSamplerChain::Create(rows, vocab, TestAllocator(&memory));
  ASSERT_TRUE(chain.ok()) << chain.status();
  DeviceArray<float> d_logits(logits.size());
  d_logits.Upload(logits);
  std::vector<int32_t> order(batch.samples.size());
  std::iota(order.begin(), order.end(), 0);
  SamplingResult got;
  got.tokens.assign(batch.samples.size(), -1);
  got.sample_logprobs.assign(batch.samples.size(), LogprobEntry{});
  ASSERT_TRUE((*chain)->Run(d_logits.get(), 0, rows, batch, order, &got, nullptr, kDefaultLaunch).ok());
  // The adjusted rows are the host's, bit for bit; tokens agree up to rounding; logprobs
  // within float rounding; alternatives the same tokens.
  EXPECT_EQ(d_logits.Download(), host_logits);
  int exact = 0;
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const SampleSpec& s = batch.samples[i];
    const std::span<const float> row(host_logits.data() + static_cast<size_t>(s.logits_row) * vocab, vocab);
    EXPECT_TRUE(cuda_test::SampledLikeReference(row, s.sampling, got.tokens[i])) << "sample " << i;
    exact += got.tokens[i] == want.tokens[i] ? 1 : 0;
    if (s.top_logprobs < 0) {
      EXPECT_TRUE(std::isnan(got.sample_logprobs[i].logprob));
      continue;
    }
    const LogprobEntry& g = got.sample_logprobs[i];
    const LogprobEntry& w = want.sample_logprobs[i];
    EXPECT_EQ(g.token, got.tokens[i]);
    if (got.tokens[i] == want.tokens[i]) {
      EXPECT_NEAR(g.logprob, w.logprob, 1e-5) << "sample " << i;
    }
    ASSERT_EQ(g.top_count, w.top_count);
    for (int k = 0; k < g.top_count; ++k) {
      EXPECT_EQ(got.top[static_cast<size_t>(g.top_begin + k)].token, want.top[static_cast<size_t>(w.top_begin + k)].token);
      EXPECT_NEAR(got.top[static_cast<size_t>(g.top_begin + k)].logprob, want.top[static_cast<size_t>(w.top_begin + k)].logprob,
                  1e-5);
    }
  }
  std::printf("[chain] %d of %zu samples pick exactly the host token\n", exact, batch.samples.size());
  EXPECT_GT(exact, static_cast<int>(batch.samples.size()) * 9 / 10);
}

// ForwardAndSample on the backend: each sample = SampleOnHost over the backend's own
// logits of the batch (up to rounding), for a prefill + decode batch and for a pure decode
// batch replayed as a graph, with samples sharing a row; logprobs of the raw rows.
TEST(SamplerChainKernelsTest, BackendForwardAndSampleMatchesHostChainOfItsLogits) {
  KVT_SKIP_WITHOUT_CUDA();
  // head_dim 64: the fast attention kernels, so decode steps replay graphs.
  RandomCheckpointSpec spec;
  spec.hidden = 128;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.head_dim = 64;
  spec.intermediate = 256;
  spec.vocab = 1000;
  spec.seed = 31;
  auto checkpoint = testing::OpenCheckpoint(testing::WriteTestModel("chain-fast-attention-31", spec));
  BackendOptions options;
  options.max_tokens_per_step = 64;
  options.max_sequences = 8;
  auto gpu = CudaBackend::Create(*checkpoint, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE((*gpu)->AllocateKvPool(64).ok());
  ASSERT_TRUE((*gpu)->WarmUp().ok());
  ASSERT_TRUE((*gpu)->fast_attention());
  const int64_t vocab = (*gpu)->vocab_size();
  std::mt19937 rng(15);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<int32_t> tokens = {3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  std::vector<std::vector<int32_t>> tables = {{1, 2}, {3, 4}, {5, 6}, {7, 8}};
  ForwardBatch prefill;
  for (const auto& table : tables) prefill.chunks.push_back({tokens, 0, table, false});
  std::vector<float> unused;
  ASSERT_TRUE((*gpu)->Forward(prefill, &unused).ok());
  for (bool decode_only : {false, true}) {
    SCOPED_TRACE(decode_only ? "decode (graph)" : "prefill + decode");
    ForwardBatch batch;
    for (size_t i = 0; i < tables.size(); ++i) {
      if (!decode_only && i == 0) {
        batch.chunks.push_back({tokens, 0, tables[i], true});
      } else {
        batch.chunks.push_back({std::span<const int32_t>(tokens).subspan(i, 1), 11, tables[i], true});
      }
    }
    SamplingBatch sampling;
    for (int r = 0; r < 4; ++r) {
      const std::vector<TokenAdjustment> adj = RandomAdjustments(rng, static_cast<int>(vocab), r == 3 ? 0 : 30);
      sampling.row_adjustments.push_back({static_cast<int32_t>(sampling.adjustments.size()), static_cast<int32_t>(adj.size())});
      sampling.adjustments.insert(sampling.adjustments.end(), adj.begin(), adj.end());
      sampling.samples.push_back({r, RowSampling{0.8f, 20, 0.95f, unit(rng), 0.05f}, 5});
    }
    sampling.samples.push_back({1, RowSampling{1.0f, 0, 1.0f, unit(rng), 0.0f}, 3});  // a second completion of row 1
    sampling.samples.push_back({2, RowSampling{}, 0});                                   // greedy
    std::vector<float> logits;
    ASSERT_TRUE((*gpu)->Forward(batch, &logits).ok());
    std::vector<float> adjusted = logits;
    SamplingResult want;
    SampleOnHost(adjusted, vocab, sampling, &want);
    const int64_t replays = (*gpu)->decode_graphs().replays();
    SamplingResult got;
    ASSERT_TRUE((*gpu)->ForwardAndSample(batch, sampling, &got).ok());
    if (decode_only) {
      EXPECT_GT((*gpu)->decode_graphs().replays(), replays);
    }
    for (size_t i = 0; i < sampling.samples.size(); ++i) {
      const SampleSpec& s = sampling.samples[i];
      EXPECT_TRUE(cuda_test::SampledLikeReference(
          std::span<const float>(adjusted).subspan(static_cast<size_t>(s.logits_row) * vocab, vocab), s.sampling,
          got.tokens[i]))
          << "sample " << i;
      if (got.tokens[i] == want.tokens[i]) {
        EXPECT_NEAR(got.sample_logprobs[i].logprob, want.sample_logprobs[i].logprob, 1e-5);
      }
      EXPECT_EQ(got.sample_logprobs[i].top_count, want.sample_logprobs[i].top_count);
    }
    SamplingBatch bad = sampling;
    bad.samples[0].logits_row = 4;
    EXPECT_EQ((*gpu)->ForwardAndSample(batch, bad, &got).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ((*gpu)->allocations_after_init(), 0);
}

// transformers on the parity checkpoints' logits (goldens): log-softmax, and each
// processor case's output (its chain as SamplingParams says) through the device kernels.
TEST(SamplerChainKernelsTest, MatchesTransformersGoldens) {
  KVT_SKIP_WITHOUT_CUDA();
  std::ifstream in(std::string(KVTIER_SOURCE_DIR) + "/tests/parity/goldens.json");
  ASSERT_TRUE(in) << "tests/parity/goldens.json is missing";
  const nlohmann::json goldens = nlohmann::json::parse(in);
  int cases = 0;
  for (const auto& [name, model] : goldens["models"].items()) {
    for (const nlohmann::json& c : model["cases"]) {
      ASSERT_TRUE(c.contains("sampling")) << name << ": goldens without sampling cases (run scripts/make_goldens.py)";
      const auto prompt = c["prompt"].get<std::vector<int32_t>>();
      std::vector<float> logits;
      for (double v : c["last_logits"]) logits.push_back(static_cast<float>(v));
      const int vocab = static_cast<int>(logits.size());
      // Log-softmax of the raw row.
      DeviceArray<float> d_logits(logits.size());
      d_logits.Upload(logits);
      const std::vector<cuda::LogprobTask> task = {{0, 20, 0, 0}};
      DeviceArray<cuda::LogprobTask> d_task(1);
      d_task.Upload(task);
      DeviceArray<float> d_lse(1), d_lp(20);
      DeviceArray<int32_t> d_ids(20);
      CUDA_ASSERT(cuda::RowLogprobs(d_logits.get(), vocab, d_task.get(), 1, d_lse.get(), d_ids.get(), d_lp.get(), nullptr));
      const std::vector<double> log_softmax = c["sampling"]["log_softmax"].get<std::vector<double>>();
      const std::vector<int32_t> ids = d_ids.Download();
      const std::vector<float> lp = d_lp.Download();
      for (int i = 0; i < 20; ++i) EXPECT_NEAR(lp[i], log_softmax[static_cast<size_t>(ids[i])], 1e-5) << name;
      // Processors: adjusted logits, then the warpers' kept set and draws.
      for (const nlohmann::json& p : c["sampling"]["processors"]) {
        SCOPED_TRACE(name + " / " + p["name"].get<std::string>());
        SamplingParams params;
        params.repetition_penalty = p.value("repetition_penalty", 1.0f);
        const nlohmann::json bias_map = p.value("logit_bias", nlohmann::json::object());  // (a named value: items() does not own it)
        for (const auto& [token, bias] : bias_map.items()) {
          params.logit_bias.emplace_back(std::stoi(token), bias.get<float>());
        }
        TokenHistory history(params, prompt);
        SamplingBatch batch;
        history.AppendAdjustments(&batch.adjustments);
        batch.row_adjustments = {{0, static_cast<int32_t>(batch.adjustments.size())}};
        RowSampling s{p.value("temperature", 1.0f), p.value("top_k", 0), p.value("top_p", 1.0f), 0.0,
                      p.value("min_p", 0.0f)};
        const std::vector<double> probs = p["probs"].get<std::vector<double>>();  // softmax of transformers' scores
        std::vector<int32_t> order(static_cast<size_t>(vocab));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
        for (double u : {0.05, 0.3, 0.6, 0.95}) {
          s.u = u;
          batch.samples.push_back({0, s, 0});
        }
        DeviceMemory memory;
        auto chain = DeviceSamplerChain::Create(1, vocab, TestAllocator(&memory));
        ASSERT_TRUE(chain.ok());
        d_logits.Upload(logits);
        SamplingResult got;
        got.tokens.assign(batch.samples.size(), -1);
        got.sample_logprobs.assign(batch.samples.size(), LogprobEntry{});
        std::vector<int32_t> all = {0, 1, 2, 3};
        ASSERT_TRUE((*chain)->Run(d_logits.get(), 0, 1, batch, all, &got, nullptr, kDefaultLaunch).ok());
        if (p.contains("scores")) {  // processors before the warpers: the logits themselves
          const std::vector<float> adjusted = d_logits.Download();
          for (int i = 0; i < vocab; ++i) {
            EXPECT_NEAR(adjusted[static_cast<size_t>(i)], p["scores"][static_cast<size_t>(i)].get<double>(), 1e-6) << i;
          }
        }
        for (size_t d = 0; d < batch.samples.size(); ++d) {
          const int32_t token = got.tokens[d];
          EXPECT_GT(probs[static_cast<size_t>(token)], 0.0) << "token " << token << " is outside transformers' kept set";
          double before = 0;  // transformers' mass before the token, in the sampler's order
          for (int32_t t : order) {
            if (t == token) break;
            before += probs[static_cast<size_t>(t)];
          }
          const double u = batch.samples[d].sampling.u;
          EXPECT_LE(before, u + 1e-5);
          EXPECT_GT(before + probs[static_cast<size_t>(token)], u - 1e-5);
        }
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 0);
}

}  // namespace
}  // namespace kvtier
