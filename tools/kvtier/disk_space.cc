// Implementation of SpaceFor (disk_space.h).
#include "disk_space.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace kvtier::cli {

absl::StatusOr<FileSystemSpace> SpaceFor(const std::string& path) {
  std::filesystem::path probe = std::filesystem::absolute(path.empty() ? "." : path);
  std::error_code ec;
  while (!std::filesystem::exists(probe, ec) && probe.has_parent_path() && probe != probe.parent_path()) {
    probe = probe.parent_path();
  }
  struct stat st;
  struct statvfs vfs;
  if (::stat(probe.c_str(), &st) != 0 || ::statvfs(probe.c_str(), &vfs) != 0) {
    return absl::InternalError(absl::StrCat("cannot measure free space at ", probe.string(), ": ", std::strerror(errno)));
  }
  FileSystemSpace space;
  space.device = static_cast<uint64_t>(st.st_dev);
  space.free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  space.probed = probe.string();
  return space;
}

std::string GiB(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

}  // namespace kvtier::cli
