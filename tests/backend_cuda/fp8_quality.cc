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
//                      [--max-positions N] [--json OUT] [--cuda-prefill-cudnn 0|1|2]
//                      [--cuda-prefill-fp8-attention 0|1]
// The last two set CudaOptions::prefill_cudnn and prefill_fp8_attention (2 sends every
// window's prefill to cuDNN, so that fp8 KV's windows run its fp8 attention).
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
#include "testing/format_quality.h"
#include "tokenizer/tokenizer.h"

namespace kvtier {
namespace {

struct Flags {
  std::string model, text, json, backend = "cuda";
  int64_t window = 0;  // 0: the model's context - 1, at most 1024
  int64_t max_positions = 0;  // 0: all
  int prefill_cudnn = -1;          // -1: the default
  int prefill_fp8_attention = -1;  // -1: the default
};

struct Format {
  std::string name;
  StorageDType weight_dtype, kv_dtype;
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
  if (f.prefill_cudnn >= 0) options.cuda.prefill_cudnn = static_cast<CudnnPrefillUse>(f.prefill_cudnn);
  if (f.prefill_fp8_attention >= 0) options.cuda.prefill_fp8_attention = f.prefill_fp8_attention != 0;
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
    else if (a == "--cuda-prefill-cudnn") f.prefill_cudnn = std::clamp(std::atoi(value().c_str()), 0, 2);
    else if (a == "--cuda-prefill-fp8-attention") f.prefill_fp8_attention = std::atoi(value().c_str()) != 0 ? 1 : 0;
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
  std::vector<Backend*> raw;
  for (const auto& b : backends) raw.push_back(b.get());
  auto run = testing::ScoreFormats(raw, *ids, window, f.max_positions);
  if (!run.ok()) return Fail(std::string(run.status().message()));
  for (size_t i = 0; i < formats.size(); ++i) {
    std::printf("%s: %s\n", formats[i].name.c_str(), backends[i]->compute_path().c_str());
  }
  const int64_t positions = run->positions, windows = run->windows;
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
    const testing::FormatScore& t = run->scores[k];
    const double perplexity = t.Perplexity(positions);
    nlohmann::json entry = {{"weight_dtype", std::string(StorageDTypeName(formats[k].weight_dtype))},
                            {"kv_dtype", std::string(StorageDTypeName(formats[k].kv_dtype))},
                            {"kv_layout_dtype", std::string(DTypeName(backends[k]->kv_layout().dtype))},
                            {"mean_nll", t.nll / static_cast<double>(positions)},
                            {"perplexity", perplexity}};
    if (k == 0) {
      std::printf("%-20s %10s %10s %10s %9s %10.4f\n", formats[k].name.c_str(), "-", "-", "-", "-", perplexity);
    } else {
      entry["kl_mean"] = t.KlMean();
      entry["kl_p99"] = t.KlQuantile(0.99);
      entry["kl_max"] = t.KlQuantile(1.0);
      entry["top1_agreement"] = t.Top1(positions);
      std::printf("%-20s %10.3g %10.3g %10.3g %9.4f %10.4f\n", formats[k].name.c_str(), t.KlMean(), t.KlQuantile(0.99),
                  t.KlQuantile(1.0), t.Top1(positions), perplexity);
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
