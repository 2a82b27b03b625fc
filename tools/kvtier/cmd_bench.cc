// `kvtier bench`: runs the workloads of docs/WORKLOADS.md through the public C API (what users
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
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "args.h"
#include "bench_gpu_sampler.h"
#include "bench_grammar_mask.h"
#include "command.h"
#include "cuda_env.h"
#include "kvtier/kvtier.h"
#include "model/random_checkpoint.h"
#include "nlohmann/json.hpp"

namespace kvtier::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr char kUsage[] = R"(usage: kvtier bench [--workload W1,W2,W3,W4,W5,W6,W7|all] [flags]

Runs the workloads of docs/WORKLOADS.md through the C API and prints figure / limit / baseline.
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
  --tier-dir DIR       where W5/W6 put their disk-tier files (default ./bench-tiers)
  --tier-time-limit S  per-workload cap for W5/W6/W6b (default: --time-limit)
W6 leaves DIR/w6.kvdisk behind; `--workload W6b` in a NEW process then runs the same
prompts over that file (disk hits after a restart). W6b is not part of `all`.
  --json-schema FILE   W2 runs a second time with this JSON schema on every sequence (the
                       model directory needs a tokenizer.json; --tokenizer FILE is copied
                       there when it has none) and reports constrained / unconstrained
  --grammar-mask       instead of the workloads: grammar mask timing per --tokenizer over
                       --schemas DIR (*.json, default tests/grammar/schemas) and --grammars
                       DIR (*.gbnf, default tests/grammar/grammars), --grammar-steps N (64)
  --tokenizer PATH     tokenizer.json (or its directory); repeatable
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
  std::vector<std::vector<int32_t>> prompts;   // given prompts (else num_seqs random ones)
  bool warmup = true;                          // one short sequence before timing
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
  int64_t grammar_finished = 0;      // sequences that completed their JSON schema
  json stats;
  int64_t peak_process_mib = 0, peak_device_mib = 0;
};

struct Handles {
  kvt_options* options = nullptr;
  kvt_context* context = nullptr;
  bool owns_context = true;
  kvt_events* events = nullptr;
  std::vector<kvt_request*> requests;
  ~Handles() {
    for (kvt_request* r : requests) kvt_request_free(r);
    kvt_events_free(events);
    if (owns_context) kvt_context_free(context);
    kvt_options_free(options);
  }
};

json ContextStats(kvt_context* context) {
  int32_t len = 0;
  kvt_context_stats_json(context, nullptr, 0, &len);
  std::string text(static_cast<size_t>(len) + 1, '\0');
  kvt_context_stats_json(context, text.data(), len + 1, &len);
  text.resize(static_cast<size_t>(len));
  try {
    return json::parse(text);
  } catch (...) {
    return json();
  }
}

// Runs `w` in a fresh context (created from w.options, freed at the end) or, when
// `existing` is given, in that context (left alive; w.options ignored).
RunResult RunWorkload(kvt_model* model, const WorkloadSpec& w, double time_limit, GpuMemorySampler* sampler,
                      kvt_context* existing = nullptr) {
  RunResult r;
  Handles h;
  char err[2048] = {0};
  if (existing != nullptr) {
    h.context = existing;
    h.owns_context = false;
  }
  kvt_options_create(&h.options);
  if (existing == nullptr && SetCudaOptionsFromEnvironment(h.options) != KVT_OK) {
    r.error = std::string("KVTIER_CUDA_*: ") + kvt_options_errmsg(h.options);
    return r;
  }
  for (const auto& [key, value] : w.options) {
    if (existing != nullptr) break;
    if (kvt_options_set_string(h.options, key.c_str(), value.c_str()) != KVT_OK) {
      r.error = "option " + key + ": " + kvt_options_errmsg(h.options);
      return r;
    }
  }
  if (sampler) sampler->ResetPeaks();
  if (kvt_status s = existing != nullptr ? KVT_OK : kvt_context_create(model, h.options, &h.context, err, sizeof err);
      s != KVT_OK) {
    r.error = std::string("context: ") + kvt_status_string(s) + ": " + err;
    return r;
  }
  const int32_t vocab = kvt_model_vocab_size(model);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> dist(1, vocab - 1);
  // Warm-up: one short sequence (kernels, cuBLAS heuristics, graphs) before timing.
  if (w.warmup) {
    kvt_request* warm = nullptr;
    kvt_request_create(&warm);
    std::vector<int32_t> p(16);
    for (auto& t : p) t = dist(rng);
    kvt_request_set_prompt_tokens(warm, p.data(), 16);
    kvt_request_set_max_new_tokens(warm, 4);
    kvt_request_set_ignore_eos(warm, 1);
    // With a schema, the warm-up compiles it too (later adds hit the cache).
    if (!w.json_schema.empty() && kvt_request_set_json_schema(warm, w.json_schema.c_str()) != KVT_OK) {
      r.error = std::string("json schema: ") + kvt_request_errmsg(warm);
      kvt_request_free(warm);
      return r;
    }
    int32_t buf[8], len = 0;
    kvt_status s = kvt_generate(h.context, warm, buf, 8, &len, nullptr);
    kvt_request_free(warm);
    if (s != KVT_OK) {
      r.error = std::string("warm-up: ") + kvt_status_string(s) + ": " + kvt_context_errmsg(h.context);
      return r;
    }
  }
  std::vector<std::vector<int32_t>> prompts = w.prompts;
  if (prompts.empty()) {
    prompts.assign(w.num_seqs, std::vector<int32_t>(w.prompt));
    for (auto& p : prompts)
      for (auto& t : p) t = dist(rng);
  }
  for (int i = 0; i < w.num_seqs; ++i) {
    kvt_request* req = nullptr;
    kvt_request_create(&req);
    h.requests.push_back(req);
    kvt_request_set_prompt_tokens(req, prompts[i].data(), static_cast<int32_t>(prompts[i].size()));
    kvt_request_set_max_new_tokens(req, w.gen);
    kvt_request_set_ignore_eos(req, 1);
    if (!w.json_schema.empty()) kvt_request_set_json_schema(req, w.json_schema.c_str());
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
      if (reason == KVT_FINISH_REASON_GRAMMAR) ++r.grammar_finished;
      if (token == KVT_NO_TOKEN) continue;
      ++r.generated;
      if (have_all_first) ++r.decode_tokens;
      if (produced[seq]++ == 0) {
        r.mean_ttft_s += Seconds(t0, now) / w.num_seqs;
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
  r.stats = ContextStats(h.context);
  if (sampler) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // one more sample
    r.peak_process_mib = sampler->peak_process_mib();
    r.peak_device_mib = sampler->peak_device_mib();
  }
  if (errors > 0) {
    r.error = std::to_string(errors) + " sequences ended in error/cancel";
    return r;
  }
  // A constrained sequence may complete its schema before w.gen tokens.
  r.ok = r.generated == static_cast<int64_t>(w.num_seqs) * w.gen ||
         (!w.json_schema.empty() && r.generated > 0);
  if (!r.ok) r.error = "generated " + std::to_string(r.generated) + " tokens, expected " + std::to_string(w.num_seqs * w.gen);
  return r;
}

// Hardware limits derived from the ceilings (docs/WORKLOADS.md).
struct Ceilings {
  double hbm_Bps = 4.17e12;
  double gemm_flops = 757e12;
  std::string source = "docs/WORKLOADS.md (2026-11-29)";
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

double JsonNum(const json& j, std::initializer_list<const char*> path) {
  const json* at = &j;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return NAN;
    at = &(*at)[key];
  }
  return at->is_number() ? at->get<double>() : NAN;
}

template <typename Record>
void RunW5(kvt_model* model, WorkloadSpec w, const std::string& tier_dir, double time_limit, GpuMemorySampler* sampler,
           const Record& record, json* out, std::vector<Row>* rows) {
  const std::string id = "W5";
  std::filesystem::create_directories(tier_dir);
  const std::string disk = tier_dir + "/w5.kvdisk";
  std::filesystem::remove(disk);
  w.options["gpu_kv_bytes"] = "4GiB";
  w.options["host_kv_bytes"] = "16GiB";
  w.options["disk_kv_bytes"] = "32GiB";
  w.options["disk_path"] = disk;
  w.options["preemption"] = "auto";
  RunResult r = RunWorkload(model, w, time_limit, sampler);
  std::error_code ec;
  std::filesystem::remove(disk, ec);  // 32 GiB: make room for W6
  std::filesystem::remove(disk + ".index", ec);
  json j = record(id, w, r);
  const double tps = r.ok ? r.generated / r.wall_s : NAN;
  const json& st = r.stats;
  const double out_gb = JsonNum(st, {"swap_out_bytes"}) / 1e9, in_gb = JsonNum(st, {"swap_in_bytes"}) / 1e9;
  const double pre = JsonNum(st, {"backend_copies", "prefetch_copy_seconds"});
  const double stall = JsonNum(st, {"backend_copies", "prefetch_stall_seconds"});
  const double sync = JsonNum(st, {"backend_copies", "sync_copy_seconds"});
  auto or_zero = [](double v) { return std::isnan(v) ? 0.0 : v; };  // stats of older builds
  const double async_out = or_zero(JsonNum(st, {"backend_copies", "async_out_copy_seconds"}));
  const double async_wait = or_zero(JsonNum(st, {"backend_copies", "async_out_wait_seconds"}));
  // Copy-engine time of every host<->device tier copy (CUDA events on the copy stream):
  // prefetches (swap-in), asynchronous device -> host copies (swap-out, write-back of cached
  // blocks) and the remaining synchronous copies. Exposed = what a stream or the host waited
  // for: the compute stream's stalls on prefetches + the host's waits for async copies (a
  // device block or host slot needed before its copy landed; WaitForCopies, host clock) +
  // every synchronous copy in full. hidden = 1 - exposed / copy-engine time.
  const double copy_total = pre + sync + async_out;
  const double exposed = stall + async_wait + sync;
  const double hidden_all = copy_total > 0 ? 1.0 - exposed / copy_total : NAN;
  const double hidden_prefetch = pre > 0 ? 1.0 - stall / pre : NAN;
  const double hidden_async_out = async_out > 0 ? 1.0 - async_wait / async_out : NAN;
  j["completed"] = r.ok;
  j["finished_sequences"] = JsonNum(st, {"sequences", "finished"});
  j["failed_sequences"] = JsonNum(st, {"sequences", "failed"});
  j["output_tok_s"] = tps;
  j["swap_out_GB"] = out_gb;
  j["swap_in_GB"] = in_gb;
  j["recomputes"] = JsonNum(st, {"recomputes"});
  j["copy_hidden_share"] = hidden_all;
  j["copy_hidden_share_definition"] =
      "1 - (compute-stream stall s on prefetches + host wait s for async device->host copies + synchronous "
      "tier copy s) / (prefetch + async device->host + synchronous copy-engine s); copy-engine times and the "
      "prefetch stall from CUDA events, the host wait from the host clock";
  j["prefetch_hidden_share"] = hidden_prefetch;
  j["async_out_hidden_share"] = hidden_async_out;
  j["async_out_GB"] = or_zero(JsonNum(st, {"backend_copies", "async_out_bytes"})) / 1e9;
  j["blocks_written_back"] = JsonNum(st, {"blocks_written_back"});
  j["evictions_copied"] = JsonNum(st, {"evictions_copied"});
  j["host_copy_wait_seconds"] = JsonNum(st, {"time", "copy_wait_seconds"});
  (*out)["workloads"][id] = j;
  const std::string err = r.ok ? "" : r.error;
  rows->push_back({id, "completes (256 seqs, 0 errors)", "", r.ok ? 1.0 : 0.0, 1.0, NAN, 1.0, true, err});
  rows->push_back({id, "output tok/s (GPU KV 4 GiB)", "tok/s", tps, NAN, NAN, NAN, true,
                   "finished " + Fmt(JsonNum(st, {"sequences", "finished"}), 0)});
  rows->push_back({id, "swap out GB", "GB", out_gb, NAN, NAN, NAN, true,
                   "swaps_out " + Fmt(JsonNum(st, {"swaps_out"}), 0) + ", tiers peak host " +
                       Fmt(JsonNum(st, {"tiers", "host", "peak_bytes"}) / 1e9, 1) + " GB, disk " +
                       Fmt(JsonNum(st, {"tiers", "disk", "peak_bytes"}) / 1e9, 1) + " GB"});
  rows->push_back({id, "swap in GB", "GB", in_gb, NAN, NAN, NAN, true,
                   "swaps_in " + Fmt(JsonNum(st, {"swaps_in"}), 0) + ", prefetched " +
                       Fmt(JsonNum(st, {"swap_prefetches"}), 0)});
  rows->push_back({id, "recomputes", "", JsonNum(st, {"recomputes"}), NAN, NAN, NAN, false,
                   "preemptions " + Fmt(JsonNum(st, {"preemptions"}), 0)});
  rows->push_back({id, "copy time hidden (all tier copies)", "", hidden_all, 1.0, NAN, 0.7, true,
                   "copy engine " + Fmt(copy_total, 2) + " s (prefetch " + Fmt(pre, 2) + ", async out " +
                       Fmt(async_out, 2) + ", sync " + Fmt(sync, 2) + "), exposed " + Fmt(exposed, 3) +
                       " s (prefetch stall " + Fmt(stall, 3) + ", async wait " + Fmt(async_wait, 3) + ")"});
  rows->push_back({id, "copy time hidden (swap-in prefetches)", "", hidden_prefetch, 1.0, NAN, NAN, true, ""});
  rows->push_back({id, "copy time hidden (async swap-out / write-back)", "", hidden_async_out, 1.0, NAN, NAN, true,
                   "written back " + Fmt(JsonNum(st, {"blocks_written_back"}), 0) + " blocks, evictions copied " +
                       Fmt(JsonNum(st, {"evictions_copied"}), 0)});
}

// W6: 128 sequences sharing a 4096-token prefix + 128 own tokens. Phases in one context:
// (a) one sequence with a prefix never seen (recompute), (b) one sequence that computes
// the shared prefix, (c) one more sequence over it (cached), (d) all 128 at once. The
// context is freed (its cache flushed to the disk file). W6b (a new process) runs (c) and
// (d) again in a new context over the same file.
template <typename Record>
void RunW6(kvt_model* model, bool restart, WorkloadSpec w, const std::string& tier_dir, double time_limit,
           const Record& record, json* out, std::vector<Row>* rows) {
  const std::string id = restart ? "W6b" : "W6";
  std::filesystem::create_directories(tier_dir);
  const std::string disk = tier_dir + "/w6.kvdisk";
  if (!restart) {
    std::error_code ec;
    std::filesystem::remove(disk, ec);
    std::filesystem::remove(disk + ".index", ec);
  }
  w.options["gpu_kv_bytes"] = "8GiB";
  w.options["host_kv_bytes"] = "8GiB";
  w.options["disk_kv_bytes"] = "16GiB";
  w.options["disk_path"] = disk;
  w.options["preemption"] = "auto";
  const int kPrefix = 4096, kOwn = 128;
  const int32_t vocab = kvt_model_vocab_size(model);
  std::mt19937 rng(4096);  // same prompts in W6 and W6b
  std::uniform_int_distribution<int32_t> dist(1, vocab - 1);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> v(n);
    for (auto& t : v) t = dist(rng);
    return v;
  };
  const std::vector<int32_t> prefix = random_tokens(kPrefix);
  auto with_prefix = [&](const std::vector<int32_t>& p) {
    std::vector<int32_t> v = p;
    auto own = random_tokens(kOwn);
    v.insert(v.end(), own.begin(), own.end());
    return v;
  };
  std::vector<std::vector<int32_t>> batch_prompts;
  for (int i = 0; i < 128; ++i) batch_prompts.push_back(with_prefix(prefix));
  const std::vector<int32_t> first = with_prefix(prefix), second = with_prefix(prefix);
  const std::vector<int32_t> unseen = with_prefix(random_tokens(kPrefix));

  json j = {{"options", w.options}, {"prefix_tokens", kPrefix}, {"own_tokens", kOwn}, {"gen", w.gen}};
  auto fail = [&](const std::string& what) {
    j["ok"] = false;
    j["error"] = what;
    (*out)["workloads"][id] = j;
    rows->push_back({id, "failed", "", NAN, NAN, NAN, NAN, true, what});
  };
  kvt_options* options = nullptr;
  kvt_options_create(&options);
  if (SetCudaOptionsFromEnvironment(options) != KVT_OK) {
    const std::string what = std::string("KVTIER_CUDA_*: ") + kvt_options_errmsg(options);
    kvt_options_free(options);
    return fail(what);
  }
  for (const auto& [key, value] : w.options) kvt_options_set_string(options, key.c_str(), value.c_str());
  kvt_context* ctx = nullptr;
  char err[2048] = {0};
  const auto t_create = Clock::now();
  kvt_status cs = kvt_context_create(model, options, &ctx, err, sizeof err);
  kvt_options_free(options);
  if (cs != KVT_OK) return fail(std::string("context: ") + err);
  j["context_create_s"] = Seconds(t_create, Clock::now());
  auto phase = [&](const char* name, std::vector<std::vector<int32_t>> prompts, bool warm) -> RunResult {
    WorkloadSpec p = w;
    p.num_seqs = static_cast<int>(prompts.size());
    p.prompts = std::move(prompts);
    p.warmup = warm;
    const json before = ContextStats(ctx);
    RunResult r = RunWorkload(model, p, time_limit, nullptr, ctx);
    json pj = record(id, p, r);
    pj["mean_ttft_s"] = r.mean_ttft_s;
    pj.erase("options");
    for (const char* tier : {"gpu", "host", "disk"}) {
      pj["prefix_hit_blocks"][tier] = JsonNum(r.stats, {"prefix_hits", tier}) - JsonNum(before, {"prefix_hits", tier});
    }
    pj["prefix_hit_tokens"] = JsonNum(r.stats, {"prefix_hit_tokens"}) - JsonNum(before, {"prefix_hit_tokens"});
    pj["prompt_tokens_computed"] =
        JsonNum(r.stats, {"prompt_tokens_computed"}) - JsonNum(before, {"prompt_tokens_computed"});
    j["phases"][name] = pj;
    return r;
  };
  RunResult unseen_r, cold_r;
  if (!restart) {
    unseen_r = phase("unseen_prefix_1seq", {unseen}, true);
    cold_r = phase("first_over_prefix_1seq", {first}, false);
  }
  RunResult cached_r = phase(restart ? "after_restart_1seq" : "cached_prefix_1seq", {second}, restart);
  RunResult batch_r = phase("batch_128", batch_prompts, false);
  const json final_stats = ContextStats(ctx);
  j["stats"] = final_stats;
  const auto t_free = Clock::now();
  kvt_context_free(ctx);  // flushes the cached blocks to the disk file
  j["context_free_s"] = Seconds(t_free, Clock::now());
  const bool ok = cached_r.ok && batch_r.ok && (restart || (unseen_r.ok && cold_r.ok));
  j["ok"] = ok;
  std::string err_text;
  for (const RunResult* r : {&unseen_r, &cold_r, &cached_r, &batch_r}) {
    if (!r->error.empty()) err_text += r->error + "; ";
  }
  j["error"] = err_text;
  // Hit rates over the prompt's full blocks (prefix + own; own blocks never hit).
  const double block_tokens = JsonNum(final_stats, {"block_tokens"});
  const double blocks_per_prompt = std::floor((kPrefix + kOwn) / block_tokens);
  const json& bp = j["phases"]["batch_128"];
  const json& cp = j["phases"][restart ? "after_restart_1seq" : "cached_prefix_1seq"];
  for (const char* tier : {"gpu", "host", "disk"}) {
    j["batch_hit_rate"][tier] = bp["prefix_hit_blocks"][tier].get<double>() / (128 * blocks_per_prompt);
    j["single_hit_rate"][tier] = cp["prefix_hit_blocks"][tier].get<double>() / blocks_per_prompt;
  }
  j["ttft_cached_1seq_s"] = cached_r.ttft_s;
  j["batch_mean_ttft_s"] = batch_r.mean_ttft_s;
  j["batch_all_first_token_s"] = batch_r.all_first_s;
  j["batch_output_tok_s"] = batch_r.ok ? batch_r.generated / batch_r.wall_s : NAN;
  if (!restart) {
    j["ttft_unseen_1seq_s"] = unseen_r.ttft_s;
    j["ttft_speedup_cached_vs_recompute"] = cached_r.ttft_s > 0 ? unseen_r.ttft_s / cached_r.ttft_s : NAN;
  }
  (*out)["workloads"][id] = j;
  const std::string note = ok ? "" : err_text;
  auto hit_note = [&](const json& rates) {
    return "gpu " + Fmt(rates["gpu"].get<double>(), 3) + ", host " + Fmt(rates["host"].get<double>(), 3) + ", disk " +
           Fmt(rates["disk"].get<double>(), 3);
  };
  if (!restart) {
    const double speedup = j["ttft_speedup_cached_vs_recompute"].get<double>();
    rows->push_back({id, "TTFT 1 seq, prefix recomputed s", "s", unseen_r.ttft_s, NAN, NAN, NAN, false, note});
    rows->push_back({id, "TTFT 1 seq, prefix cached s", "s", cached_r.ttft_s, NAN, NAN, NAN, false,
                     "hit rate " + hit_note(j["single_hit_rate"])});
    rows->push_back({id, "TTFT speedup cached vs recompute", "x", speedup, NAN, NAN, 10.0, true, ""});
  } else {
    rows->push_back({id, "TTFT 1 seq after restart s", "s", cached_r.ttft_s, NAN, NAN, NAN, false,
                     "hit rate " + hit_note(j["single_hit_rate"])});
    rows->push_back({id, "disk hit blocks after restart (1 seq)", "blocks", cp["prefix_hit_blocks"]["disk"].get<double>(),
                     NAN, NAN, 1.0, true, "of " + Fmt(blocks_per_prompt, 0) + " full prompt blocks"});
  }
  rows->push_back({id, "batch 128: mean TTFT s", "s", batch_r.mean_ttft_s, NAN, NAN, NAN, false,
                   "hit rate " + hit_note(j["batch_hit_rate"])});
  rows->push_back({id, "batch 128: output tok/s", "tok/s", j["batch_output_tok_s"].get<double>(), NAN, NAN, NAN, true,
                   "all first tokens at " + Fmt(batch_r.all_first_s, 2) + " s"});
}

int BenchMain(int argc, char** argv) {
  auto args = Args::Parse(argc, argv,
                          {"workload", "model", "model-cache", "small-model", "json", "ceilings", "baseline",
                           "commit", "time-limit", "backend", "tier-dir", "tier-time-limit", "json-schema",
                           "tokenizer", "schemas", "grammars", "grammar-steps"},
                          {"help", "grammar-mask"});
  if (!args.ok()) {
    std::fprintf(stderr, "kvtier bench: %s\n\n%s", std::string(args.status().message()).c_str(), kUsage);
    return 2;
  }
  if (args->Has("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (args->Has("grammar-mask")) return RunGrammarMaskBench(*args);
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
  const std::string tier_dir = args->GetOr("tier-dir", "bench-tiers");
  auto tier_time_limit = args->GetDouble("tier-time-limit", *time_limit);
  if (!tier_time_limit.ok()) {
    std::fprintf(stderr, "kvtier bench: %s\n", std::string(tier_time_limit.status().message()).c_str());
    return 2;
  }

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
    // Structured output needs the model's tokenizer: a given one is copied in when absent.
    const std::vector<std::string> tokenizers = args->GetAll("tokenizer");
    if (args->Has("json-schema") && !tokenizers.empty() && !IsFile(dir + "/tokenizer.json")) {
      const std::filesystem::path from = std::filesystem::is_directory(tokenizers[0])
                                             ? std::filesystem::path(tokenizers[0]) / "tokenizer.json"
                                             : std::filesystem::path(tokenizers[0]);
      std::error_code ec;
      std::filesystem::copy_file(from, dir + "/tokenizer.json", ec);
      if (!ec && IsFile((from.parent_path() / "tokenizer_config.json").string())) {
        std::filesystem::copy_file(from.parent_path() / "tokenizer_config.json", dir + "/tokenizer_config.json", ec);
      }
      if (ec) std::fprintf(stderr, "bench: copying %s into %s: %s\n", from.c_str(), dir.c_str(), ec.message().c_str());
    }
    char err[1024];
    const auto t0 = Clock::now();
    if (kvt_model_load(dir.c_str(), &big, err, sizeof err) != KVT_OK) {
      std::fprintf(stderr, "bench: load %s: %s\n", dir.c_str(), err);
      return false;
    }
    out["model_load_s"] = Seconds(t0, Clock::now());
    out["model_dir"] = dir;
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
      if (auto schema_path = args->Get("json-schema")) {
        // The same workload with a JSON schema on every sequence, in the same process.
        std::ifstream in(*schema_path, std::ios::binary);
        std::stringstream text;
        text << in.rdbuf();
        WorkloadSpec ws = w;
        ws.json_schema = text.str();
        RunResult rs = RunWorkload(big, ws, *time_limit, sampling ? &sampler : nullptr);
        json js = record("W2s", ws, rs);
        const double sdecode = rs.ok ? rs.decode_tokens / rs.decode_s : NAN;
        js["json_schema_file"] = *schema_path;
        js["decode_tok_s"] = sdecode;
        js["grammar_finished_sequences"] = rs.grammar_finished;
        js["ratio_to_unconstrained_decode"] = sdecode / decode;
        if (!rs.stats.is_null() && rs.stats.contains("grammar")) js["grammar"] = rs.stats["grammar"];
        out["workloads"]["W2s"] = js;
        const double mask_s = JsonNum(rs.stats, {"grammar", "mask_compute_seconds"});
        const double wait_s = JsonNum(rs.stats, {"grammar", "mask_wait_seconds"});
        const double masks = JsonNum(rs.stats, {"grammar", "masks"});
        rows.push_back({"W2s", "decode tok/s, JSON schema on all 64", "tok/s", sdecode, decode_limit, NAN, NAN, true,
                        rs.error.empty() ? "completed " + Fmt(static_cast<double>(rs.grammar_finished), 0) + " of 64" : rs.error});
        rows.push_back({"W2s", "constrained / unconstrained decode", "", sdecode / decode, 1.0, NAN, 0.85, true,
                        "mask " + Fmt(1e6 * mask_s / masks, 1) + " us/row on the CPU, " + Fmt(1e3 * wait_s, 1) +
                            " ms waited for in all"});
      }
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
    } else if (id == "W5") {
      RunW5(big, gpu_spec(id, 256, 1024, 256), tier_dir, *tier_time_limit, sampling ? &sampler : nullptr, record, &out,
            &rows);
    } else if (id == "W6" || id == "W6b") {
      RunW6(big, id == "W6b", gpu_spec(id, 128, 4096 + 128, 64), tier_dir, *tier_time_limit, record, &out, &rows);
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
    // Times: limit / value (1 = at the hardware limit). Memory against a cap: the share of
    // the cap used (value / cap), so "of limit" reads the same way as the figure.
    const double of_limit = row.higher_is_better || row.unit == "MiB" ? row.value / row.limit
                                                                      : row.limit / row.value;
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

KVTIER_REGISTER_COMMAND("bench", "run the docs/WORKLOADS.md benchmarks (table + JSON)", BenchMain);

}  // namespace kvtier::cli
