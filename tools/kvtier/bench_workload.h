// The machinery of `kvtier bench` shared by its workloads: a workload's shape, one timed
// run through the public C API, its result, and the table rows. A run started while no
// SIGINT/SIGTERM has arrived stops at the first one between steps, cancels its sequences
// and frees its context. Not thread-safe (one run at a time).
#ifndef KVTIER_TOOLS_KVTIER_BENCH_WORKLOAD_H_
#define KVTIER_TOOLS_KVTIER_BENCH_WORKLOAD_H_

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "bench_ceilings.h"
#include "bench_gpu_sampler.h"
#include "kvtier/kvtier.h"
#include "nlohmann/json.hpp"

namespace kvtier::cli::bench {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct WorkloadSpec {
  std::string id;
  int num_seqs = 1;
  int prompt = 512;
  int gen = 256;
  std::map<std::string, std::string> options;  // C API option key -> value
  std::vector<std::vector<int32_t>> prompts;   // given prompts (else num_seqs random ones)
  bool warmup = true;                          // one short sequence before timing
  // The sampler chain on (--sampler-controls): each request reports log-probabilities with
  // 5 alternatives (read from every event) and has every penalty and a logit bias on.
  bool sampler_controls = false;
  std::string json_schema;                     // every sequence constrained by it (and the warm-up)
};

struct RunResult {
  bool ok = false;
  std::string error;
  double wall_s = 0;                 // first add -> last finish
  double ttft_s = 0;                 // first add -> first token of the first sequence
  double all_first_s = 0;            // first add -> every sequence has its first token
  double decode_s = 0;               // all_first -> last finish
  double mean_ttft_s = 0;            // mean over sequences of add -> its first token
  int64_t generated = 0;             // all tokens produced
  int64_t decode_tokens = 0;         // tokens produced after all_first
  int64_t steps = 0;
  // Each step's wall time until every sequence had its first token: for one long prompt, the
  // time of each prefill chunk in order (how a chunk's cost grows with the context before it).
  std::vector<double> prefill_step_s;
  json stats;
  int64_t peak_process_mib = 0, peak_device_mib = 0;
  int interrupt_signal = 0;  // SIGINT/SIGTERM ended it early (sequences cancelled)
  double context_create_s = NAN;  // kvt_context_create; NaN when run in an existing context
  int64_t grammar_finished = 0;  // sequences that completed their JSON schema
};



struct Row {
  std::string workload, figure, unit;
  double value = NAN, limit = NAN, baseline = NAN, target = NAN;
  bool higher_is_better = true;
  std::string note;
};

// One workload's JSON record (what every workload reports), filled by the command.
using RecordFn = std::function<json(const std::string& id, const WorkloadSpec& w, const RunResult& r)>;

// --gpu-hour-usd's default: an assumed on-demand price of one H200 GPU-hour, in USD.
inline constexpr double kDefaultGpuHourUsd = 3.50;
// USD per million output tokens at `row`'s rate when it is an output-token rate of a GPU
// workload (unit tok/s, not a prefill figure, not the CPU workload W7): usd_per_hour /
// 3600 / (tokens/s) x 1e6. NaN for any other row.
double UsdPerMillionOutputTokens(const Row& row, double usd_per_hour);

double Seconds(Clock::time_point a, Clock::time_point b);
// "-" for NaN, else the value with `prec` decimals.
std::string Fmt(double v, int prec = 1);
// The number at `path` in `j`, NaN when absent.
double JsonNum(const json& j, std::initializer_list<const char*> path);
// kvt_context_stats_json parsed (null on failure).
json ContextStats(kvt_context* context);

// Runs `w` in a fresh context (created from w.options, freed at the end) or, when
// `existing` is given, in that context (left alive; w.options ignored).
RunResult RunWorkload(kvt_model* model, const WorkloadSpec& w, double time_limit, GpuMemorySampler* sampler,
                      kvt_context* existing = nullptr);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_WORKLOAD_H_
