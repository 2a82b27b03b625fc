// C<N> of `kvtier bench`: creating a context with an N GiB host tier and an 8 GiB disk tier,
// and what follows while its tiers are prepared in the background (docs/WORKLOADS.md).
// Not thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_CONTEXT_H_
#define KVTIER_TOOLS_KVTIER_BENCH_CONTEXT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "bench_session.h"

namespace kvtier::cli::bench {

// The disk tier's budget and file (in --tier-dir, deleted after each run).
inline constexpr int64_t kContextCreateDiskBytes = int64_t{8} << 30;
inline constexpr char kContextCreateDiskFile[] = "ctx-create.kvdisk";

// N of a workload id "C<N>" (N a decimal number of GiB, at most 5 digits); nullopt for
// any other id.
std::optional<int64_t> ContextCreateHostGib(const std::string& id);

// Creates a context on `model` with an N GiB host tier and the disk tier above (backend
// session->backend) and records, under session->out["workloads"][id]: context_create_s;
// first_token_s (a 16-token prompt right after creation); host_ready_s and disk_ready_s
// (statistics tiers.*.ready_bytes first seen at capacity_bytes, at creation or while the
// context steps idle); context_free_s; and, when C0 ran before in this session,
// tier_overhead_s = its creation minus C0's. All times from the start of creation, in
// seconds. Waits at most session->tier_time_limit for the tiers; stops at SIGINT/SIGTERM.
void RunContextCreate(kvt_model* model, const std::string& id, int64_t host_gib, const std::string& tier_dir,
                      BenchSession* session);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_CONTEXT_H_
