// RunWarmed and WarmUp (bench_warm_run.h).
#include "bench_warm_run.h"

#include <chrono>
#include <thread>

#include "cuda_env.h"

namespace kvtier::cli::bench {
namespace {

// How long a context may take to pin its host tier and prepare its disk file.
constexpr std::chrono::seconds kTiersReadyLimit{120};

// Waits until every tier's ready_bytes equals its capacity_bytes (tier preparation runs in
// the background after the context is created); "" or why not.
std::string WaitForTiersReady(kvt_context* ctx) {
  const auto deadline = std::chrono::steady_clock::now() + kTiersReadyLimit;
  for (;;) {
    bool ready = true;
    for (const char* tier : {"gpu", "host", "disk"}) {
      const std::string prefix = std::string("tiers.") + tier + ".";
      int64_t capacity = 0, ready_bytes = 0;
      if (kvt_context_stat(ctx, (prefix + "capacity_bytes").c_str(), &capacity) != KVT_OK ||
          kvt_context_stat(ctx, (prefix + "ready_bytes").c_str(), &ready_bytes) != KVT_OK) {
        return std::string("warm-up: no statistic ") + prefix + "ready_bytes";
      }
      ready = ready && ready_bytes >= capacity;
    }
    if (ready) return "";
    if (std::chrono::steady_clock::now() > deadline) return "warm-up: tiers not ready after 120 s";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

std::string WarmUp(kvt_context* ctx, const std::vector<int32_t>& warm_prompt) {
  kvt_request* warm = nullptr;
  kvt_request_create(&warm);
  kvt_request_set_prompt_tokens(warm, warm_prompt.data(), static_cast<int32_t>(warm_prompt.size()));
  kvt_request_set_max_new_tokens(warm, 2);
  kvt_request_set_ignore_eos(warm, 1);
  int32_t buf[4], len = 0;
  std::string error;
  if (kvt_generate(ctx, warm, buf, 4, &len, nullptr) != KVT_OK) {
    error = std::string("warm-up: ") + kvt_context_errmsg(ctx);
  }
  kvt_request_free(warm);
  if (error.empty()) error = WaitForTiersReady(ctx);
  return error;
}

RunResult RunWarmed(kvt_model* model, WorkloadSpec p, const std::vector<int32_t>& warm_prompt, double time_limit) {
  p.warmup = false;
  RunResult r;
  kvt_options* options = nullptr;
  kvt_options_create(&options);
  if (SetCudaOptionsFromEnvironment(options) != KVT_OK) {
    r.error = std::string("KVTIER_CUDA_*: ") + kvt_options_errmsg(options);
  }
  for (const auto& [key, value] : p.options) {
    if (r.error.empty() && kvt_options_set_string(options, key.c_str(), value.c_str()) != KVT_OK) {
      r.error = "option " + key + ": " + kvt_options_errmsg(options);
    }
  }
  kvt_context* ctx = nullptr;
  char err[2048] = {0};
  if (r.error.empty() && kvt_context_create(model, options, &ctx, err, sizeof err) != KVT_OK) {
    r.error = std::string("context: ") + err;
  }
  kvt_options_free(options);
  if (ctx == nullptr) return r;
  r.error = WarmUp(ctx, warm_prompt);
  if (r.error.empty()) r = RunWorkload(model, p, time_limit, nullptr, ctx);
  kvt_context_free(ctx);
  return r;
}

}  // namespace kvtier::cli::bench
