// Implementation of CheckTierBudgetsFit (tier_budgets.h).
#include "kv/tier_budgets.h"

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/status_macros.h"
#include "storage/file_io.h"

namespace kvtier {

absl::Status CheckTierBudgetsFit(int64_t host_bytes, int64_t disk_file_bytes, const std::string& disk_path,
                                 FileIo* io) {
  if (host_bytes > 0) {
    const int64_t physical = PhysicalMemoryBytes();
    if (physical > 0 && host_bytes > physical) {
      return absl::ResourceExhaustedError(absl::StrCat("host_kv_bytes ", FormatByteSize(host_bytes),
                                                       " exceeds this machine's physical memory (",
                                                       FormatByteSize(physical), ")"));
    }
  }
  if (disk_file_bytes > 0 && !disk_path.empty()) {
    if (io == nullptr) io = DefaultFileIo();
    ASSIGN_OR_RETURN(const int64_t space, io->SpaceForFile(disk_path));
    if (disk_file_bytes > space) {
      return absl::ResourceExhaustedError(absl::StrCat("the disk tier needs a file of ", FormatByteSize(disk_file_bytes),
                                                       " at ", disk_path, " but its file system has room for ",
                                                       FormatByteSize(space)));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier
