// kvtier_fp8_quality: what fp8 (E4M3) costs in quality, measured rather than assumed. Runs a
// text through one reference backend (weights and KV in the checkpoint's 16-bit type on CUDA,
// fp32 on the CPU) and through the same backend with fp8 weights, fp8 KV, and both, and
// reports per format, over every scored position (each position's next-token distribution):
//   kl_mean / kl_p99 / kl_max  KL(P_reference || P_format) in nats,
//   top1_agreement             share of positions whose argmax equals the reference's,
//   mean_nll / perplexity      of the text's actual next tokens (the reference's too).
// The text is cut into consecutive windows of --window tokens, each prefilled from
// position 0 as one chunk with every position's logits; a window's last token predicts
// nothing in the text and is not scored.
//
//   kvtier_fp8_quality --model DIR --text FILE [--backend cuda|cpu] [--window N]
//                      [--max-positions N] [--json OUT]
// Exit status 1 on any failure (named on stderr). Not a test: the numbers are reported.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace kvtier {
namespace {

struct Flags {
  std::string model, text, json, backend = "cuda";
  int64_t window = 0;  // 0: the model's context - 1, at most 1024
  int64_t max_positions = 0;  // 0: all
};

struct Format {
  std::string name;
  StorageDType weight_dtype, kv_dtype;
};

struct Tally {
  std::vector<double> kl;
  int64_t agree = 0;
  double nll = 0;
};

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const Checkpoint& checkpoint, const Flags& f, const Format& fmt,
                                                     int64_t window) {
  BackendOptions options;
  options.weight_dtype = fmt.weight_dtype;
  options.kv_dtype = fmt.kv_dtype;
  // Logits rows per forward are capped by max_sequences (CUDA): one per window position
  // keeps a window one forward.
  options.max_sequences = window;
  options.max_tokens_per_step = std::max<int64_t>(window, 16);
  std::unique_ptr<Backend> backend;
  if (f.backend == "cpu") {
    auto cpu = CpuBackend::Create(checkpoint, options);
    if (!cpu.ok()) return cpu.status();
    backend = std::move(*cpu);
  } else {
    auto gpu = CudaBackend::Create(checkpoint, options);
    if (!gpu.ok()) return gpu.status();
    backend = std::move(*gpu);
  }
  const int64_t blocks = (window + options.block_tokens - 1) / options.block_tokens;
  if (absl::Status s = backend->AllocateKvPool(blocks); !s.ok()) return s;
  if (absl::Status s = backend->WarmUp(); !s.ok()) return s;
  return backend;
}

// Log-softmax of one logits row, in double.
void LogSoftmax(const float* logits, int64_t vocab, std::vector<double>* out) {
  out->resize(static_cast<size_t>(vocab));
  double max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) max = std::max(max, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_z = max + std::log(sum);
  for (int64_t i = 0; i < vocab; ++i) (*out)[i] = static_cast<double>(logits[i]) - log_z;
}

int64_t Argmax(const std::vector<double>& v) {
  return static_cast<int64_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

absl::Status RunWindow(Backend* backend, const std::vector<int32_t>& tokens, std::vector<float>* logits) {
  const int64_t bt = backend->kv_layout().block_tokens;
  std::vector<int32_t> table(static_cast<size_t>((static_cast<int64_t>(tokens.size()) + bt - 1) / bt));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  ForwardBatch batch;
  SequenceChunk chunk;
  chunk.tokens = tokens;
  chunk.start_position = 0;
  chunk.block_table = table;
  chunk.all_logits = true;
  batch.chunks.push_back(chunk);
  return backend->Forward(batch, logits);
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "kvtier_fp8_quality: %s\n", what.c_str());
  return 1;
}

int Main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") f.model = value();
    else if (a == "--text") f.text = value();
    else if (a == "--json") f.json = value();
    else if (a == "--backend") f.backend = value();
    else if (a == "--window") f.window = std::atoll(value().c_str());
    else if (a == "--max-positions") f.max_positions = std::atoll(value().c_str());
    else return Fail("unknown argument " + a);
  }
  if (f.model.empty() || f.text.empty()) return Fail("usage: --model DIR --text FILE [--backend cuda|cpu] [--window N] [--max-positions N] [--json OUT]");
  if (f.backend != "cuda" && f.backend != "cpu") return Fail("--backend must be cuda or cpu");
  auto checkpoint = Checkpoint::Open(f.model);
  if (!checkpoint.ok()) return Fail(std::string(checkpoint.status().message()));
  auto tok = tokenizer::Tokenizer::FromDirectory(f.model);
  if (!tok.ok()) return Fail(std::string(tok.status().message()));
  std::ifstream in(f.text, std::ios::binary);
  if (!in) return Fail("cannot read " + f.text);
  std::stringstream text;
  text << in.rdbuf();
  auto ids = (*tok)->Encode(text.str(), tokenizer::EncodeOptions{});
  if (!ids.ok()) return Fail(std::string(ids.status().message()));
  const int64_t context = (*checkpoint)->config().max_position_embeddings;
  const int64_t window = f.window > 0 ? f.window : std::min<int64_t>(context - 1, 1024);
  if (window < 2 || window > context) return Fail("--window must be in [2, the model's context]");

  const std::vector<Format> formats = {{"reference", StorageDType::kAuto, StorageDType::kAuto},
                                       {"fp8_weights", StorageDType::kFp8, StorageDType::kAuto},
                                       {"fp8_kv", StorageDType::kAuto, StorageDType::kFp8},
                                       {"fp8_weights_fp8_kv", StorageDType::kFp8, StorageDType::kFp8}};
  std::vector<std::unique_ptr<Backend>> backends;
  for (const Format& fmt : formats) {
    auto b = MakeBackend(**checkpoint, f, fmt, window);
    if (!b.ok()) return Fail(fmt.name + ": " + std::string(b.status().message()));
    backends.push_back(std::move(*b));
  }
  const int64_t vocab = backends[0]->vocab_size();
  std::vector<Tally> tallies(formats.size());
  std::vector<float> logits;
  std::vector<std::vector<double>> reference;
  std::vector<double> row;
  int64_t positions = 0, windows = 0;
  for (size_t start = 0; start + 1 < ids->size(); start += static_cast<size_t>(window)) {
    if (f.max_positions > 0 && positions >= f.max_positions) break;
    const size_t len = std::min(ids->size() - start, static_cast<size_t>(window));
    const std::vector<int32_t> tokens(ids->begin() + static_cast<std::ptrdiff_t>(start),
                                      ids->begin() + static_cast<std::ptrdiff_t>(start + len));
    const size_t scored = len - 1;
    ++windows;
    for (size_t k = 0; k < formats.size(); ++k) {
      if (absl::Status s = RunWindow(backends[k].get(), tokens, &logits); !s.ok()) {
        return Fail(formats[k].name + ": " + std::string(s.message()));
      }
      if (logits.size() != len * static_cast<size_t>(vocab)) return Fail(formats[k].name + ": wrong logits size");
      if (k == 0) reference.resize(scored);
      for (size_t p = 0; p < scored; ++p) {
        if (k == 0) {
          LogSoftmax(logits.data() + p * vocab, vocab, &reference[p]);
          tallies[0].nll -= reference[p][static_cast<size_t>(tokens[p + 1])];
          continue;
        }
        LogSoftmax(logits.data() + p * vocab, vocab, &row);
        const std::vector<double>& ref = reference[p];
        double kl = 0;
        for (int64_t i = 0; i < vocab; ++i) kl += std::exp(ref[i]) * (ref[i] - row[i]);
        tallies[k].kl.push_back(std::max(kl, 0.0));
        tallies[k].agree += Argmax(row) == Argmax(ref) ? 1 : 0;
        tallies[k].nll -= row[static_cast<size_t>(tokens[p + 1])];
      }
    }
    positions += static_cast<int64_t>(scored);
  }
  if (positions == 0) return Fail("the text has fewer than 2 tokens: nothing to score");

  nlohmann::json out;
  out["model"] = f.model;
  out["text"] = f.text;
  out["backend"] = f.backend;
  out["reference_kv_dtype"] = std::string(DTypeName(backends[0]->kv_layout().dtype));
  out["tokens"] = ids->size();
  out["window"] = window;
  out["windows"] = windows;
  out["positions"] = positions;
  std::printf("%-20s %10s %10s %10s %9s %10s\n", "format", "KL mean", "KL p99", "KL max", "top-1", "perplexity");
  for (size_t k = 0; k < formats.size(); ++k) {
    Tally& t = tallies[k];
    const double mean_nll = t.nll / static_cast<double>(positions);
    nlohmann::json entry = {{"weight_dtype", std::string(StorageDTypeName(formats[k].weight_dtype))},
                            {"kv_dtype", std::string(StorageDTypeName(formats[k].kv_dtype))},
                            {"kv_layout_dtype", std::string(DTypeName(backends[k]->kv_layout().dtype))},
                            {"mean_nll", mean_nll},
                            {"perplexity", std::exp(mean_nll)}};
    if (k == 0) {
      std::printf("%-20s %10s %10s %10s %9s %10.4f\n", formats[k].name.c_str(), "-", "-", "-", "-", std::exp(mean_nll));
    } else {
      std::sort(t.kl.begin(), t.kl.end());
      double sum = 0;
      for (double v : t.kl) sum += v;
      const double mean = sum / static_cast<double>(t.kl.size());
      const double p99 = t.kl[std::min(t.kl.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(t.kl.size())))];
      const double agreement = static_cast<double>(t.agree) / static_cast<double>(positions);
      entry["kl_mean"] = mean;
      entry["kl_p99"] = p99;
      entry["kl_max"] = t.kl.back();
      entry["top1_agreement"] = agreement;
      std::printf("%-20s %10.3g %10.3g %10.3g %9.4f %10.4f\n", formats[k].name.c_str(), mean, p99, t.kl.back(),
                  agreement, std::exp(mean_nll));
    }
    entry["allocations_after_init"] = backends[k]->allocations_after_init();
    out["formats"][formats[k].name] = entry;
  }
  std::printf("%lld positions in %lld window(s) of up to %lld tokens, %s backend\n", static_cast<long long>(positions),
              static_cast<long long>(windows), static_cast<long long>(window), f.backend.c_str());
  if (!f.json.empty()) {
    std::ofstream o(f.json);
    o << out.dump(2) << "\n";
    if (!o) return Fail("cannot write " + f.json);
  }
  return 0;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) { return kvtier::Main(argc, argv); }
