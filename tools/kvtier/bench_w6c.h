// W6c of `kvtier bench`: W6's 4,096-token prefix found by a new context (as a second
// process would: no KV state shared in memory) (a) on the local disk and (b) in a Redis
// server, against recomputing it; with the load-or-recompute plan and loading alone; and
// the bytes per second each tier delivered. Not thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_W6C_H_
#define KVTIER_TOOLS_KVTIER_BENCH_W6C_H_

#include <string>
#include <vector>

#include "bench_workload.h"

namespace kvtier::cli::bench {

inline constexpr int64_t kW6cDiskBytes = int64_t{4} << 30;
inline constexpr char kW6cDiskFile[] = "w6c.kvdisk";

// `remote_url`: the Redis server (redis://host:port) for (b); empty: (b) is skipped, saying so.
void RunW6c(kvt_model* model, WorkloadSpec w, const std::string& tier_dir, const std::string& remote_url,
            int remote_connections, double time_limit, const RecordFn& record, json* out, std::vector<Row>* rows);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_W6C_H_
