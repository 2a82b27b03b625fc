// CheckTierBudgetsFit: refuses, before anything is allocated, host and disk tier budgets the
// machine cannot hold — a host tier larger than the physical memory, a disk tier larger
// than its file system's free space — so that an impossible budget costs a message, not
// gigabytes of bookkeeping and seconds of allocation. Stateless; thread-safe.
#ifndef KVTIER_KV_TIER_BUDGETS_H_
#define KVTIER_KV_TIER_BUDGETS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/physical_memory.h"  // PhysicalMemoryBytes, which the budgets are checked against

namespace kvtier {

class FileIo;

// ResourceExhausted naming the budget and what the machine has when host_bytes exceeds
// the physical memory or disk_file_bytes exceeds what a file at disk_path could hold (free
// space plus the file's current size, through `io`; nullptr = the real file system).
// Zero budgets are not checked.
absl::Status CheckTierBudgetsFit(int64_t host_bytes, int64_t disk_file_bytes, const std::string& disk_path,
                                 FileIo* io);

}  // namespace kvtier

#endif  // KVTIER_KV_TIER_BUDGETS_H_
