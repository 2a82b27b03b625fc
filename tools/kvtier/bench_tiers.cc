// Implementation of the tiered workloads W5, W6 and W6b (bench_tiers.h).
#include "bench_tiers.h"

#include <cstdio>
#include <filesystem>
#include <random>

#include "bench_warm_run.h"
#include "cuda_env.h"

namespace kvtier::cli::bench {

void RunW5(kvt_model* model, WorkloadSpec w, const std::string& tier_dir, double time_limit, GpuMemorySampler* sampler,
           const RecordFn& record, json* out, std::vector<Row>* rows) {
  const std::string id = "W5";
  std::filesystem::create_directories(tier_dir);
  const std::string disk = tier_dir + "/" + kW5DiskFile;
  std::filesystem::remove(disk);
  w.options["gpu_kv_bytes"] = "4GiB";
  w.options["host_kv_bytes"] = "16GiB";
  w.options["disk_kv_bytes"] = std::to_string(kW5DiskBytes);
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
void RunW6(kvt_model* model, bool restart, WorkloadSpec w, const std::string& tier_dir, double time_limit,
           const RecordFn& record, json* out, std::vector<Row>* rows, W6BatchBounds batch) {
  const std::string id = restart ? "W6b" : "W6";
  std::filesystem::create_directories(tier_dir);
  const std::string disk = tier_dir + "/" + kW6DiskFile;
  if (!restart) {
    std::error_code ec;
    std::filesystem::remove(disk, ec);
    std::filesystem::remove(disk + ".index", ec);
  }
  w.options["gpu_kv_bytes"] = "8GiB";
  w.options["host_kv_bytes"] = "8GiB";
  w.options["disk_kv_bytes"] = std::to_string(kW6DiskBytes);
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
    // Each step's wall time until every sequence had its first token (the batch's time to
    // all first tokens, step by step).
    pj["prefill_step_s"] = r.prefill_step_s;
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
  // After the restart the context first serves a prompt of other tokens (as a process that
  // has served before: kernels, and the prefill speed its load plan is made with).
  std::mt19937 warm_rng(512);
  std::vector<int32_t> warm_prompt(kWarmPromptTokens);
  for (auto& t : warm_prompt) t = dist(warm_rng);
  if (restart) {
    if (std::string warm = WarmUp(ctx, warm_prompt); !warm.empty()) {
      kvt_context_free(ctx);
      return fail(warm);
    }
  }
  RunResult cached_r = phase(restart ? "after_restart_1seq" : "cached_prefix_1seq", {second}, false);
  RunResult batch_r = phase("batch_128", batch_prompts, false);
  const json final_stats = ContextStats(ctx);
  j["stats"] = final_stats;
  const auto t_free = Clock::now();
  kvt_context_free(ctx);  // flushes the cached blocks to the disk file
  j["context_free_s"] = Seconds(t_free, Clock::now());
  // W6b's baseline: the same prompt recomputed in a context of its own without the disk
  // tier, warmed up the same way, in this process (a figure from another run, or a first
  // prompt, varies more than the difference measured).
  RunResult recompute_r;
  if (restart) {
    WorkloadSpec p = w;
    p.options.erase("disk_kv_bytes");
    p.options.erase("disk_path");
    p.num_seqs = 1;
    p.prompts = {second};
    recompute_r = RunWarmed(model, p, warm_prompt, time_limit);
    if (!recompute_r.ok) recompute_r.error = "recompute: " + recompute_r.error;
    json pj = record(id, p, recompute_r);
    pj.erase("options");
    pj["prompt_tokens_computed"] = JsonNum(recompute_r.stats, {"prompt_tokens_computed"});
    j["phases"]["recompute_1seq"] = pj;
  }
  const bool ok = cached_r.ok && batch_r.ok && (restart ? recompute_r.ok : (unseen_r.ok && cold_r.ok));
  j["ok"] = ok;
  std::string err_text;
  for (const RunResult* r : {&unseen_r, &cold_r, &cached_r, &batch_r, &recompute_r}) {
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
  j["batch_all_first_token_limit_s"] = std::isnan(batch.limit_s) ? json(nullptr) : json(batch.limit_s);
  j["batch_output_tok_s"] = batch_r.ok ? batch_r.generated / batch_r.wall_s : NAN;
  if (restart) {
    j["ttft_recompute_1seq_s"] = recompute_r.ttft_s;
    j["ratio_restart_vs_recompute"] =
        recompute_r.ok && recompute_r.ttft_s > 0 ? cached_r.ttft_s / recompute_r.ttft_s : NAN;
    // What the disk delivered to the first prompt after the restart (bytes over the time any
    // read was in progress).
    j["disk_read_bytes_per_s"] = [&] {
      const double seconds = JsonNum(cached_r.stats, {"disk_reads", "seconds"});
      return seconds > 0 ? JsonNum(cached_r.stats, {"disk_reads", "bytes"}) / seconds : NAN;
    }();
    j["load_plans_after_restart"] = cached_r.stats.contains("load_plans") ? cached_r.stats["load_plans"] : json();
  }
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
    // A new process's host tier starts empty: its host hits were read from the disk ahead
    // of their use (the load-or-recompute plan's back, or read-ahead).
    const double from_disk =
        cp["prefix_hit_blocks"]["disk"].get<double>() + cp["prefix_hit_blocks"]["host"].get<double>();
    rows->push_back({id, "blocks from disk after restart (1 seq)", "blocks", from_disk, NAN, NAN, 1.0, true,
                     "of " + Fmt(blocks_per_prompt, 0) + " full prompt blocks (disk + host hits; the rest computed)"});
    rows->push_back({id, "TTFT 1 seq, prefix recomputed (same process) s", "s", recompute_r.ttft_s, NAN, NAN, NAN,
                     false, "a context without the disk tier, warmed up alike"});
    rows->push_back({id, "  TTFT after restart vs recompute", "x", j["ratio_restart_vs_recompute"].get<double>(), NAN,
                     NAN, 0.75, false, "disk delivered " + Fmt(j["disk_read_bytes_per_s"].get<double>() / 1e9, 2) +
                                           " GB/s"});
  }
  rows->push_back({id, "batch 128: mean TTFT s", "s", batch_r.mean_ttft_s, NAN, NAN, NAN, false,
                   "hit rate " + hit_note(j["batch_hit_rate"])});
  rows->push_back({id, "batch 128: output tok/s", "tok/s", j["batch_output_tok_s"].get<double>(), NAN, NAN, NAN, true,
                   "all first tokens at " + Fmt(batch_r.all_first_s, 2) + " s"});
  if (!restart) {
    rows->push_back({id, "batch 128: all first tokens s", "s", batch_r.ok ? batch_r.all_first_s : NAN, batch.limit_s,
                     NAN, batch.target_s, false, "limit: the 128 x 128 own tokens at the compute limit"});
  }
}

}  // namespace kvtier::cli::bench
