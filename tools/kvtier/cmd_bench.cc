// `kvtier bench`: runs the workloads of WORKLOADS.md through the public C API (what users
// get), prints a table (figure, hardware limit, ratio, seed baseline, ratio) and writes
// JSON. GPU memory is read from outside the process (nvidia-smi) to prove a cap holds.
// Runs once per process; not thread-safe.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "args.h"
#include "bench_gpu_sampler.h"
#include "command.h"
#include "kvtier/kvtier.h"
#include "model/random_checkpoint.h"
#include "nlohmann/json.hpp"

namespace kvtier::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr char kUsage[] = R"(usage: kvtier bench [--workload W1,W2,W3,W4,W5,W6,W7|all] [flags]

Runs the WORKLOADS.md workloads through the C API and prints figure / limit / baseline.
  --workload LIST      comma-separated (repeatable); default all
  --model DIR          Llama-3-8B-shape checkpoint; absent: a random one is written
                       once into --model-cache (kvtier mkmodel --preset llama3-8b)
  --model-cache DIR    where to write/reuse it (default ./bench-model/llama3-8b)
  --small-model DIR    W7's CPU model (default: written into ./bench-model/small-llama)
  --json FILE          write the results JSON
  --ceilings FILE      output of ceilings.py (its RESULT line): limits from measured ceilings
  --baseline FILE      output of hf_baseline.py runs (RESULT lines): seed baseline figures
  --commit SHA         git commit to record (default: git rev-parse HEAD)
  --time-limit S       per-workload wall-clock cap in seconds (default 150)
  --backend NAME       GPU workloads' backend (default cuda)
)";

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Parses every "RESULT {json}" line of a file (or a bare JSON object per line).
std::vector<json> ReadResultLines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    size_t at = line.find("RESULT ");
    std::string text = at == std::string::npos ? line : line.substr(at + 7);
    if (text.empty() || text[0] != '{') continue;
    try {
      out.push_back(json::parse(text));
    } catch (...) {
    }
  }
  return out;
}

int64_t ReadProcStatusKib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + std::strlen(key));
  }
  return -1;
}

struct WorkloadSpec {
  std::string id;
  int num_seqs = 1;
  int prompt = 512;
  int gen = 256;
  std::map<std::string, std::string> options;  // C API option key -> value
};

struct RunResult {
  bool ok = false;
  std::string error;
  double wall_s = 0;                 // first add -> last finish
  double ttft_s = 0;                 // first add -> first token of the first sequence
  double all_first_s = 0;            // first add -> every sequence has its first token
  double decode_s = 0;               // all_first -> last finish
  int64_t generated = 0;             // all tokens produced
  int64_t decode_tokens = 0;         // tokens produced after all_first
  int64_t steps = 0;
  json stats;
  int64_t peak_process_mib = 0, peak_device_mib = 0;
};

struct Handles {
  kvt_options* options = nullptr;
  kvt_context* context = nullptr;
  kvt_events* events = nullptr;
  std::vector<kvt_request*> requests;
  ~Handles() {
    for (kvt_request* r : requests) kvt_request_free(r);
    kvt_events_free(events);
    kvt_context_free(context);
    kvt_options_free(options);
  }
};

RunResult RunWorkload(kvt_model* model, const WorkloadSpec& w, double time_limit, GpuMemorySampler* sampler) {
  RunResult r;
  Handles h;
  char err[2048] = {0};
  kvt_options_create(&h.options);
  for (const auto& [key, value] : w.options) {
    if (kvt_options_set_string(h.options, key.c_str(), value.c_str()) != KVT_OK) {
      r.error = "option " + key + ": " + kvt_options_errmsg(h.options);
      return r;
    }
  }
  if (sampler) sampler->ResetPeaks();
  if (kvt_status s = kvt_context_create(model, h.options, &h.context, err, sizeof err); s != KVT_OK) {
    r.error = std::string("context: ") + kvt_status_string(s) + ": " + err;
    return r;
  }
  const int32_t vocab = kvt_model_vocab_size(model);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> dist(1, vocab - 1);
  // Warm-up: one short sequence (kernels, cuBLAS heuristics, graphs) before timing.
  {
    kvt_request* warm = nullptr;
    kvt_request_create(&warm);
    std::vector<int32_t> p(16);
    for (auto& t : p) t = dist(rng);
    kvt_request_set_prompt_tokens(warm, p.data(), 16);
    kvt_request_set_max_new_tokens(warm, 4);
    kvt_request_set_ignore_eos(warm, 1);
    int32_t buf[8], len = 0;
    kvt_status s = kvt_generate(h.context, warm, buf, 8, &len, nullptr);
    kvt_request_free(warm);
    if (s != KVT_OK) {
      r.error = std::string("warm-up: ") + kvt_status_string(s) + ": " + kvt_context_errmsg(h.context);
      return r;
    }
  }
  std::vector<std::vector<int32_t>> prompts(w.num_seqs, std::vector<int32_t>(w.prompt));
  for (auto& p : prompts)
    for (auto& t : p) t = dist(rng);
  for (int i = 0; i < w.num_seqs; ++i) {
    kvt_request* req = nullptr;
    kvt_request_create(&req);
    h.requests.push_back(req);
    kvt_request_set_prompt_tokens(req, prompts[i].data(), w.prompt);
    kvt_request_set_max_new_tokens(req, w.gen);
    kvt_request_set_ignore_eos(req, 1);
  }
  kvt_events_create(&h.events);
  std::map<int64_t, int> produced;
  const auto t0 = Clock::now();
  for (kvt_request* req : h.requests) {
    int64_t id = 0;
    if (kvt_status s = kvt_sequence_add(h.context, req, &id); s != KVT_OK) {
      r.error = std::string("add: ") + kvt_status_string(s) + ": " + kvt_context_errmsg(h.context);
      return r;
    }
    produced[id] = 0;
  }
  bool have_first = false, have_all_first = false;
  int with_first = 0;
  Clock::time_point t_all_first = t0;
  int64_t errors = 0;
  while (kvt_context_num_unfinished(h.context) > 0) {
    if (kvt_status s = kvt_step(h.context, h.events); s != KVT_OK) {
      r.error = std::string("step: ") + kvt_status_string(s) + ": " + kvt_context_errmsg(h.context);
      return r;
    }
    ++r.steps;
    const auto now = Clock::now();
    for (int32_t i = 0; i < kvt_events_count(h.events); ++i) {
      int64_t seq = 0;
      int32_t token = 0, reason = 0;
      kvt_events_get(h.events, i, &seq, &token, &reason);
      if (reason == KVT_FINISH_REASON_ERROR || reason == KVT_FINISH_REASON_CANCELLED) ++errors;
      if (token == KVT_NO_TOKEN) continue;
      ++r.generated;
      if (have_all_first) ++r.decode_tokens;
      if (produced[seq]++ == 0) {
        if (!have_first) {
          have_first = true;
          r.ttft_s = Seconds(t0, now);
        }
        if (++with_first == w.num_seqs) {
          have_all_first = true;
          t_all_first = now;
        }
      }
    }
    if (Seconds(t0, now) > time_limit) {
      char msg[256];
      std::snprintf(msg, sizeof msg, "time limit %.0f s reached after %lld steps, %lld tokens (%d/%d sequences started)",
                    time_limit, static_cast<long long>(r.steps), static_cast<long long>(r.generated), with_first,
                    w.num_seqs);
      r.error = msg;
      r.wall_s = Seconds(t0, now);
      return r;
    }
  }
  const auto t_end = Clock::now();
  r.wall_s = Seconds(t0, t_end);
  r.all_first_s = Seconds(t0, t_all_first);
  r.decode_s = Seconds(t_all_first, t_end);
  int32_t len = 0;
  kvt_context_stats_json(h.context, nullptr, 0, &len);
  std::string text(static_cast<size_t>(len) + 1, '\0');
  kvt_context_stats_json(h.context, text.data(), len + 1, &len);
  text.resize(static_cast<size_t>(len));
  try {
    r.stats = json::parse(text);
  } catch (...) {
  }
  if (sampler) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // one more sample
    r.peak_process_mib = sampler->peak_process_mib();
    r.peak_device_mib = sampler->peak_device_mib();
  }
  if (errors > 0) {
    r.error = std::to_string(errors) + " sequences ended in error/cancel";
    return r;
  }
  r.ok = r.generated == static_cast<int64_t>(w.num_seqs) * w.gen;
  if (!r.ok) r.error = "generated " + std::to_string(r.generated) + " tokens, expected " + std::to_string(w.num_seqs * w.gen);
  return r;
}

// Hardware limits derived from the ceilings (WORKLOADS.md's derivation).
struct Ceilings {
  double hbm_Bps = 4.17e12;
  double gemm_flops = 757e12;
  std::string source = "WORKLOADS.md (2026-11-29)";
};

struct Row {
  std::string workload, figure, unit;
  double value = NAN, limit = NAN, baseline = NAN, target = NAN;
  bool higher_is_better = true;
  std::string note;
};

std::string Fmt(double v, int prec = 1) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

absl::StatusOr<std::string> EnsureCheckpoint(const std::string& preset, const std::string& dir) {
  if (IsFile(dir + "/config.json")) return dir;
  auto spec = RandomCheckpointPreset(preset);
  if (!spec.ok()) return spec.status();
  const auto t0 = Clock::now();
  std::fprintf(stderr, "bench: writing random %s checkpoint to %s ...\n", preset.c_str(), dir.c_str());
  absl::Status s = WriteRandomCheckpoint(*spec, dir);
  if (!s.ok()) return s;
  std::fprintf(stderr, "bench: wrote %s in %.1f s\n", dir.c_str(), Seconds(t0, Clock::now()));
  return dir;
}

int BenchMain(int argc, char** argv) {
  auto args = Args::Parse(argc, argv,
                          {"workload", "model", "model-cache", "small-model", "json", "ceilings", "baseline",
                           "commit", "time-limit", "backend"},
                          {"help"});
  if (!args.ok()) {
    std::fprintf(stderr, "kvtier bench: %s\n\n%s", std::string(args.status().message()).c_str(), kUsage);
    return 2;
  }
  if (args->Has("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  std::vector<std::string> workloads;
  for (const std::string& item : args->GetAll("workload")) {
    for (absl::string_view part : absl::StrSplit(item, ',', absl::SkipWhitespace())) workloads.emplace_back(part);
  }
  if (workloads.empty() || (workloads.size() == 1 && workloads[0] == "all")) {
    workloads = {"W7", "W1", "W2", "W3", "W4", "W5", "W6"};
  }
  // W7 first: its RSS is read before the 16 GB checkpoint is mapped.
  std::stable_sort(workloads.begin(), workloads.end(), [](const std::string& a, const std::string& b) {
    return (a == "W7") > (b == "W7");
  });
  auto time_limit = args->GetDouble("time-limit", 150);
  if (!time_limit.ok()) {
    std::fprintf(stderr, "kvtier bench: %s\n", std::string(time_limit.status().message()).c_str());
    return 2;
  }
  const std::string backend = args->GetOr("backend", "cuda");

  Ceilings ceil;
  json ceilings_json;
  if (auto path = args->Get("ceilings")) {
    auto lines = ReadResultLines(*path);
    if (!lines.empty()) {
      ceilings_json = lines.back();
      if (ceilings_json.contains("hbm_copy_TBps(read+write)"))
        ceil.hbm_Bps = ceilings_json["hbm_copy_TBps(read+write)"].get<double>() * 1e12;
      if (ceilings_json.contains("bf16_gemm_TFLOPs")) ceil.gemm_flops = ceilings_json["bf16_gemm_TFLOPs"].get<double>() * 1e12;
      ceil.source = "measured in this run (" + *path + ")";
    }
  }
  std::map<std::string, json> baseline;  // scenario -> hf_baseline result
  if (auto path = args->Get("baseline")) {
    for (json& j : ReadResultLines(*path)) {
      if (j.contains("scenario")) baseline[j["scenario"].get<std::string>()] = j;
    }
  }
  auto base = [&](const std::string& scenario, const char* key) -> double {
    auto it = baseline.find(scenario);
    if (it == baseline.end() || !it->second.value("ok", false) || !it->second.contains(key)) return NAN;
    return it->second[key].get<double>();
  };

  const auto bench_start = Clock::now();
  GpuMemorySampler sampler;
  const bool sampling = backend != "cpu" && sampler.Start();

  json out;
  {
    std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    out["date"] = date;
  }
  out["machine"] = {{"gpu", RunCommandOutput("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null")},
                    {"driver", RunCommandOutput("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null")},
                    {"cpus", RunCommandOutput("nproc 2>/dev/null")}};
  out["git_commit"] = args->GetOr("commit", RunCommandOutput("git rev-parse HEAD 2>/dev/null"));
  out["ceilings"] = {{"source", ceil.source}, {"hbm_TBps", ceil.hbm_Bps / 1e12}, {"gemm_TFLOPs", ceil.gemm_flops / 1e12},
                     {"raw", ceilings_json}};
  out["baseline_raw"] = baseline;
  out["workloads"] = json::object();
  std::vector<Row> rows;

  // Model-shape constants (Llama-3-8B): bytes of weights read per decode step, FLOPs per
  // token, KV bytes per token.
  const double kWeightBytes = 16.06e9, kFlopsPerToken = 2 * 8.03e9, kKvPerToken = 131072;
  const int64_t kGiB = int64_t{1} << 30;

  kvt_model* big = nullptr;
  auto load_big = [&]() -> bool {
    if (big) return true;
    std::string dir = args->GetOr("model", "");
    if (dir.empty()) {
      auto made = EnsureCheckpoint("llama3-8b", args->GetOr("model-cache", "bench-model/llama3-8b"));
      if (!made.ok()) {
        std::fprintf(stderr, "bench: %s\n", std::string(made.status().message()).c_str());
        return false;
      }
      dir = *made;
    }
    char err[1024];
    const auto t0 = Clock::now();
    if (kvt_model_load(dir.c_str(), &big, err, sizeof err) != KVT_OK) {
      std::fprintf(stderr, "bench: load %s: %s\n", dir.c_str(), err);
      return false;
    }
    out["model_load_s"] = Seconds(t0, Clock::now());
    return true;
  };

  auto record = [&](const std::string& id, const WorkloadSpec& w, const RunResult& r) {
    json j = {{"num_seqs", w.num_seqs}, {"prompt", w.prompt}, {"gen", w.gen}, {"options", w.options},
              {"ok", r.ok}, {"error", r.error}, {"wall_s", r.wall_s}, {"ttft_s", r.ttft_s},
              {"all_first_token_s", r.all_first_s}, {"decode_s", r.decode_s}, {"generated", r.generated},
              {"decode_tokens", r.decode_tokens}, {"steps", r.steps},
              {"gpu_peak_process_mib_nvidia_smi", r.peak_process_mib}, {"gpu_peak_device_mib_nvidia_smi", r.peak_device_mib}};
    if (!r.stats.is_null()) {
      j["gpu_allocs_after_init"] = r.stats.value("gpu_allocs_after_init", -1);
      j["preemptions"] = r.stats.value("preemptions", -1);
      j["stats"] = r.stats;
    }
    return j;
  };

  auto gpu_spec = [&](const std::string& id, int seqs, int prompt, int gen) {
    WorkloadSpec w;
    w.id = id;
    w.num_seqs = seqs;
    w.prompt = prompt;
    w.gen = gen;
    w.options["backend"] = backend;
    w.options["max_running"] = std::to_string(std::max(seqs, 1));
    w.options["max_tokens_per_step"] = "2048";
    const int64_t kv = static_cast<int64_t>(seqs) * (prompt + gen + 32) * 131072 + (64 << 20);
    w.options["gpu_kv_bytes"] = std::to_string(kv);
    return w;
  };

  // Partial results are written after every workload, so a killed run still leaves them.
  auto write_partial = [&] {
    if (auto path = args->Get("json")) {
      std::ofstream f(*path);
      f << out.dump(2) << "\n";
    }
  };
  for (const std::string& id : workloads) {
    write_partial();
    std::fprintf(stderr, "bench: %s ... (%.0f s)\n", id.c_str(), Seconds(bench_start, Clock::now()));
    if (id == "W5" || id == "W6") {
      out["workloads"][id] = {{"ok", false}, {"error", "not run (needs tier manager)"}};
      rows.push_back({id, "not run (needs tier manager)", "", NAN, NAN, NAN, NAN, true, ""});
      continue;
    }
    if (id == "W7") {
      std::string dir = args->GetOr("small-model", "");
      if (dir.empty()) {
        auto made = EnsureCheckpoint("small-llama", "bench-model/small-llama");
        if (!made.ok()) {
          out["workloads"][id] = {{"ok", false}, {"error", std::string(made.status().message())}};
          continue;
        }
        dir = *made;
      }
      kvt_model* small = nullptr;
      char err[1024];
      if (kvt_model_load(dir.c_str(), &small, err, sizeof err) != KVT_OK) {
        out["workloads"][id] = {{"ok", false}, {"error", err}};
        continue;
      }
      WorkloadSpec w;
      w.id = id;
      w.num_seqs = 8;
      w.prompt = 128;
      w.gen = 64;
      w.options = {{"backend", "cpu"}, {"gpu_kv_bytes", "64MiB"}, {"max_running", "8"}};
      RunResult r = RunWorkload(small, w, *time_limit, nullptr);
      kvt_model_free(small);
      json j = record(id, w, r);
      const double tps = r.ok ? r.generated / r.wall_s : NAN;
      j["model"] = dir;
      j["output_tok_s"] = tps;
      j["rss_mib"] = ReadProcStatusKib("VmRSS:") / 1024.0;
      j["peak_rss_mib"] = ReadProcStatusKib("VmHWM:") / 1024.0;
      out["workloads"][id] = j;
      rows.push_back({id, "CPU output tok/s (small-llama, 8 seqs)", "tok/s", tps, NAN, NAN, NAN, true, r.error});
      rows.push_back({id, "peak RSS", "MiB", j["peak_rss_mib"].get<double>(), NAN, NAN, NAN, false, ""});
      continue;
    }
    if (!load_big()) {
      out["workloads"][id] = {{"ok", false}, {"error", "model load failed"}};
      continue;
    }
    if (id == "W1") {
      WorkloadSpec w = gpu_spec(id, 1, 512, 256);
      RunResult r = RunWorkload(big, w, *time_limit, sampling ? &sampler : nullptr);
      json j = record(id, w, r);
      const double decode = r.ok ? (w.gen - 1) / r.decode_s : NAN;
      const double prefill = r.ok ? w.prompt / r.ttft_s : NAN;
      j["decode_tok_s"] = decode;
      j["prefill_tok_s"] = prefill;
      out["workloads"][id] = j;
      const double ctx = 512 + 128;
      rows.push_back({id, "decode tok/s", "tok/s", decode, ceil.hbm_Bps / (kWeightBytes + ctx * kKvPerToken),
                      base("W1", "decode_tok_s"), 240, true, r.error});
      rows.push_back({id, "prefill tok/s", "tok/s", prefill, ceil.gemm_flops / kFlopsPerToken,
                      NAN, 25000, true, "baseline: HF prefill ttft " + Fmt(base("W1", "ttft_s"), 3) + " s"});
    } else if (id == "W2") {
      WorkloadSpec w = gpu_spec(id, 64, 512, 256);
      RunResult r = RunWorkload(big, w, *time_limit, sampling ? &sampler : nullptr);
      json j = record(id, w, r);
      const double decode = r.ok ? r.decode_tokens / r.decode_s : NAN;
      const double e2e = r.ok ? r.generated / r.wall_s : NAN;
      j["decode_tok_s"] = decode;
      j["e2e_output_tok_s"] = e2e;
      out["workloads"][id] = j;
      const double step_bytes = kWeightBytes + 64 * (512 + 128) * kKvPerToken;
      const double decode_limit = 64 * ceil.hbm_Bps / step_bytes;
      const double e2e_limit =
          64.0 * 256 / (64.0 * 512 * kFlopsPerToken / ceil.gemm_flops + 256 * step_bytes / ceil.hbm_Bps);
      rows.push_back({id, "decode tok/s (64 seqs)", "tok/s", decode, decode_limit, base("W2", "decode_tok_s"), 9600, true, r.error});
      rows.push_back({id, "end-to-end output tok/s", "tok/s", e2e, e2e_limit, base("W2", "e2e_tok_s"), 6000, true, ""});
    } else if (id == "W3") {
      WorkloadSpec capped = gpu_spec(id, 32, 2048, 128);
      capped.options["gpu_mem_limit"] = "24GiB";
      capped.options["gpu_kv_bytes"] = "0";
      RunResult rc = RunWorkload(big, capped, *time_limit, sampling ? &sampler : nullptr);
      WorkloadSpec free = gpu_spec(id, 32, 2048, 128);
      RunResult ru = RunWorkload(big, free, *time_limit, sampling ? &sampler : nullptr);
      json j = record(id, capped, rc);
      j["uncapped"] = record(id, free, ru);
      const double tc = rc.ok ? rc.generated / rc.wall_s : NAN;
      const double tu = ru.ok ? ru.generated / ru.wall_s : NAN;
      j["output_tok_s"] = tc;
      j["uncapped_output_tok_s"] = tu;
      j["ratio_to_uncapped"] = tc / tu;
      j["cap_mib"] = 24 * 1024;
      j["cap_holds_nvidia_smi"] = rc.peak_process_mib > 0 ? json(rc.peak_process_mib <= 24 * 1024) : json(nullptr);
      out["workloads"][id] = j;
      const double step_bytes = kWeightBytes + 32 * (2048 + 64) * kKvPerToken;
      const double limit = 32.0 * 128 / (32.0 * 2048 * kFlopsPerToken / ceil.gemm_flops + 128 * step_bytes / ceil.hbm_Bps);
      rows.push_back({id, "output tok/s, 24 GiB cap", "tok/s", tc, limit, NAN, NAN, true,
                      rc.error.empty() ? "HF: OOM under cap" : rc.error});
      rows.push_back({id, "uncapped output tok/s", "tok/s", tu, limit, base("W3u", "e2e_tok_s"), NAN, true, ru.error});
      rows.push_back({id, "capped / uncapped", "", tc / tu, 1.0, NAN, 0.8, true, ""});
      rows.push_back({id, "peak GPU MiB (nvidia-smi, capped)", "MiB", static_cast<double>(rc.peak_process_mib),
                      24.0 * 1024, NAN, 24.0 * 1024, false, ""});
    } else if (id == "W4") {
      WorkloadSpec w = gpu_spec(id, 1, 32768, 64);
      w.options["gpu_mem_limit"] = "24GiB";
      w.options["gpu_kv_bytes"] = "0";
      RunResult r = RunWorkload(big, w, *time_limit, sampling ? &sampler : nullptr);
      json j = record(id, w, r);
      const double decode = r.ok ? (w.gen - 1) / r.decode_s : NAN;
      j["prefill_s"] = r.ok ? json(r.ttft_s) : json(nullptr);
      j["decode_tok_s"] = decode;
      j["cap_holds_nvidia_smi"] = r.peak_process_mib > 0 ? json(r.peak_process_mib <= 24 * 1024) : json(nullptr);
      out["workloads"][id] = j;
      const double T = 32768;
      const double prefill_limit = (T * kFlopsPerToken + 2.0 * 2 * 32 * 32 * 128 * T * T / 2) / ceil.gemm_flops;
      rows.push_back({id, "prefill s (24 GiB cap)", "s", r.ok ? r.ttft_s : NAN, prefill_limit, NAN, NAN, false, r.error});
      rows.push_back({id, "decode tok/s at 32k (24 GiB cap)", "tok/s", decode,
                      ceil.hbm_Bps / (kWeightBytes + (T + 32) * kKvPerToken), base("W4", "decode_tok_s"), 170, true, ""});
      rows.push_back({id, "peak GPU MiB (nvidia-smi)", "MiB", static_cast<double>(r.peak_process_mib), 24.0 * 1024, NAN,
                      24.0 * 1024, false, ""});
    } else {
      std::fprintf(stderr, "bench: unknown workload %s\n", id.c_str());
      return 2;
    }
  }
  if (big) kvt_model_free(big);
  sampler.Stop();
  (void)kGiB;

  // Table + targets.
  std::printf("\n%-4s %-36s %12s %12s %8s %12s %10s %10s  %s\n", "id", "figure", "value", "hw limit", "of limit",
              "seed base", "x base", "target", "note");
  json table = json::array(), missed = json::array();
  for (const Row& row : rows) {
    const double of_limit = row.higher_is_better ? row.value / row.limit : row.limit / row.value;
    const double x_base = row.higher_is_better ? row.value / row.baseline : row.baseline / row.value;
    std::printf("%-4s %-36s %12s %12s %8s %12s %10s %10s  %s\n", row.workload.c_str(), row.figure.c_str(),
                Fmt(row.value, row.value < 10 ? 3 : 1).c_str(), Fmt(row.limit, row.limit < 10 ? 3 : 1).c_str(),
                Fmt(of_limit, 2).c_str(), Fmt(row.baseline, 1).c_str(), Fmt(x_base, 1).c_str(), Fmt(row.target, 1).c_str(),
                row.note.c_str());
    auto num = [](double v) { return std::isnan(v) || std::isinf(v) ? json(nullptr) : json(v); };
    json t = {{"workload", row.workload}, {"figure", row.figure}, {"unit", row.unit}, {"value", num(row.value)},
              {"hardware_limit", num(row.limit)}, {"ratio_to_limit", num(of_limit)}, {"seed_baseline", num(row.baseline)},
              {"ratio_to_baseline", num(x_base)}, {"target", num(row.target)}, {"note", row.note}};
    if (!std::isnan(row.target)) {
      const bool met = !std::isnan(row.value) &&
                       (row.higher_is_better ? row.value >= row.target : row.value <= row.target);
      t["target_met"] = met;
      if (!met) {
        missed.push_back({{"workload", row.workload}, {"figure", row.figure}, {"value", num(row.value)},
                          {"target", row.target},
                          {"off_by", std::isnan(row.value) ? json("not measured: " + row.note)
                                                           : json(Fmt(100.0 * (row.value / row.target - 1), 1) + "%")}});
      }
    }
    table.push_back(t);
  }
  out["table"] = table;
  out["missed_targets"] = missed;
  if (auto path = args->Get("json")) {
    std::ofstream f(*path);
    f << out.dump(2) << "\n";
    std::fprintf(stderr, "bench: wrote %s\n", path->c_str());
  }
  return 0;
}

}  // namespace

KVTIER_REGISTER_COMMAND("bench", "run the WORKLOADS.md benchmarks (table + JSON)", BenchMain);

}  // namespace kvtier::cli
