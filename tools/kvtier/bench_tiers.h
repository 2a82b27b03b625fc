// W5 and W6/W6b of `kvtier bench`: the workloads that use the host and disk tiers. Each puts
// its disk-tier file in `tier_dir`: W5 tier_dir/w5.kvdisk (32 GiB, deleted after the run),
// W6 tier_dir/w6.kvdisk (16 GiB, kept for W6b, which reads it in a new process). Not
// thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_TIERS_H_
#define KVTIER_TOOLS_KVTIER_BENCH_TIERS_H_

#include <cmath>
#include <string>
#include <vector>

#include "bench_workload.h"

namespace kvtier::cli::bench {

// Disk-tier budgets (bench_plan.cc counts them before anything is written).
inline constexpr int64_t kW5DiskBytes = int64_t{32} << 30;
inline constexpr int64_t kW6DiskBytes = int64_t{16} << 30;
inline constexpr char kW5DiskFile[] = "w5.kvdisk";
inline constexpr char kW6DiskFile[] = "w6.kvdisk";

// W5: 256 sequences whose KV overflows the device tier into host and disk.
void RunW5(kvt_model* model, WorkloadSpec w, const std::string& tier_dir, double time_limit, GpuMemorySampler* sampler,
           const RecordFn& record, json* out, std::vector<Row>* rows);

// W6 (restart false) / W6b (restart true): a shared 4096-token prefix cached across tiers
// and, for W6b, found in the disk file W6 left. W6's batch of 128 has its all-first-tokens
// time held against `batch_limit_s` (its own tokens at the compute limit) and `batch_target_s`.
struct W6BatchBounds {
  double limit_s = NAN;
  double target_s = NAN;
};
void RunW6(kvt_model* model, bool restart, WorkloadSpec w, const std::string& tier_dir, double time_limit,
           const RecordFn& record, json* out, std::vector<Row>* rows, W6BatchBounds batch = {});

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_TIERS_H_
