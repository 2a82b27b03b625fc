// `kvtier bench`: runs the workloads of docs/WORKLOADS.md through the public C API (what users
// get), prints a table (figure, hardware limit, ratio, seed baseline, ratio) and writes
// JSON. Before it writes anything it says what it will write and checks the free space
// (bench_plan.h); SIGINT or SIGTERM stops the running workload (sequences cancelled, context
// freed), keeps the results so far and exits with 128 + the signal number. Runs once per
// process; not thread-safe.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench_context.h"
#include "bench_grammar.h"
#include "bench_pass.h"
#include "bench_plan.h"
#include "bench_session.h"
#include "bench_tiers.h"
#include "command.h"
#include "command_line.h"
#include "interrupt.h"
#include "bench_w6c.h"
#include "bench_w7.h"
#include "bench_w8.h"
#include "bench_w9.h"
#include "progress_bar.h"

namespace kvtier::cli {
namespace {

using bench::json;

constexpr char kBenchDescription[] =
    "Runs the workloads of docs/WORKLOADS.md through the C API and prints figure / limit / baseline.\n"
    "Before writing anything it lists what it will write (checkpoints, disk-tier files) and checks\n"
    "the free space. W6 leaves TIER_DIR/w6.kvdisk behind; `--workload W6b` in a NEW process then\n"
    "runs the same prompts over that file (disk hits after a restart), against the same prompt\n"
    "recomputed in a context without the disk tier. W6b is not part of `all`.\n"
    "W6c (not part of `all`): W6's prefix found by a new context on the local disk and, with\n"
    "--remote-kv-url, in Redis, against recomputing it, with the load-or-recompute plan and without.\n"
    "C<N> (e.g. C0,C32,C96; not part of `all`): creating a context with an N GiB host tier and an\n"
    "8 GiB disk tier in TIER_DIR, on --backend (cpu: --small-model).\n"
    "W7: the cpu backend against llama.cpp (node-llama-cpp) on the same F16 and Q8_0 GGUF files, written\n"
    "once into --w7-cache: prefill at 2 threads, decode of 1 and 8 sequences at each engine's best of 1\n"
    "and 2 threads; without node the entry says llama.cpp was not measured.\n"
    "W8 (not part of `all`): one 131,072-token prompt + 64 tokens under a 24 GiB cap, most of its KV\n"
    "on the host tier and streamed every step; decode against the host link's measured bound.\n"
    "W9, W9a, W9b (not part of `all`): a saturated server, no cap: 512 requests of 1,000 prompt and\n"
    "1,000 output tokens (W9), 1,024 of 128 / 128 (W9a), 256 of 2,048 / 2,048 (W9b), submitted at\n"
    "once; output tokens/s from first add to last finish, beside TensorRT-LLM's H200 fp8 figures.";

const std::vector<std::string> kWorkloads = {"W1", "W2", "W3", "W4", "W5", "W6",  "W6b",
                                             "W6c", "W7", "W8", "W9", "W9a", "W9b"};

struct BenchFlags {
  std::vector<std::string> workloads;  // as given: comma-separated lists
  std::string model, small_model, make_model, json, ceilings, lib_kernels, baseline, commit, tier_dir, remote_kv_url;
  int remote_kv_connections = 0;
  std::string backend = "cuda";
  std::string weight_dtype = "auto", kv_dtype = "auto";
  double time_limit = 150, tier_time_limit = 0;
  double gpu_hour_usd = bench::kDefaultGpuHourUsd;
  bool sampler_controls = false;
  // Structured output: W2 again with this schema; or the grammar mask timing alone.
  std::string json_schema;
  bool grammar_mask = false;
  bench::GrammarMaskOptions mask;
  std::vector<std::string> pass_specs;  // --pass, in order (bench_pass.h)
  std::vector<std::string> w7_models;
  std::string w7_cache, llama_oracle = KVTIER_SOURCE_LLAMA_ORACLE_DIR;
  int w7_prefill = 512, w7_decode = 128;
};

void AddFlags(CommandLine* cl, BenchFlags* f) {
  CommandLine::Normalized(
      cl->AddStrings("--workload", &f->workloads,
                     "comma-separated W1..W9, W6b, W6c, W9a, W9b, C<N> or all (repeatable; default all)",
                     "LIST"),
      [](absl::string_view text) -> absl::StatusOr<std::string> {
        for (absl::string_view id : absl::StrSplit(text, ',')) {
          if (id != "all" && std::find(kWorkloads.begin(), kWorkloads.end(), id) == kWorkloads.end() &&
              !bench::ContextCreateHostGib(std::string(id))) {
            return absl::InvalidArgumentError(
                absl::StrCat("unknown workload '", id, "' (W1..W9, W6b, W6c, W9a, W9b, C<N>, all)"));
          }
        }
        return std::string(text);
      });
  cl->AddString("--model", &f->model,
                "Llama-3-8B-shape checkpoint directory or GGUF file for W1-W6 (kvtier mkmodel --preset llama3-8b)",
                "DIR|FILE");
  cl->AddString("--small-model", &f->small_model,
                "C<N>'s model on --backend cpu, a directory or GGUF file (kvtier mkmodel --preset small-llama)",
                "DIR|FILE");
  cl->AddStrings("--w7-model", &f->w7_models,
                 "W7's models, each a checkpoint directory or GGUF file (repeatable; default: the demo model and a "
                 "random llama3.2-1b)",
                 "DIR|FILE");
  cl->AddString("--w7-cache", &f->w7_cache,
                "where W7 writes its models' F16 and Q8_0 GGUF files, reused when present (default: --make-model "
                "DIR/w7)",
                "DIR");
  cl->AddString("--llama-oracle", &f->llama_oracle,
                "W7's llama.cpp: the directory of llama_speed.mjs with node-llama-cpp in its node_modules "
                "(scripts/setup-oracles.sh; default: the source tree's tests/gguf/oracle)",
                "DIR");
  cl->AddInt("--w7-prefill", &f->w7_prefill, 1, 1 << 20, "W7's prefill prompt tokens (default 512)", "N");
  cl->AddInt("--w7-decode", &f->w7_decode, 1, 1 << 20, "W7's tokens generated per sequence (default 128)", "N");
  cl->AddString("--make-model", &f->make_model,
                "write the random checkpoints --model / --small-model do not give into DIR/llama3-8b and "
                "DIR/small-llama (reused when complete)",
                "DIR");
  cl->AddString("--tier-dir", &f->tier_dir, "where W5/W6/W6b/W6c/C<N> put their disk-tier files (needed by them)", "DIR");
  cl->AddString("--remote-kv-url", &f->remote_kv_url,
                "W6c: the Redis server its remote-tier phases use (redis://host:port; without it they are skipped)",
                "URL");
  cl->AddInt("--remote-kv-connections", &f->remote_kv_connections, 0, 64,
             "W6c: its Redis phases' remote_kv_connections (default 0: the library's default)", "N");
  cl->AddString("--json", &f->json, "write the results JSON (also after every workload)", "FILE");
  cl->AddString("--ceilings", &f->ceilings, "output of ceilings.py (its RESULT line): limits from measured ceilings",
                "FILE");
  cl->AddString("--lib-kernels", &f->lib_kernels,
                "output of lib_kernels.py (its RESULT line): the fp8 GEMM ceiling that bounds the fp8 passes' "
                "projections (without it they use the bf16 GEMM ceiling)",
                "FILE");
  cl->AddString("--baseline", &f->baseline, "output of hf_baseline.py runs (RESULT lines): seed baseline figures",
                "FILE");
  cl->AddString("--commit", &f->commit, "git commit to record (default: git rev-parse HEAD)", "SHA");
  cl->AddReal("--time-limit", &f->time_limit, 0, 1e6, "per-workload wall-clock cap in seconds (default 150)", true,
              "S");
  cl->AddChoice("--backend", &f->backend, {"auto", "cpu", "cuda"}, "GPU workloads' backend (default cuda)");
  cl->AddChoice("--weight-dtype", &f->weight_dtype, {"auto", "bf16", "fp16", "fp8"},
                "GPU workloads' weight format (option weight_dtype; fp8: W1/W2 targets 450 / 14,000 tok/s and limits "
                "from fp8 projection bytes)");
  cl->AddChoice("--kv-dtype", &f->kv_dtype, {"auto", "bf16", "fp16", "fp8"},
                "GPU workloads' KV cache format (option kv_dtype)");
  cl->AddReal("--gpu-hour-usd", &f->gpu_hour_usd, 0, 1e6,
              absl::StrCat("GPU price in USD per hour for the cost column: USD per million output tokens at each GPU "
                           "output-rate figure (default ", bench::kDefaultGpuHourUsd, ", an assumed on-demand H200 price)"),
              true, "USD");
  cl->AddReal("--tier-time-limit", &f->tier_time_limit, 0, 1e6, "cap for W5/W6/W6b/C<N> (default: --time-limit)",
              true, "S");
  cl->AddSwitch("--sampler-controls", &f->sampler_controls,
                "W2 runs again right after with log-probabilities (5 alternatives), every penalty and a logit "
                "bias on (W2s: target >= 90% of the plain W2 decode tok/s; JSON workloads.W2_sampler_controls)");
  cl->AddString("--json-schema", &f->json_schema,
                "W2 runs again with this JSON schema on every sequence (W2j) and reports constrained / "
                "unconstrained decode; the model needs a tokenizer (a directory without tokenizer.json gets the first --tokenizer's)",
                "FILE");
  CommandLine::Normalized(
      cl->AddStrings("--pass", &f->pass_specs,
                     "after the workloads, run WORKLOADS again in this process with other formats or checkpoint "
                     "(repeatable; its JSON beside --json, with -NAME)",
                     "NAME:WORKLOADS[:weight=DTYPE][:kv=DTYPE][:model=DIR]"),
      [](absl::string_view text) -> absl::StatusOr<std::string> {
        absl::StatusOr<bench::BenchPass> pass = bench::ParseBenchPass(std::string(text));
        if (!pass.ok()) return pass.status();
        return std::string(text);
      });
  cl->AddSwitch("--grammar-mask", &f->grammar_mask,
                "instead of the workloads: grammar compile and mask times per --tokenizer over --schemas and --grammars");
  cl->AddStrings("--tokenizer", &f->mask.tokenizers, "tokenizer.json, its directory or a .gguf file (repeatable)", "PATH");
  cl->AddString("--schemas", &f->mask.schemas, "JSON schemas (*.json) for --grammar-mask (default tests/grammar/schemas)",
                "DIR");
  cl->AddString("--grammars", &f->mask.grammars,
                "GBNF grammars (*.gbnf) for --grammar-mask (default tests/grammar/grammars)", "DIR");
  cl->AddInt("--grammar-steps", &f->mask.steps, 1, 1000000, "masks timed per schema or grammar (default 64)", "N");
}

// The selected workloads in run order: W7 first (its RSS is read before the big checkpoint
// is mapped), then as given; "all" or nothing selects W1-W7.
std::vector<std::string> Selected(const BenchFlags& f) {
  std::vector<std::string> out;
  for (const std::string& list : f.workloads) {
    for (absl::string_view id : absl::StrSplit(list, ',')) {
      if (id == "all") {
        for (const char* w : {"W1", "W2", "W3", "W4", "W5", "W6", "W7"}) out.push_back(w);
      } else {
        out.emplace_back(id);
      }
    }
  }
  if (out.empty()) out = {"W1", "W2", "W3", "W4", "W5", "W6", "W7"};
  std::vector<std::string> unique;
  for (const std::string& id : out) {
    if (std::find(unique.begin(), unique.end(), id) == unique.end()) unique.push_back(id);
  }
  std::stable_sort(unique.begin(), unique.end(),
                   [](const std::string& a, const std::string& b) { return (a == "W7") > (b == "W7"); });
  return unique;
}

void ReadLimitsAndBaseline(const BenchFlags& f, bench::BenchSession* s) {
  json ceilings_json, lib_kernels_json;
  if (!f.ceilings.empty()) {
    auto lines = bench::ReadResultLines(f.ceilings);
    if (!lines.empty()) {
      ceilings_json = lines.back();
      bench::ApplyCeilingsResult(ceilings_json, f.ceilings, &s->ceilings);
    }
  }
  if (!f.lib_kernels.empty()) {
    auto lines = bench::ReadResultLines(f.lib_kernels);
    for (auto it = lines.rbegin(); it != lines.rend(); ++it) {  // the RESULT line is the last object
      if (bench::ApplyLibKernelsResult(*it, f.lib_kernels, &s->ceilings)) {
        lib_kernels_json = *it;
        break;
      }
    }
  }
  if (!f.baseline.empty()) {
    for (json& j : bench::ReadResultLines(f.baseline)) {
      if (j.contains("scenario")) s->baseline[j["scenario"].get<std::string>()] = j;
    }
  }
  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  s->out["date"] = date;
  s->out["machine"] = {
      {"gpu", RunCommandOutput("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null")},
      {"driver", RunCommandOutput("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null")},
      {"cpus", RunCommandOutput("nproc 2>/dev/null")}};
  s->out["git_commit"] = f.commit.empty() ? RunCommandOutput("git rev-parse HEAD 2>/dev/null") : f.commit;
  const double fp8_tflops = s->ceilings.fp8_gemm_flops / 1e12;
  s->out["ceilings"] = {{"source", s->ceilings.source},
                        {"hbm_TBps", s->ceilings.hbm_Bps / 1e12},
                        {"gemm_TFLOPs", s->ceilings.gemm_flops / 1e12},
                        {"fp8_gemm_TFLOPs", std::isnan(fp8_tflops) ? json(nullptr) : json(fp8_tflops)},
                        {"fp8_gemm_source", s->ceilings.fp8_source},
                        {"raw", ceilings_json},
                        {"lib_kernels_raw", lib_kernels_json}};
  s->out["baseline_raw"] = s->baseline;
  s->out["workloads"] = json::object();
}

// Prints the table and adds it, with the missed targets, to the results JSON.
void Tabulate(bench::BenchSession* s) {
  using bench::Fmt;
  using bench::Row;
  const std::vector<Row>& rows = s->rows;
  std::printf("\n%-4s %-36s %12s %12s %8s %12s %10s %10s %9s  %s\n", "id", "figure", "value", "hw limit", "of limit",
              "seed base", "x base", "target", "$/M out", "note");
  s->out["gpu_hour_usd"] = s->gpu_hour_usd;
  json table = json::array(), missed = json::array();
  for (const Row& row : rows) {
    // Times: limit / value (1 = at the hardware limit). Memory against a cap: the share of
    // the cap used (value / cap), so "of limit" reads the same way as the figure.
    const double of_limit = row.higher_is_better || row.unit == "MiB" ? row.value / row.limit
                                                                      : row.limit / row.value;
    const double x_base = row.higher_is_better ? row.value / row.baseline : row.baseline / row.value;
    const double cost = s->backend == "cpu" ? NAN : bench::UsdPerMillionOutputTokens(row, s->gpu_hour_usd);
    std::printf("%-4s %-36s %12s %12s %8s %12s %10s %10s %9s  %s\n", row.workload.c_str(), row.figure.c_str(),
                Fmt(row.value, row.value < 10 ? 3 : 1).c_str(), Fmt(row.limit, row.limit < 10 ? 3 : 1).c_str(),
                Fmt(of_limit, 2).c_str(), Fmt(row.baseline, 1).c_str(), Fmt(x_base, 1).c_str(), Fmt(row.target, 1).c_str(),
                Fmt(cost, 3).c_str(), row.note.c_str());
    auto num = [](double v) { return std::isnan(v) || std::isinf(v) ? json(nullptr) : json(v); };
    json t = {{"workload", row.workload}, {"figure", row.figure}, {"unit", row.unit}, {"value", num(row.value)},
              {"hardware_limit", num(row.limit)}, {"ratio_to_limit", num(of_limit)}, {"seed_baseline", num(row.baseline)},
              {"ratio_to_baseline", num(x_base)}, {"target", num(row.target)}, {"note", row.note},
              {"usd_per_million_output_tokens", num(cost)}};
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
  s->out["table"] = table;
  s->out["missed_targets"] = missed;
}

void WriteJson(const std::string& path, const json& out) {
  if (path.empty()) return;
  std::ofstream f(path);
  f << out.dump(2) << "\n";
}

// The checkpoint the GPU workloads share, loaded on first use.
struct LoadedModel {
  std::string dir;
  kvt_model* model = nullptr;
};

// Runs `ids` in order into `s`, writing its JSON to json_path after each workload.
void RunWorkloads(const std::vector<std::string>& ids, const bench::BenchPlan& plan, const BenchFlags& f,
                  bench::Clock::time_point bench_start, LoadedModel* loaded, bench::BenchSession* s,
                  const std::string& json_path) {
  for (const std::string& id : ids) {
    WriteJson(json_path, s->out);  // partial results after every workload, so a killed run leaves them
    if (InterruptSignal() != 0) break;
    std::fprintf(stderr, "bench: %s ... (%.0f s)\n", id.c_str(), bench::Seconds(bench_start, bench::Clock::now()));
    if (id == "W7") {
      bench::RunW7({.sources = plan.w7_sources, .cache_dir = plan.w7_cache_dir, .llama_oracle_dir = f.llama_oracle,
                    .prefill = f.w7_prefill, .decode = f.w7_decode},
                   s);
      continue;
    }
    const std::optional<int64_t> host_gib = bench::ContextCreateHostGib(id);
    if (host_gib && f.backend == "cpu") {  // the small model: the 8B one would not fit a CPU run
      kvt_model* small = nullptr;
      char err[1024];
      if (kvt_model_load(plan.small_model_dir.c_str(), &small, err, sizeof err) != KVT_OK) {
        s->out["workloads"][id] = {{"ok", false}, {"error", std::string("model load failed: ") + err}};
        continue;
      }
      bench::RunContextCreate(small, id, *host_gib, f.tier_dir, s);
      kvt_model_free(small);
      continue;
    }
    if (loaded->model == nullptr) {
      char err[1024];
      const auto t0 = bench::Clock::now();
      ProgressBar loading("bench: loading " + loaded->dir);
      loading.CancelWhen([] { return InterruptSignal() != 0; });  // a signal stops the load too
      const kvt_status status = kvt_model_load_with_progress(loaded->dir.c_str(), ProgressBar::Callback, &loading,
                                                             &loaded->model, err, sizeof err);
      loading.Finish();
      if (status != KVT_OK) {
        std::fprintf(stderr, "bench: load %s: %s\n", loaded->dir.c_str(), err);
        s->out["workloads"][id] = {{"ok", false}, {"error", std::string("model load failed: ") + err}};
        continue;
      }
      s->out["model_load_s"] = bench::Seconds(t0, bench::Clock::now());
      s->out["model_dir"] = loaded->dir;
    }
    if (!s->out.contains("model_shape")) s->SetModel(loaded->model);
    if (host_gib) {
      bench::RunContextCreate(loaded->model, id, *host_gib, f.tier_dir, s);
    } else if (id == "W5") {
      bench::RunW5(loaded->model, s->GpuSpec(id, 256, 1024, 256), f.tier_dir, s->tier_time_limit, s->sampler, s->Recorder(),
                   &s->out, &s->rows);
    } else if (id == "W6c") {
      bench::RunW6c(loaded->model, s->GpuSpec(id, 1, 4096 + 128, 4), f.tier_dir, f.remote_kv_url, f.remote_kv_connections,
                    s->tier_time_limit,
                    s->Recorder(), &s->out, &s->rows);
    } else if (id == "W8") {
      bench::RunW8(loaded->model, s);
    } else if (id == "W9" || id == "W9a" || id == "W9b") {
      bench::RunW9(id, loaded->model, s);
    } else if (id == "W6" || id == "W6b") {
      // The batch's 128 x 128 own tokens over the cached prefix: each attends to the 4,096
      // prefix positions and, on average, 64.5 of its own.
      const bench::W6BatchBounds batch{s->PrefillLimitS(128.0 * 128, 4096 + 64.5), s->ModelTarget(0.4)};
      bench::RunW6(loaded->model, id == "W6b", s->GpuSpec(id, 128, 4096 + 128, 64), f.tier_dir, s->tier_time_limit,
                   s->Recorder(), &s->out, &s->rows, batch);
    } else {
      bench::RunGpuWorkload(id, loaded->model, s);
    }
  }
}

int BenchMain(int argc, char** argv) {
  CommandLine cl("bench", kBenchDescription);
  BenchFlags f;
  AddFlags(&cl, &f);
  if (auto status = cl.Parse(argc, argv)) return *status;
  if (f.grammar_mask) {
    f.mask.json = f.json;
    return bench::RunGrammarMaskBench(f.mask);
  }
  const std::vector<std::string> workloads = Selected(f);
  bench::BenchPlanInput input;
  input.workloads = std::set<std::string>(workloads.begin(), workloads.end());
  input.model = f.model;
  input.small_model = f.small_model;
  input.make_model_dir = f.make_model;
  input.tier_dir = f.tier_dir;
  input.backend = f.backend;
  input.w7_models = f.w7_models;
  input.w7_cache = f.w7_cache;
  absl::StatusOr<bench::BenchPlan> plan = bench::PlanBench(input);
  if (!plan.ok()) {
    if (plan.status().code() == absl::StatusCode::kInvalidArgument) return cl.UsageError(plan.status().message());
    return cl.Fail(kExitFailure, plan.status().message());
  }
  if (absl::Status s = bench::CheckFreeSpace(*plan, stderr); !s.ok()) return cl.Fail(kExitFailure, s.message());
  if (absl::Status s = bench::WritePlannedCheckpoints(*plan, stderr); !s.ok()) {
    return cl.Fail(kExitFailure, s.message());
  }

  if (!f.json_schema.empty() && !f.mask.tokenizers.empty()) {
    if (absl::Status t = bench::EnsureModelTokenizer(plan->model_dir, f.mask.tokenizers[0]); !t.ok()) {
      return cl.Fail(kExitFailure, t.message());
    }
  }
  bench::BenchSession s;
  s.backend = f.backend;
  s.json_schema_file = f.json_schema;
  s.time_limit = f.time_limit;
  s.gpu_hour_usd = f.gpu_hour_usd;
  s.weight_dtype = f.weight_dtype;
  s.kv_dtype = f.kv_dtype;
  s.out["weight_dtype"] = f.weight_dtype;
  s.out["kv_dtype"] = f.kv_dtype;
  s.sampler_controls = f.sampler_controls;
  s.tier_time_limit = cl.app().count("--tier-time-limit") > 0 ? f.tier_time_limit : f.time_limit;
  ReadLimitsAndBaseline(f, &s);
  GpuMemorySampler sampler;
  if (f.backend != "cpu" && sampler.Start()) s.sampler = &sampler;

  InstallInterruptHandlers();  // from here on a signal stops the running workload cleanly
  const auto bench_start = bench::Clock::now();
  LoadedModel main_model{plan->model_dir, nullptr};
  RunWorkloads(workloads, *plan, f, bench_start, &main_model, &s, f.json);
  // The passes, in the same process: after everything above, as a long-lived service would.
  std::vector<std::string> pass_names;
  for (const std::string& spec : f.pass_specs) {
    if (InterruptSignal() != 0) break;
    const bench::BenchPass pass = *bench::ParseBenchPass(spec);  // checked when the flag was parsed
    pass_names.push_back(pass.name);
    bench::BenchSession ps;
    ps.backend = s.backend;
    ps.time_limit = s.time_limit;
    ps.tier_time_limit = s.tier_time_limit;
    ps.gpu_hour_usd = s.gpu_hour_usd;
    ps.weight_dtype = pass.weight_dtype;
    ps.kv_dtype = pass.kv_dtype;
    ps.sampler = s.sampler;
    ReadLimitsAndBaseline(f, &ps);
    ps.out["weight_dtype"] = pass.weight_dtype;
    ps.out["kv_dtype"] = pass.kv_dtype;
    ps.out["pass"] = pass.name;
    const std::string json_path = bench::PassJsonPath(f.json, pass.name);
    std::fprintf(stderr, "bench: pass %s (%.0f s)\n", pass.name.c_str(), bench::Seconds(bench_start, bench::Clock::now()));
    if (pass.model_dir.empty() || pass.model_dir == main_model.dir) {
      RunWorkloads(pass.workloads, *plan, f, bench_start, &main_model, &ps, json_path);
    } else {
      LoadedModel other{pass.model_dir, nullptr};
      RunWorkloads(pass.workloads, *plan, f, bench_start, &other, &ps, json_path);
      kvt_model_free(other.model);
    }
    Tabulate(&ps);
    WriteJson(json_path, ps.out);
    if (!json_path.empty()) std::fprintf(stderr, "bench: wrote %s\n", json_path.c_str());
  }
  kvt_model_free(main_model.model);
  sampler.Stop();
  const int signal_number = InterruptSignal();
  if (signal_number != 0) s.out["interrupted_by"] = InterruptName(signal_number);
  if (!pass_names.empty()) s.out["passes"] = pass_names;
  // The main table is printed last, so a run's output ends with it.
  Tabulate(&s);
  WriteJson(f.json, s.out);
  if (!f.json.empty()) std::fprintf(stderr, "bench: wrote %s\n", f.json.c_str());
  if (signal_number != 0) {
    return cl.Fail(InterruptExitStatus(signal_number),
                   absl::StrCat("interrupted by ", InterruptName(signal_number),
                                ": the running workload's sequences were cancelled and its context freed"));
  }
  return kExitOk;
}

}  // namespace

KVTIER_REGISTER_COMMAND("bench", "run the docs/WORKLOADS.md benchmarks (table + JSON)", BenchMain);

}  // namespace kvtier::cli
