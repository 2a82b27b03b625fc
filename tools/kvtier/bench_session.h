// BenchSession: what one `kvtier bench` invocation accumulates (the results JSON, the table
// rows) and the settings every workload reads (backend, time limits, hardware limits, seed
// baseline), with the workloads that need nothing more: W1-W4 on the GPU model. Not
// thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_SESSION_H_
#define KVTIER_TOOLS_KVTIER_BENCH_SESSION_H_

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "bench_model_shape.h"
#include "bench_workload.h"

namespace kvtier::cli::bench {

struct BenchSession {
  std::string backend = "cuda";
  double time_limit = 150;
  double tier_time_limit = 150;
  double gpu_hour_usd = kDefaultGpuHourUsd;  // --gpu-hour-usd
  Ceilings ceilings;
  ModelShape shape;                      // of the checkpoint the GPU workloads run (SetModel)
  std::map<std::string, json> baseline;  // scenario -> hf_baseline.py result
  GpuMemorySampler* sampler = nullptr;   // null when GPU memory is not sampled
  bool sampler_controls = false;         // W2 runs again with the sampler chain on (W2s)
  std::string json_schema_file;          // W2 runs again with it (W2j) when given
  std::string weight_dtype = "auto";     // --weight-dtype: option weight_dtype of GPU workloads
  std::string kv_dtype = "auto";         // --kv-dtype: option kv_dtype of GPU workloads
  json out;                              // the results JSON
  std::vector<Row> rows;                 // the printed table

  // The seed baseline's figure `key` for `scenario`, NaN when it has none.
  double Base(const std::string& scenario, const char* key) const;
  // What every workload records of a run.
  json Record(const std::string& id, const WorkloadSpec& w, const RunResult& r) const;
  RecordFn Recorder() const;
  // Reads the shape of `model` (kvt_model_info_json) for the limits, and records it.
  void SetModel(kvt_model* model);
  // Bytes of weights a decode step of `rows` sequences reads (ModelShape::WeightBytesPerStep
  // in this session's weight format: experts counted as the expected fraction chosen).
  double WeightBytesPerStep(int64_t rows = 1) const;
  // KV bytes one token of context adds to a decode step's reads (about half with kv_dtype fp8).
  double KvBytesPerToken() const;
  // FLOPs of one token through the linear layers (ModelShape::FlopsPerToken).
  double FlopsPerToken() const { return shape.FlopsPerToken(); }
  // FLOP/s the linear layers are bounded by in this session's weight format (Ceilings).
  double ProjectionFlops() const { return ceilings.ProjectionFlops(weight_dtype == "fp8"); }
  // Seconds `tokens` prompt tokens take at the compute limit, each attending to `mean_context`
  // positions on average: the linear layers at ProjectionFlops, attention (Q.K^T and P.V) at
  // the bf16 GEMM rate.
  double PrefillLimitS(double tokens, double mean_context) const {
    return tokens * FlopsPerToken() / ProjectionFlops() +
           4.0 * shape.query_width * tokens * mean_context / ceilings.gemm_flops;
  }
  // ModelShape::PrefillTokS in this session's weight format and ceilings.
  double PrefillTokS(int64_t step_tokens) const {
    return shape.PrefillTokS(step_tokens, weight_dtype == "fp8", ProjectionFlops(), ceilings.hbm_Bps);
  }
  // An absolute target (tokens/s of Llama-3-8B on an H200, docs/WORKLOADS.md): `target` when
  // the checkpoint is that model's shape, NaN (no target, never missed) for any other model,
  // whose figures are read against their limits.
  double ModelTarget(double target) const { return shape.IsTargetsModel() ? target : NAN; }
  // A GPU workload of `seqs` sequences with a device KV budget that fits them all.
  WorkloadSpec GpuSpec(const std::string& id, int seqs, int prompt, int gen) const;
};

// W1..W4 (docs/WORKLOADS.md) on the Llama-3-8B-shape model.
void RunGpuWorkload(const std::string& id, kvt_model* model, BenchSession* session);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_SESSION_H_
