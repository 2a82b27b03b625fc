// A measured run in a context of its own that has served before: `kvtier bench`'s tier
// workloads compare a first token found in a slow tier with the same prompt recomputed,
// and both sides must start warm (kernels loaded, and the engine's prefill speed measured,
// which the load-or-recompute plan is made with), as in a process that has served before,
// or the comparison measures the warm-up instead. Not thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_WARM_RUN_H_
#define KVTIER_TOOLS_KVTIER_BENCH_WARM_RUN_H_

#include <string>
#include <vector>

#include "bench_workload.h"

namespace kvtier::cli::bench {

// Tokens of the warm-up prompt: long enough that its prefill is measured as one (the
// engine measures prefill speed from steps of at least 128 tokens).
inline constexpr int kWarmPromptTokens = 512;

// Generates two tokens after `warm_prompt` in `ctx`, then after it rotated by one token
// (other blocks, computed again: a context's first steps pay one-time costs, so the second
// prefill measures the warm speed); "" or what failed.
std::string WarmUp(kvt_context* ctx, const std::vector<int32_t>& warm_prompt);

// Creates a context with `p.options` (and the KVTIER_CUDA_* environment), warms it up with
// `warm_prompt` (WarmUp), waits for the warm-up's writes to the disk and remote tiers to
// land (at most 2 s; stats "warm_up_writes"), runs `p` in it (p.warmup is ignored), and frees
// it (a disk tier's cache reaches its file then).
RunResult RunWarmed(kvt_model* model, WorkloadSpec p, const std::vector<int32_t>& warm_prompt, double time_limit);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_WARM_RUN_H_
