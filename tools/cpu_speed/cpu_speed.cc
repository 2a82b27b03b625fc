// cpu_speed: prefill and decode speed of the CPU backend on one checkpoint, the figures
// W7 compares with llama.cpp (tests/gguf/oracle/llama_speed.mjs measures llama.cpp's the
// same way). Prints one JSON line.
//
// usage: cpu_speed MODEL [--kernels fast|exact|reference] [--prefill N] [--prefill-threads T]
//                        [--decode N] [--decode-threads T] [--rounds R]
// Prefill: one sequence of N tokens in one forward (the last position's logits), timed
// from the forward's start to its end. Decode: N steps of one token each after a 16-token
// prompt. Each is the median over R rounds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <ctime>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/dot16.h"
#include "backend/cpu/quant_dot.h"
#include "model/checkpoint.h"

namespace kvtier {
namespace {

constexpr int64_t kBlockTokens = 16;

struct Args {
  std::string model;
  CpuKernels kernels = CpuKernels::kFast;
  int prefill = 512, prefill_threads = 2, decode = 128, decode_threads = 1, rounds = 3;
};

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

const char* KernelsName(CpuKernels kernels) {
  switch (kernels) {
    case CpuKernels::kFast:
      return "fast";
    case CpuKernels::kExact:
      return "exact";
    case CpuKernels::kReference:
      return "reference";
  }
  return "";
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::unique_ptr<CpuBackend> Create(const Checkpoint& checkpoint, const Args& args, int threads, int64_t tokens) {
  BackendOptions options;
  options.num_threads = threads;
  options.block_tokens = kBlockTokens;
  options.cpu_kernels = args.kernels;
  options.max_tokens_per_step = tokens;
  auto backend = CpuBackend::Create(checkpoint, options);
  if (!backend.ok()) {
    std::fprintf(stderr, "cpu_speed: %s\n", std::string(backend.status().message()).c_str());
    std::exit(1);
  }
  if (!(*backend)->AllocateKvPool(tokens / kBlockTokens + 2).ok()) std::exit(1);
  return std::move(*backend);
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::vector<int32_t> Tokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((i * 7919 + 13) % vocab);
  return tokens;
}

// Seconds of one forward of `tokens` at start_position.
double Step(CpuBackend* backend, const std::vector<int32_t>& table, const std::vector<int32_t>& tokens,
            int64_t start) {
  ForwardBatch batch;
  batch.chunks.push_back({.tokens = tokens, .start_position = start, .block_table = table, .need_logits = true});
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  if (!backend->Forward(batch, &logits).ok()) std::exit(1);
  return Seconds(t0);
}

int Main(int argc, char** argv) {
  Args args;
  if (argc < 2) {
    std::fprintf(stderr, "usage: cpu_speed MODEL [--kernels fast|exact|reference] [--prefill N] [--prefill-threads T] "
                         "[--decode N] [--decode-threads T] [--rounds R]\n");
    return 2;
  }
  args.model = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--kernels") {
      args.kernels = value == "reference" ? CpuKernels::kReference
                     : value == "exact"   ? CpuKernels::kExact
                                          : CpuKernels::kFast;
    } else if (flag == "--prefill") {
      args.prefill = std::stoi(value);
    } else if (flag == "--prefill-threads") {
      args.prefill_threads = std::stoi(value);
    } else if (flag == "--decode") {
      args.decode = std::stoi(value);
    } else if (flag == "--decode-threads") {
      args.decode_threads = std::stoi(value);
    } else if (flag == "--rounds") {
      args.rounds = std::stoi(value);
    } else {
      std::fprintf(stderr, "cpu_speed: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  auto checkpoint = Checkpoint::Open(args.model);
  if (!checkpoint.ok()) {
    std::fprintf(stderr, "cpu_speed: %s\n", std::string(checkpoint.status().message()).c_str());
    return 1;
  }
  const int64_t vocab = (*checkpoint)->config().vocab_size;
  const int64_t capacity = std::max(args.prefill, 16 + args.decode) + kBlockTokens;
  std::vector<int32_t> table(capacity / kBlockTokens + 2);
  std::iota(table.begin(), table.end(), 0);

  std::vector<double> prefill_tps, decode_tps;
  std::string prefill_path;  // the prefill backend's compute_path after its steps
  // CPU seconds of the process per prefill (every thread's, the pool's spinning included):
  // the work done, which a machine shared with other jobs disturbs less than the wall clock.
  double prefill_cpu_s = 0;
  if (args.prefill > 0) {
    std::unique_ptr<CpuBackend> backend = Create(**checkpoint, args, args.prefill_threads, capacity);
    const std::vector<int32_t> prompt = Tokens(args.prefill, vocab);
    Step(backend.get(), table, prompt, 0);  // warm-up: pages and caches
    const double cpu_start = ProcessCpuSeconds();
    for (int r = 0; r < args.rounds; ++r) prefill_tps.push_back(args.prefill / Step(backend.get(), table, prompt, 0));
    prefill_cpu_s = (ProcessCpuSeconds() - cpu_start) / std::max(1, args.rounds);
    prefill_path = backend->compute_path();
  }
  if (args.decode > 0) {
    std::unique_ptr<CpuBackend> backend = Create(**checkpoint, args, args.decode_threads, capacity);
    const std::vector<int32_t> prompt = Tokens(16, vocab);
    for (int r = 0; r < args.rounds + 1; ++r) {
      Step(backend.get(), table, prompt, 0);
      double seconds = 0;
      for (int i = 0; i < args.decode; ++i) seconds += Step(backend.get(), table, {prompt[i % 16]}, 16 + i);
      if (r > 0) decode_tps.push_back(args.decode / seconds);  // round 0 warms up
    }
  }
  const Dot16Kernels& dot16 = args.kernels == CpuKernels::kFast ? BestDot16() : BestExactDot16();
  std::printf("{\"model\": \"%s\", \"kernels\": \"%s\", \"isa\": \"%.*s\", \"isa_16bit\": \"%.*s\", "
              "\"prefill_tokens\": %d, "
              "\"prefill_threads\": %d, \"prefill_tok_s\": %.1f, \"decode_tokens\": %d, \"decode_threads\": %d, "
              "\"decode_tok_s\": %.1f, \"prefill_cpu_s\": %.3f, \"prefill_compute_path\": \"%s\"}\n",
              args.model.c_str(), KernelsName(args.kernels), static_cast<int>(BestQuantDot().isa.size()),
              BestQuantDot().isa.data(), static_cast<int>(dot16.isa.size()), dot16.isa.data(), args.prefill,
              args.prefill_threads, prefill_tps.empty() ? 0.0 : Median(prefill_tps), args.decode,
              args.decode_threads, decode_tps.empty() ? 0.0 : Median(decode_tps), prefill_cpu_s,
              prefill_path.c_str());
  return 0;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) { return kvtier::Main(argc, argv); }
