// Free space of the file system a path would be written on (statvfs), for commands that
// check before they write. Stateless; thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_DISK_SPACE_H_
#define KVTIER_TOOLS_KVTIER_DISK_SPACE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kvtier::cli {

struct FileSystemSpace {
  uint64_t device = 0;     // st_dev: equal for paths on the same file system
  int64_t free_bytes = 0;  // available to an unprivileged writer (f_bavail * f_frsize)
  std::string probed;      // the existing path that was measured
};

// The file system of `path`, or of its nearest existing ancestor when `path` does not exist
// yet (a directory the command will create). Internal error naming the path otherwise.
absl::StatusOr<FileSystemSpace> SpaceFor(const std::string& path);

// "15.0 GiB".
std::string GiB(int64_t bytes);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_DISK_SPACE_H_
