// W8 of `kvtier bench` (bench_w8.h).
#include "bench_w8.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kvtier::cli::bench {
namespace {

// The model's shape is the session's (BenchSession::shape): FLOPs per token of the linear
// layers, and of causal attention per (query, key) pair over all layers (Q.K^T and P.V:
// 2 x 2 x the query width of every layer). Weight and KV bytes per step follow --weight-dtype
// / --kv-dtype (BenchSession::WeightBytesPerStep, KvBytesPerToken).
constexpr double kBlockTokens = 16;

}  // namespace

void RunW8(kvt_model* model, BenchSession* session) {
  BenchSession& s = *session;
  const double kv_per_token = s.KvBytesPerToken();
  const std::string id = "W8";
  WorkloadSpec w = s.GpuSpec(id, 1, kW8Prompt, kW8Gen);
  w.options["gpu_mem_limit"] = "24GiB";
  w.options["gpu_kv_bytes"] = "0";  // the device tier gets what the cap leaves
  // The host tier holds what the device cannot (plus cached copies of moved blocks).
  w.options["host_kv_bytes"] = "24GiB";
  // Stream one layer of the whole context per step (two staging buffers of 512 MiB).
  w.options["cuda_host_kv_stream_tokens"] = std::to_string(kW8Context);
  RunResult r = RunWorkload(model, w, s.tier_time_limit, s.sampler);
  json j = s.Record(id, w, r);
  const double decode = r.ok && r.decode_s > 0 ? (w.gen - 1) / r.decode_s : NAN;
  const double prefill_s = r.ok ? r.ttft_s : NAN;
  // The bound of a decode step: the larger of the sequence's host-resident KV over the host
  // link's bandwidth (measured by the backend in this run), and the same step with all its
  // KV on the device (weights + whole context read once at the HBM ceiling, in the run's
  // weight and KV formats: with fp8 weights + fp8 KV everything fits on the device and the
  // second term is the limit).
  const double link_Bps = JsonNum(r.stats, {"backend_copies", "host_link_bytes_per_second"});
  const double host_blocks = JsonNum(r.stats, {"blocks_moved_to_host"});
  const double host_bytes = host_blocks * kBlockTokens * kv_per_token;
  const double context = w.prompt + w.gen;
  const double device_step_s = (s.WeightBytesPerStep() + context * kv_per_token) / s.ceilings.hbm_Bps;
  const double link_step_s = link_Bps > 0 ? host_bytes / link_Bps : NAN;
  const double limit = 1.0 / std::max(device_step_s, std::isnan(link_step_s) ? 0.0 : link_step_s);
  // Prefill's compute limit: linear layers at the projections' GEMM ceiling (fp8 with fp8
  // weights) plus causal attention at the bf16 one.
  const double prefill_limit_s =
      w.prompt * s.FlopsPerToken() / s.ProjectionFlops() +
      0.5 * w.prompt * static_cast<double>(w.prompt) * 4.0 * s.shape.query_width / s.ceilings.gemm_flops;
  j["prefill_s"] = prefill_s;
  j["prefill_step_s"] = r.prefill_step_s;  // one per 2,048-token chunk, in order
  j["prefill_limit_s"] = prefill_limit_s;
  j["decode_tok_s"] = decode;
  j["host_link_bytes_per_second"] = link_Bps;
  // How the backend gathers host-resident KV, and the rate it measured for it at creation.
  j["host_kv_gather"] = r.stats.contains("backend_copies") ? r.stats["backend_copies"].value("host_kv_gather", "") : "";
  j["host_kv_gather_bytes_per_second"] = JsonNum(r.stats, {"backend_copies", "host_kv_gather_bytes_per_second"});
  j["host_resident_blocks"] = host_blocks;
  j["host_resident_bytes_per_step"] = host_bytes;
  j["step_limit_link_s"] = link_step_s;
  j["step_limit_all_on_device_s"] = device_step_s;
  j["weight_bytes_per_step"] = s.WeightBytesPerStep();
  j["kv_bytes_per_token"] = s.KvBytesPerToken();
  j["decode_limit_tok_s"] = limit;
  j["ratio_to_limit"] = decode / limit;
  j["gpu_cap_mib"] = 24 * 1024;
  j["baseline_note"] = "seed baseline (offloaded cache): CUDA OOM under 24 GiB at 128k (docs/WORKLOADS.md)";
  s.out["workloads"][id] = j;
  // fp8 weights + fp8 KV: the whole context fits on the device; the target is #17's 170 tok/s.
  const bool fp8 = s.weight_dtype == "fp8" && s.kv_dtype == "fp8";
  s.rows.push_back({id, fp8 ? "decode tok/s (128k, fp8 KV on device)" : "decode tok/s (128k, KV on host)", "tok/s",
                    decode, limit, NAN, fp8 ? s.ModelTarget(170.0) : 0.9 * limit, true,
                    r.ok ? (fp8 ? "limit: fp8 weights + fp8 KV read once per step at the HBM ceiling"
                                : "limit: max(host KV / measured link, all-on-device step)")
                         : r.error});
  s.rows.push_back({id, "prefill s (128k)", "s", prefill_s, prefill_limit_s, NAN, NAN, false,
                    "baseline OOMs under 24 GiB"});
  s.rows.push_back({id, "peak GPU MiB (nvidia-smi)", "MiB", static_cast<double>(r.peak_device_mib), 24 * 1024.0, NAN,
                    24 * 1024.0, false, ""});
}

}  // namespace kvtier::cli::bench
