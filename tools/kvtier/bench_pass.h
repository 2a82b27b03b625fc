// BenchPass: a further pass of `kvtier bench` over some workloads in the same process, with
// other weight / KV formats or another checkpoint (`--pass NAME:W1,W2[:weight=fp8][:kv=fp8]
// [:model=DIR]`), as a service mixes them. Each pass writes its own results JSON. Pure.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_PASS_H_
#define KVTIER_TOOLS_KVTIER_BENCH_PASS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::cli::bench {

struct BenchPass {
  std::string name;                    // letters, digits, '-' and '_': part of its JSON file name
  std::vector<std::string> workloads;  // W1..W8 (not W6b, which needs a new process, nor W7)
  std::string weight_dtype = "auto";   // auto|bf16|fp16|fp8
  std::string kv_dtype = "auto";       // auto|bf16|fp16|fp8
  std::string model_dir;               // "" = the main pass's checkpoint
};

// InvalidArgument naming what is wrong (no name or workloads, an unknown key, format or
// workload).
absl::StatusOr<BenchPass> ParseBenchPass(const std::string& text);

// Where a pass's results go: the main JSON path with "-NAME" before its extension
// ("out/bench.json" -> "out/bench-fp8.json"); "" when the main pass writes none.
std::string PassJsonPath(const std::string& main_json, const std::string& name);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_PASS_H_
