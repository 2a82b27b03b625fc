// W6c (bench_w6c.h). Phases, each in a context of its own, created for it and freed after:
//   populate        disk tier + Redis: computes the prompt (prefix + 128 own tokens), so the
//                   prefix reaches the disk file and Redis when the context is freed;
//   recompute       no disk, no Redis: the same prefix with other own tokens, computed;
//   disk_plan       the disk file (its pages dropped from the page cache first), plan on;
//   disk_load       the same, load_or_recompute 0 (every block loaded);
//   redis_plan      Redis only, plan on;
//   redis_load      Redis only, load_or_recompute 0.
// Each context first runs a 512-token warm-up prompt of other tokens (its own), twice
// (RunWarmed: kernels, and the prefill speed the plan is made with, as in a process that has
// served before), then the measured prompt. The measured prompts share W6's prefix (same generator and seed).
#include "bench_w6c.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "bench_warm_run.h"

namespace kvtier::cli::bench {
namespace {

// Drops the file's pages from the page cache, so that its reads come from the disk (as
// after a reboot or under memory pressure) rather than from memory. The blocks the last
// context wrote are written out first: a dirty page is not dropped, and a phase measuring
// its reads (the disk's speed probed at creation, the plan's split) beside that write-out
// measures both.
void DropPageCache(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  (void)fdatasync(fd);
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

// A plan phase's timeline (its JSON record, its time to first token) from the engine's
// load_plans.last; NaN where the phase made no plan or never attached.
json PlanTimeline(const json& phase, double ttft_s) {
  const json& plans = phase["load_plans"];
  const json last = plans.is_object() && plans.contains("last") ? plans["last"] : json::object();
  auto num = [&](const char* key) {
    return last.contains(key) && last[key].is_number() ? last[key].get<double>() : NAN;
  };
  const double front = num("front_computed_after_s"), attach = num("attach_s");
  return {{"slow_blocks", num("slow_blocks")},
          {"compute_blocks", num("compute_blocks")},
          {"load_blocks", num("load_blocks")},
          {"disk_reads_started", num("disk_reads_started")},
          {"load_seconds_per_block_planned", num("load_seconds_per_block")},
          {"compute_seconds_per_block_planned", num("compute_seconds_per_block")},
          {"expected_s", num("expected_seconds")},
          {"front_computed_s", front},
          {"attach_s", attach},
          {"attached_blocks", num("attached_blocks")},
          {"after_attach_s", ttft_s - front - attach},
          {"disk_reads_busy_s", phase["disk_read_seconds"]},
          {"ttft_s", ttft_s},
          {"progress", last.contains("progress") ? last["progress"] : json::array()}};
}

// A plan row's note: the split, then where the time went.
std::string PlanNote(const json& timeline) {
  auto tnum = [&](const char* key) { return timeline[key].is_number() ? timeline[key].get<double>() : NAN; };
  return "computed " + Fmt(tnum("compute_blocks"), 0) + " / loading " + Fmt(tnum("load_blocks"), 0) + " blocks; front " +
         Fmt(tnum("front_computed_s"), 3) + " s, attach " + Fmt(tnum("attach_s"), 3) + " s (" +
         Fmt(tnum("attached_blocks"), 0) + " joined), then " + Fmt(tnum("after_attach_s"), 3) + " s";
}

}  // namespace

void RunW6c(kvt_model* model, WorkloadSpec w, const std::string& tier_dir, const std::string& remote_url,
            int remote_connections, double time_limit, const RecordFn& record, json* out, std::vector<Row>* rows) {
  const std::string id = "W6c";
  std::filesystem::create_directories(tier_dir);
  const std::string disk = tier_dir + "/" + kW6cDiskFile;
  std::error_code ec;
  std::filesystem::remove(disk, ec);
  std::filesystem::remove(disk + ".index", ec);
  const int kPrefix = 4096, kOwn = 128;
  const int32_t vocab = kvt_model_vocab_size(model);
  std::mt19937 rng(4096);  // W6's generator and seed: W6's prefix
  std::uniform_int_distribution<int32_t> dist(1, vocab - 1);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> v(n);
    for (auto& t : v) t = dist(rng);
    return v;
  };
  const std::vector<int32_t> prefix = random_tokens(kPrefix);
  auto with_prefix = [&]() {
    std::vector<int32_t> v = prefix;
    auto own = random_tokens(kOwn);
    v.insert(v.end(), own.begin(), own.end());
    return v;
  };

  json j = {{"prefix_tokens", kPrefix}, {"own_tokens", kOwn}, {"gen", w.gen}, {"remote_kv_url", remote_url},
            {"remote_kv_connections", remote_connections}};
  bool ok = true;
  std::string errors;
  // One phase: a context with `extra` options, the warm-up, then the measured prompt.
  auto phase = [&](const std::string& name, std::map<std::string, std::string> extra) -> RunResult {
    WorkloadSpec p = w;
    p.options["gpu_kv_bytes"] = "8GiB";
    p.options["host_kv_bytes"] = "8GiB";
    for (const auto& [key, value] : extra) p.options[key] = value;
    p.num_seqs = 1;
    p.prompts = {with_prefix()};
    // A warm-up of its own: the populate phase's reaches the disk file and Redis, and a
    // later phase's warm-up would then be a slow-tier hit instead of a computed prompt.
    const RunResult r = RunWarmed(model, p, random_tokens(kWarmPromptTokens), time_limit);
    json pj = record(id, p, r);
    pj["ttft_s"] = r.ttft_s;
    for (const char* tier : {"gpu", "host", "disk", "remote"}) {
      pj["prefix_hit_blocks"][tier] = JsonNum(r.stats, {"prefix_hits", tier});
    }
    pj["prompt_tokens_computed"] = JsonNum(r.stats, {"prompt_tokens_computed"});
    pj["load_plans"] = r.stats.contains("load_plans") ? r.stats["load_plans"] : json();
    // Bytes read over the time any read was in progress (reads run on several threads).
    const double disk_seconds = JsonNum(r.stats, {"disk_reads", "seconds"});
    pj["disk_read_seconds"] = disk_seconds;
    pj["disk_read_bytes"] = JsonNum(r.stats, {"disk_reads", "bytes"});
    pj["disk_read_bytes_per_s"] = disk_seconds > 0 ? JsonNum(r.stats, {"disk_reads", "bytes"}) / disk_seconds : NAN;
    // Why the reads took that time: the reads in flight at once on average, the share of a
    // read's time in the file (the disk; the rest is the CPU's checks and copy), and the
    // reads of the slot right after their call's previous read (a prefix the file holds in
    // order).
    const double summed = JsonNum(r.stats, {"disk_reads", "seconds_summed"});
    pj["disk_reads_at_once"] = disk_seconds > 0 ? summed / disk_seconds : NAN;
    pj["disk_read_file_share"] = summed > 0 ? JsonNum(r.stats, {"disk_reads", "file_seconds_summed"}) / summed : NAN;
    pj["disk_reads_in_file_order"] = JsonNum(r.stats, {"disk_reads", "in_file_order"});
    pj["remote_get_bytes_per_s"] = JsonNum(r.stats, {"remote", "get_bytes_per_second"});
    j["phases"][name] = pj;
    if (!r.ok) {
      ok = false;
      errors += name + ": " + r.error + "; ";
    }
    return r;
  };

  const bool redis = !remote_url.empty();
  std::map<std::string, std::string> populate = {{"disk_kv_bytes", std::to_string(kW6cDiskBytes)}, {"disk_path", disk}};
  if (redis) {
    populate["remote_kv_url"] = remote_url;
    populate["remote_kv_max_bytes_in_flight"] = "1GiB";
    if (remote_connections > 0) populate["remote_kv_connections"] = std::to_string(remote_connections);
  }
  phase("populate", populate);
  const RunResult recompute = phase("recompute", {});
  auto disk_phase = [&](const char* name, const char* plan) {
    DropPageCache(disk);
    return phase(name, {{"disk_kv_bytes", std::to_string(kW6cDiskBytes)}, {"disk_path", disk}, {"load_or_recompute", plan}});
  };
  const RunResult disk_plan = disk_phase("disk_plan", "1");
  const RunResult disk_load = disk_phase("disk_load", "0");
  RunResult redis_plan, redis_load;
  if (redis) {
    auto redis_phase = [&](const char* name, const char* plan) {
      std::map<std::string, std::string> options = {{"remote_kv_url", remote_url},
                                                    {"remote_kv_max_bytes_in_flight", "1GiB"},
                                                    {"remote_kv_timeout_ms", "1000"},
                                                    {"load_or_recompute", plan}};
      if (remote_connections > 0) options["remote_kv_connections"] = std::to_string(remote_connections);
      return phase(name, options);
    };
    redis_plan = redis_phase("redis_plan", "1");
    redis_load = redis_phase("redis_load", "0");
  }
  std::filesystem::remove(disk, ec);
  std::filesystem::remove(disk + ".index", ec);
  j["ok"] = ok;
  j["error"] = errors;
  const double base = recompute.ttft_s;
  auto ratio = [&](const RunResult& r) { return base > 0 && r.ok ? r.ttft_s / base : NAN; };
  j["ttft_recompute_s"] = base;
  j["ttft_disk_plan_s"] = disk_plan.ttft_s;
  j["ttft_disk_load_s"] = disk_load.ttft_s;
  j["ratio_disk_plan_vs_recompute"] = ratio(disk_plan);
  // Where the disk plan's time went, from its first add (plan and reads start) to its first
  // token: the split, the front computed, the attach (what landed matched and copied to the
  // device), then the rest (blocks not landed, the own tokens, the first token's step).
  j["disk_plan_timeline"] = PlanTimeline(j["phases"]["disk_plan"], disk_plan.ttft_s);
  j["ratio_disk_load_vs_recompute"] = ratio(disk_load);
  if (redis) {
    j["ttft_redis_plan_s"] = redis_plan.ttft_s;
    j["ttft_redis_load_s"] = redis_load.ttft_s;
    j["ratio_redis_plan_vs_recompute"] = ratio(redis_plan);
    j["ratio_redis_load_vs_recompute"] = ratio(redis_load);
    j["redis_plan_timeline"] = PlanTimeline(j["phases"]["redis_plan"], redis_plan.ttft_s);
  }
  (*out)["workloads"][id] = j;
  const json& phases = j["phases"];
  auto hits = [&](const char* name) {
    const json& p = phases[name];
    return "hits disk " + Fmt(p["prefix_hit_blocks"]["disk"].get<double>(), 0) + ", host " +
           Fmt(p["prefix_hit_blocks"]["host"].get<double>(), 0) + ", remote " +
           Fmt(p["prefix_hit_blocks"]["remote"].get<double>(), 0) + "; computed " +
           Fmt(p["prompt_tokens_computed"].get<double>(), 0) + " tokens";
  };
  rows->push_back({id, "TTFT 2nd context, prefix recomputed s", "s", base, NAN, NAN, NAN, false, errors});
  rows->push_back({id, "TTFT from local disk, plan s", "s", disk_plan.ttft_s, NAN, NAN, NAN, false, hits("disk_plan")});
  const json& timeline = j["disk_plan_timeline"];
  auto tnum = [&](const char* key) { return timeline[key].is_number() ? timeline[key].get<double>() : NAN; };
  rows->push_back({id, "  vs recompute (plan)", "x", ratio(disk_plan), NAN, NAN, 0.75, false,
                   PlanNote(timeline) + "; reads busy " + Fmt(tnum("disk_reads_busy_s"), 3) + " s"});
  rows->push_back({id, "TTFT from local disk, load only s", "s", disk_load.ttft_s, NAN, NAN, NAN, false,
                   hits("disk_load")});
  const json& load = phases["disk_load"];
  auto lnum = [&](const char* key) { return load[key].is_number() ? load[key].get<double>() : NAN; };
  rows->push_back({id, "disk delivered (load only)", "GB/s", lnum("disk_read_bytes_per_s") / 1e9, NAN, NAN, NAN, true,
                   Fmt(lnum("disk_reads_at_once"), 1) + " reads at once, " +
                       Fmt(100 * lnum("disk_read_file_share"), 0) + "% of a read in the file; " +
                       Fmt(lnum("disk_reads_in_file_order"), 0) + " reads in file order"});
  if (redis) {
    rows->push_back({id, "TTFT from Redis, plan s", "s", redis_plan.ttft_s, NAN, NAN, NAN, false, hits("redis_plan")});
    rows->push_back({id, "  vs recompute (plan)", "x", ratio(redis_plan), NAN, NAN, 0.75, false,
                     PlanNote(j["redis_plan_timeline"])});
    rows->push_back({id, "TTFT from Redis, load only s", "s", redis_load.ttft_s, NAN, NAN, NAN, false,
                     hits("redis_load")});
    rows->push_back({id, "Redis delivered (load only)", "GB/s",
                     phases["redis_load"]["remote_get_bytes_per_s"].get<double>() / 1e9, NAN, NAN, NAN, true, ""});
  } else {
    rows->push_back({id, "Redis phases skipped", "", NAN, NAN, NAN, NAN, true, "no --remote-kv-url"});
  }
}

}  // namespace kvtier::cli::bench
