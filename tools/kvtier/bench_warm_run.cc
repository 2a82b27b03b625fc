// RunWarmed and WarmUp (bench_warm_run.h).
#include "bench_warm_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "cuda_env.h"

namespace kvtier::cli::bench {

namespace {

std::string GenerateTwo(kvt_context* ctx, const std::vector<int32_t>& warm_prompt) {
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
  return error;
}

// Waits until the warm-up's blocks have reached the disk and remote tiers (the context's
// pending_writes are 0), at most kWritesWaitSeconds: a measured prompt whose loads shared
// the disk or Redis with those writes would measure them too, where its recomputed twin
// (no slow tiers) shares nothing. As in a process that served before and is idle now.
// Returns the seconds waited, and sets *left to the blocks still pending then.
double WaitForPendingWrites(kvt_context* ctx, int64_t* left) {
  constexpr double kWritesWaitSeconds = 2.0;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const json stats = ContextStats(ctx);
    const double disk = JsonNum(stats, {"pending_writes", "disk_blocks"});
    const double remote = JsonNum(stats, {"pending_writes", "remote_blocks"});
    *left = static_cast<int64_t>((std::isnan(disk) ? 0 : disk) + (std::isnan(remote) ? 0 : remote));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (*left == 0 || waited >= kWritesWaitSeconds) return waited;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

std::string WarmUp(kvt_context* ctx, const std::vector<int32_t>& warm_prompt) {
  if (std::string error = GenerateTwo(ctx, warm_prompt); !error.empty()) return error;
  // Again with other blocks (the prompt rotated by one token, so computed again): a
  // context's first steps pay one-time costs, the second prompt's prefill is warm.
  std::vector<int32_t> rotated(warm_prompt);
  if (!rotated.empty()) std::rotate(rotated.begin(), rotated.begin() + 1, rotated.end());
  return GenerateTwo(ctx, rotated);
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
  int64_t writes_left = 0;
  const double writes_waited = r.error.empty() ? WaitForPendingWrites(ctx, &writes_left) : 0.0;
  if (r.error.empty()) r = RunWorkload(model, p, time_limit, nullptr, ctx);
  r.stats["warm_up_writes"] = {{"waited_s", writes_waited}, {"blocks_left", writes_left}};
  kvt_context_free(ctx);
  return r;
}

}  // namespace kvtier::cli::bench
