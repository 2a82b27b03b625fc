// W9, W9a, W9b of `kvtier bench` (bench_w9.h).
#include "bench_w9.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace kvtier::cli::bench {
void RunW9(const std::string& id, kvt_model* model, BenchSession* session) {
  BenchSession& s = *session;
  W9Shape shape{};
  if (!W9ShapeOf(id, &shape)) return;
  WorkloadSpec w = s.GpuSpec(id, shape.requests, shape.prompt, shape.gen);
  if (s.backend == "cuda") {
    // The whole H200 (140.4 GiB) less headroom for the CUDA runtime and other processes: the
    // KV pool gets what the weights and workspace leave.
    w.options["gpu_mem_limit"] = "132GiB";
    w.options["gpu_kv_bytes"] = "0";
  } else {  // a CPU run (a small model, to check the workload): what the requests need, <= 4 GiB
    const double need = static_cast<double>(shape.requests) * (shape.prompt + shape.gen + 32) * s.KvBytesPerToken();
    w.options["gpu_kv_bytes"] = std::to_string(static_cast<int64_t>(std::min(need, 4.0 * (1 << 30))));
  }
  RunResult r = RunWorkload(model, w, s.time_limit, s.sampler);
  json j = s.Record(id, w, r);
  const double output = r.ok ? r.generated / r.wall_s : NAN;
  const double steps = std::max<double>(1, r.steps);
  const double schedule_s = JsonNum(r.stats, {"time", "schedule_seconds"});
  const double step_s = JsonNum(r.stats, {"time", "step_seconds"});
  j["output_tok_s"] = output;
  j["requests"] = shape.requests;
  j["mean_computed_tokens_per_step"] = r.ok ? (static_cast<double>(shape.requests) * (shape.prompt + shape.gen)) / steps : NAN;
  j["mean_output_tokens_per_step"] = r.ok ? r.generated / steps : NAN;
  j["host_schedule_s_per_step"] = schedule_s / steps;
  j["host_schedule_share_of_step"] = step_s > 0 ? schedule_s / step_s : NAN;
  j["trtllm_h200_fp8_tok_s"] = shape.trtllm_tok_s;
  s.out["workloads"][id] = j;
  const bool fp8 = s.weight_dtype == "fp8";
  char note[160];
  std::snprintf(note, sizeof note, "%d requests, %.0f output tokens a step, host schedule %.2f ms a step; TRT-LLM %g",
                shape.requests, r.ok ? r.generated / steps : NAN, 1e3 * schedule_s / steps, shape.trtllm_tok_s);
  s.rows.push_back({id, "output tok/s (" + std::to_string(shape.prompt) + " in / " + std::to_string(shape.gen) + " out)",
                    "tok/s", output, W9Limit(shape, s.WeightBytesPerStep(shape.requests), s.KvBytesPerToken(), s.ceilings.hbm_Bps,
                            s.ProjectionFlops(), s.FlopsPerToken()), NAN,
                    fp8 && id == "W9" ? s.ModelTarget(shape.trtllm_tok_s) : NAN, true, r.ok ? note : r.error});
}

}  // namespace kvtier::cli::bench
