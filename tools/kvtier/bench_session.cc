// Implementation of BenchSession and the workloads W1-W4 (bench_session.h).
#include "bench_session.h"

#include "bench_compute_path.h"
#include "bench_grammar.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kvtier::cli::bench {
namespace {

}  // namespace

double BenchSession::Base(const std::string& scenario, const char* key) const {
  auto it = baseline.find(scenario);
  if (it == baseline.end() || !it->second.value("ok", false) || !it->second.contains(key)) return NAN;
  return it->second[key].get<double>();
}

json BenchSession::Record(const std::string& id, const WorkloadSpec& w, const RunResult& r) const {
  json j = {{"num_seqs", w.num_seqs}, {"prompt", w.prompt}, {"gen", w.gen}, {"options", w.options},
            {"ok", r.ok}, {"error", r.error}, {"wall_s", r.wall_s}, {"ttft_s", r.ttft_s},
            {"all_first_token_s", r.all_first_s}, {"decode_s", r.decode_s}, {"generated", r.generated},
            {"decode_tokens", r.decode_tokens}, {"steps", r.steps},
            {"gpu_peak_process_mib_nvidia_smi", r.peak_process_mib}, {"gpu_peak_device_mib_nvidia_smi", r.peak_device_mib}};
  if (!std::isnan(r.context_create_s)) j["context_create_s"] = r.context_create_s;
  if (!r.stats.is_null()) {
    j["gpu_allocs_after_init"] = r.stats.value("gpu_allocs_after_init", -1);
    j["preemptions"] = r.stats.value("preemptions", -1);
    const std::string compute_path = r.stats.value("compute_path", "");
    j["compute_path"] = compute_path;
    j["prefill_attention"] = PrefillAttentionOf(compute_path);
    j["stats"] = r.stats;
  }
  return j;
}

RecordFn BenchSession::Recorder() const {
  return [this](const std::string& id, const WorkloadSpec& w, const RunResult& r) { return Record(id, w, r); };
}

void BenchSession::SetModel(kvt_model* model) {
  int32_t len = 0;
  if (kvt_model_info_json(model, nullptr, 0, &len) != KVT_OK) return;
  std::string text(static_cast<size_t>(len) + 1, '\0');
  if (kvt_model_info_json(model, text.data(), len + 1, &len) != KVT_OK) return;
  text.resize(static_cast<size_t>(len));
  shape = ModelShape::FromInfo(json::parse(text, nullptr, false));
  out["model_shape"] = {{"architecture", shape.architecture},
                        {"parameters", shape.parameters},
                        {"projection_parameters", shape.projection_parameters},
                        {"expert_parameters", shape.expert_parameters},
                        {"experts", shape.experts},
                        {"experts_per_token", shape.experts_per_token},
                        {"flops_per_token", shape.FlopsPerToken()},
                        {"weight_bytes_per_step_1_row", WeightBytesPerStep(1)},
                        {"weight_bytes_per_step_64_rows", WeightBytesPerStep(64)},
                        {"kv_bytes_per_token", KvBytesPerToken()}};
}

double BenchSession::WeightBytesPerStep(int64_t rows) const { return shape.WeightBytesPerStep(rows, weight_dtype == "fp8"); }

double BenchSession::KvBytesPerToken() const {
  return kv_dtype == "fp8" ? shape.fp8_kv_bytes_per_token : shape.kv_bytes_per_token;
}

WorkloadSpec BenchSession::GpuSpec(const std::string& id, int seqs, int prompt, int gen) const {
  WorkloadSpec w;
  w.id = id;
  w.num_seqs = seqs;
  w.prompt = prompt;
  w.gen = gen;
  w.options["backend"] = backend;
  if (weight_dtype != "auto") w.options["weight_dtype"] = weight_dtype;
  if (kv_dtype != "auto") w.options["kv_dtype"] = kv_dtype;
  w.options["max_running"] = std::to_string(std::max(seqs, 1));
  w.options["max_tokens_per_step"] = "2048";
  const int64_t kv = static_cast<int64_t>(seqs * (prompt + gen + 32) * shape.kv_bytes_per_token) + (64 << 20);
  w.options["gpu_kv_bytes"] = std::to_string(kv);
  return w;
}

void RunGpuWorkload(const std::string& id, kvt_model* big, BenchSession* session) {
  BenchSession& s = *session;
if (id == "W1") {
    WorkloadSpec w = s.GpuSpec(id, 1, 512, 256);
    RunResult r = RunWorkload(big, w, s.time_limit, s.sampler);
    json j = s.Record(id, w, r);
    const double decode = r.ok ? (w.gen - 1) / r.decode_s : NAN;
    const double prefill = r.ok ? w.prompt / r.ttft_s : NAN;
    j["decode_tok_s"] = decode;
    j["prefill_tok_s"] = prefill;
    s.out["workloads"][id] = j;
    const double ctx = 512 + 128;
    s.rows.push_back({id, "decode tok/s", "tok/s", decode, s.ceilings.hbm_Bps / (s.WeightBytesPerStep() + ctx * s.KvBytesPerToken()),
                    s.Base("W1", "decode_tok_s"), s.ModelTarget(s.weight_dtype == "fp8" ? 450.0 : 240.0), true, r.error});
    s.rows.push_back({id, "prefill tok/s", "tok/s", prefill, s.PrefillTokS(w.prompt),
                    NAN, s.ModelTarget(25000), true, "baseline: HF prefill ttft " + Fmt(s.Base("W1", "ttft_s"), 3) + " s"});
  } else if (id == "W2") {
    WorkloadSpec w = s.GpuSpec(id, 64, 512, 256);
    RunResult r = RunWorkload(big, w, s.time_limit, s.sampler);
    json j = s.Record(id, w, r);
    const double decode = r.ok ? r.decode_tokens / r.decode_s : NAN;
    const double e2e = r.ok ? r.generated / r.wall_s : NAN;
    // The batch's 64 x 512 prompt tokens over the time to its last first token (decode steps
    // of the sequences already started run in between: a lower bound of the prefill rate).
    const double prefill = r.ok ? 64.0 * 512 / r.all_first_s : NAN;
    j["decode_tok_s"] = decode;
    j["e2e_output_tok_s"] = e2e;
    j["prefill_tok_s"] = prefill;
    s.out["workloads"][id] = j;
    const double step_bytes = s.WeightBytesPerStep(64) + 64 * (512 + 128) * s.KvBytesPerToken();
    const double decode_limit = 64 * s.ceilings.hbm_Bps / step_bytes;
    const double e2e_limit = 64.0 * 256 / (64.0 * 512 / s.PrefillTokS(2048) + 256 * step_bytes / s.ceilings.hbm_Bps);
    s.rows.push_back({id, "decode tok/s (64 seqs)", "tok/s", decode, decode_limit, s.Base("W2", "decode_tok_s"),
                      s.ModelTarget(s.weight_dtype == "fp8" ? 14000.0 : 9600.0), true, r.error});
    s.rows.push_back({id, "end-to-end output tok/s", "tok/s", e2e, e2e_limit, s.Base("W2", "e2e_tok_s"), s.ModelTarget(6000), true, ""});
    s.rows.push_back({id, "prefill tok/s (64 x 512, to all first)", "tok/s", prefill, s.PrefillTokS(2048),
                      NAN, NAN, true, ""});
    if (s.sampler_controls) {
      // The same workload with the sampler chain on, in the same process right after:
      // target >= 90% of the plain run's decode tokens/s.
      WorkloadSpec wc = w;
      wc.sampler_controls = true;
      RunResult rc = RunWorkload(big, wc, s.time_limit, s.sampler);
      json jc = s.Record(id, wc, rc);
      const double decode_c = rc.ok ? rc.decode_tokens / rc.decode_s : NAN;
      jc["decode_tok_s"] = decode_c;
      jc["e2e_output_tok_s"] = rc.ok ? rc.generated / rc.wall_s : NAN;
      jc["decode_ratio_to_plain"] = decode_c / decode;
      jc["sampler_controls"] = {{"logprobs", 5}, {"repetition_penalty", 1.1}, {"presence_penalty", 0.2},
                                {"frequency_penalty", 0.2}, {"logit_bias_tokens", 3}};
      s.out["workloads"]["W2_sampler_controls"] = jc;
      s.rows.push_back({"W2s", "decode tok/s, logprobs 5 + penalties", "tok/s", decode_c, decode_limit, decode,
                        0.9 * decode, true, rc.error});
    }
    if (!s.json_schema_file.empty()) RunW2WithSchema(big, w, decode, decode_limit, s.json_schema_file, &s);
  } else if (id == "W3") {
    WorkloadSpec capped = s.GpuSpec(id, 32, 2048, 128);
    capped.options["gpu_mem_limit"] = "24GiB";
    capped.options["gpu_kv_bytes"] = "0";
    RunResult rc = RunWorkload(big, capped, s.time_limit, s.sampler);
    WorkloadSpec free = s.GpuSpec(id, 32, 2048, 128);
    RunResult ru = RunWorkload(big, free, s.time_limit, s.sampler);
    json j = s.Record(id, capped, rc);
    j["uncapped"] = s.Record(id, free, ru);
    const double tc = rc.ok ? rc.generated / rc.wall_s : NAN;
    const double tu = ru.ok ? ru.generated / ru.wall_s : NAN;
    j["output_tok_s"] = tc;
    j["uncapped_output_tok_s"] = tu;
    j["ratio_to_uncapped"] = tc / tu;
    j["cap_mib"] = 24 * 1024;
    j["cap_holds_nvidia_smi"] = rc.peak_process_mib > 0 ? json(rc.peak_process_mib <= 24 * 1024) : json(nullptr);
    s.out["workloads"][id] = j;
    const double step_bytes = s.WeightBytesPerStep(32) + 32 * (2048 + 64) * s.KvBytesPerToken();
    const double limit = 32.0 * 128 / (32.0 * 2048 * s.FlopsPerToken() / s.ProjectionFlops() + 128 * step_bytes / s.ceilings.hbm_Bps);
    s.rows.push_back({id, "output tok/s, 24 GiB cap", "tok/s", tc, limit, NAN, NAN, true,
                    rc.error.empty() ? "HF: OOM under cap" : rc.error});
    s.rows.push_back({id, "uncapped output tok/s", "tok/s", tu, limit, s.Base("W3u", "e2e_tok_s"), NAN, true, ru.error});
    s.rows.push_back({id, "capped / uncapped", "", tc / tu, 1.0, NAN, 0.8, true, ""});
    s.rows.push_back({id, "peak GPU MiB (nvidia-smi, capped)", "MiB", static_cast<double>(rc.peak_process_mib),
                    24.0 * 1024, NAN, 24.0 * 1024, false, ""});
  } else if (id == "W4") {
    WorkloadSpec w = s.GpuSpec(id, 1, 32768, 64);
    w.options["gpu_mem_limit"] = "24GiB";
    w.options["gpu_kv_bytes"] = "0";
    RunResult r = RunWorkload(big, w, s.time_limit, s.sampler);
    json j = s.Record(id, w, r);
    const double decode = r.ok ? (w.gen - 1) / r.decode_s : NAN;
    j["prefill_s"] = r.ok ? json(r.ttft_s) : json(nullptr);
    j["prefill_step_s"] = r.prefill_step_s;
    // The library to beat for the attention part: cuDNN's fused attention on the same shape
    // (lib_kernels.py in the same device call), attention alone, no projections.
    j["cudnn_attention_s"] = std::isnan(s.ceilings.cudnn_attention_32k_s) ? json(nullptr)
                                                                           : json(s.ceilings.cudnn_attention_32k_s);
    j["decode_tok_s"] = decode;
    j["cap_holds_nvidia_smi"] = r.peak_process_mib > 0 ? json(r.peak_process_mib <= 24 * 1024) : json(nullptr);
    s.out["workloads"][id] = j;
    const double T = 32768;
    // Linear layers at the projections' rate, causal attention at the bf16 GEMM rate.
    const double prefill_limit =
        T * s.FlopsPerToken() / s.ProjectionFlops() + 4.0 * s.shape.query_width * T * T / 2 / s.ceilings.gemm_flops;
    const std::string cudnn_note = std::isnan(s.ceilings.cudnn_attention_32k_s)
                                       ? ""
                                       : "cuDNN attention alone " + Fmt(s.ceilings.cudnn_attention_32k_s, 3) + " s";
    s.rows.push_back({id, "prefill s (24 GiB cap)", "s", r.ok ? r.ttft_s : NAN, prefill_limit, NAN, NAN, false,
                      r.ok ? cudnn_note : r.error});
    s.rows.push_back({id, "decode tok/s at 32k (24 GiB cap)", "tok/s", decode,
                    s.ceilings.hbm_Bps / (s.WeightBytesPerStep() + (T + 32) * s.KvBytesPerToken()), s.Base("W4", "decode_tok_s"), s.ModelTarget(170), true, ""});
    s.rows.push_back({id, "peak GPU MiB (nvidia-smi)", "MiB", static_cast<double>(r.peak_process_mib), 24.0 * 1024, NAN,
                    24.0 * 1024, false, ""});
  }
}

}  // namespace kvtier::cli::bench
