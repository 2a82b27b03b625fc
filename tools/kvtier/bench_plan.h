// BenchPlan: everything `kvtier bench` will write, decided and checked before it writes
// anything: the random checkpoints --make-model asks for (reused when complete), the disk-tier
// files of W5, W6 and W6b, W7's GGUF files. The plan says how much each takes and refuses when a file system
// lacks the room (statvfs), so a run never fills a disk halfway through. Not thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_PLAN_H_
#define KVTIER_TOOLS_KVTIER_BENCH_PLAN_H_

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench_w7_files.h"

namespace kvtier::cli::bench {

struct BenchPlanInput {
  std::set<std::string> workloads;  // W1..W8, W6b, W6c, C<N>
  std::string model;                // --model ("" = none)
  std::string small_model;          // --small-model
  std::string make_model_dir;       // --make-model
  std::string tier_dir;             // --tier-dir
  std::string backend = "cuda";     // --backend: C<N> runs the small model on cpu, the 8B one elsewhere
  std::vector<std::string> w7_models;  // --w7-model (none: the demo model and a 1B random one)
  std::string w7_cache;                // --w7-cache ("": --make-model DIR/w7)
};

struct PlannedWrite {
  std::string what;  // "llama3-8b checkpoint", "W5 disk tier", ...
  std::string path;
  int64_t bytes = 0;
  bool transient = false;  // one of the disk-tier files, which exist one at a time
};

struct BenchPlan {
  std::string model_dir;        // the Llama-3-8B-shape checkpoint ("" when no workload needs it)
  std::string small_model_dir;  // C<N>'s on the cpu backend
  bool write_model = false;     // model_dir is written by --make-model
  bool write_small_model = false;
  std::vector<W7Source> w7_sources;  // W7's models, written as GGUF into w7_cache_dir
  std::string w7_cache_dir;
  std::vector<PlannedWrite> writes;
};

// Where each model comes from and what will be written. InvalidArgument (a usage error) when a
// workload lacks its model or --tier-dir; FailedPrecondition when a --make-model directory
// holds something other than a complete checkpoint of its preset.
absl::StatusOr<BenchPlan> PlanBench(const BenchPlanInput& input);

// Prints the plan (what, where, how much) and the free space of each file system it writes
// on; ResourceExhausted, naming the file system and both figures, when the peak need
// (every checkpoint + the largest disk-tier file) exceeds the free space.
absl::Status CheckFreeSpace(const BenchPlan& plan, FILE* log);

// Writes the checkpoints the plan makes (presets llama3-8b and small-llama) and W7's GGUF
// files.
absl::Status WritePlannedCheckpoints(const BenchPlan& plan, FILE* log);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_PLAN_H_
