// Implementation of the C<N> workloads (bench_context.h).
#include "bench_context.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "cuda_env.h"
#include "interrupt.h"

namespace kvtier::cli::bench {
namespace {

// kvt_options from key/value pairs; the first failure's message in *error.
kvt_options* MakeOptions(const std::map<std::string, std::string>& options, std::string* error) {
  kvt_options* o = nullptr;
  kvt_options_create(&o);
  if (SetCudaOptionsFromEnvironment(o) != KVT_OK) {
    *error = std::string("KVTIER_CUDA_*: ") + kvt_options_errmsg(o);
  }
  for (const auto& [key, value] : options) {
    if (!error->empty()) break;
    if (kvt_options_set_string(o, key.c_str(), value.c_str()) != KVT_OK) {
      *error = "option " + key + ": " + kvt_options_errmsg(o);
    }
  }
  if (error->empty()) return o;
  kvt_options_free(o);
  return nullptr;
}

}  // namespace

std::optional<int64_t> ContextCreateHostGib(const std::string& id) {
  if (id.size() < 2 || id.size() > 6 || id[0] != 'C') return std::nullopt;
  for (size_t i = 1; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return std::nullopt;
  }
  return std::stoll(id.substr(1));
}

void RunContextCreate(kvt_model* model, const std::string& id, int64_t host_gib, const std::string& tier_dir,
                      BenchSession* session) {
  namespace fs = std::filesystem;
  const std::string disk = (fs::path(tier_dir) / kContextCreateDiskFile).string();
  std::error_code ec;
  fs::create_directories(tier_dir, ec);
  fs::remove(disk, ec);
  fs::remove(disk + ".index", ec);
  const std::map<std::string, std::string> options = {
      {"backend", session->backend},
      {"gpu_kv_bytes", session->backend == "cpu" ? "64MiB" : "1GiB"},
      {"host_kv_bytes", std::to_string(host_gib) + "GiB"},
      {"disk_kv_bytes", std::to_string(kContextCreateDiskBytes)},
      {"disk_path", disk}};
  json j = {{"options", options}, {"host_gib", host_gib}, {"ok", false}};
  auto fail = [&](const std::string& what) {
    j["error"] = what;
    session->out["workloads"][id] = j;
    session->rows.push_back({id, "failed", "", NAN, NAN, NAN, NAN, true, what});
  };
  std::string error;
  kvt_options* o = MakeOptions(options, &error);
  if (o == nullptr) return fail(error);
  kvt_context* ctx = nullptr;
  char err[2048] = {0};
  const auto t0 = Clock::now();
  const kvt_status created_status = kvt_context_create(model, o, &ctx, err, sizeof err);
  const double created = Seconds(t0, Clock::now());
  kvt_options_free(o);
  if (created_status != KVT_OK) return fail(std::string("context: ") + kvt_status_string(created_status) + ": " + err);
  j["context_create_s"] = created;

  // A tier is ready when first seen at its capacity: right after creation (a backend that
  // does not pin, a file reserved before), else at one of the idle steps below.
  json host_ready = nullptr, disk_ready = nullptr, stats;
  auto observe = [&] {
    stats = ContextStats(ctx);
    const double now = Seconds(t0, Clock::now());
    auto ready = [&](const char* tier) {
      return JsonNum(stats, {"tiers", tier, "ready_bytes"}) >= JsonNum(stats, {"tiers", tier, "capacity_bytes"});
    };
    if (host_ready.is_null() && ready("host")) host_ready = now;
    if (disk_ready.is_null() && ready("disk")) disk_ready = now;
    for (const char* tier : {"host", "disk"}) {
      const json& t = stats["tiers"][tier];
      if (error.empty() && t.contains("preparation_error")) {
        error = std::string(tier) + ": " + t["preparation_error"].get<std::string>();
      }
    }
  };
  observe();
  // The first token right after creation, while the tiers are still being prepared.
  kvt_request* req = nullptr;
  kvt_request_create(&req);
  std::vector<int32_t> prompt(16);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(1 + i);
  kvt_request_set_prompt_tokens(req, prompt.data(), static_cast<int32_t>(prompt.size()));
  kvt_request_set_max_new_tokens(req, 1);
  int32_t token = 0, len = 0;
  const kvt_status generated = kvt_generate(ctx, req, &token, 1, &len, nullptr);
  kvt_request_free(req);
  j["first_token_s"] = Seconds(t0, Clock::now());
  if (generated != KVT_OK) {
    error = std::string("generate: ") + kvt_status_string(generated) + ": " + kvt_context_errmsg(ctx);
  }
  // Idle steps land what the background threads prepared (the statistics are exact per step).
  kvt_events* events = nullptr;
  kvt_events_create(&events);
  while (error.empty() && (host_ready.is_null() || disk_ready.is_null())) {
    if (kvt_status s = kvt_step(ctx, events); s != KVT_OK) {
      error = std::string("step: ") + kvt_status_string(s) + ": " + kvt_context_errmsg(ctx);
      break;
    }
    observe();
    if (InterruptSignal() != 0) {
      error = std::string("interrupted by ") + InterruptName(InterruptSignal());
    } else if (Seconds(t0, Clock::now()) > session->tier_time_limit) {
      error = "time limit " + Fmt(session->tier_time_limit, 0) + " s reached before the tiers were ready";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kvt_events_free(events);
  j["host_ready_s"] = host_ready;
  j["disk_ready_s"] = disk_ready;
  j["tiers"] = stats.is_object() ? stats["tiers"] : json(nullptr);
  const auto t_free = Clock::now();
  kvt_context_free(ctx);
  j["context_free_s"] = Seconds(t_free, Clock::now());
  fs::remove(disk, ec);
  fs::remove(disk + ".index", ec);
  j["ok"] = error.empty();
  j["error"] = error;
  auto at = [](const json& v) { return v.is_null() ? std::string("-") : Fmt(v.get<double>(), 2); };
  std::string note = "first token " + Fmt(j["first_token_s"].get<double>(), 3) + " s, host ready " + at(host_ready) +
                     " s, disk ready " + at(disk_ready) + " s, free " + Fmt(j["context_free_s"].get<double>(), 2) + " s";
  const double c0 = JsonNum(session->out, {"workloads", "C0", "context_create_s"});
  if (id != "C0" && !std::isnan(c0)) {
    j["tier_overhead_s"] = created - c0;
    note += ", C0 " + Fmt(c0, 3) + " s";
  }
  if (!error.empty()) note += "; " + error;
  session->out["workloads"][id] = j;
  session->rows.push_back({id, "context create s (host " + std::to_string(host_gib) + " GiB)", "s", created, NAN, NAN,
                           1.0, false, note});
}

}  // namespace kvtier::cli::bench
