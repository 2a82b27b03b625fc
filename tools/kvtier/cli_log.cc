// InstallStderrLog (cli_log.h).
#include "cli_log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kvtier/kvtier.h"

namespace kvtier::cli {
namespace {

const char* const kLevelNames[] = {"debug", "info", "warning", "error"};

void ToStderr(void* /*user_data*/, int32_t level, const char* message) {
  const char* name = level >= 0 && level <= 3 ? kLevelNames[level] : "log";
  // One fprintf: a line is written whole even when several threads log at once.
  std::fprintf(stderr, "kvtier: %s: %s\n", name, message);
}

}  // namespace

void InstallStderrLog() {
  const char* setting = std::getenv("KVTIER_LOG");
  int32_t level = KVT_LOG_LEVEL_WARN;
  if (setting != nullptr && *setting != '\0') {
    if (std::strcmp(setting, "off") == 0) return;
    const char* const names[] = {"debug", "info", "warn", "error"};
    level = -1;
    for (int32_t i = 0; i < 4; ++i) {
      if (std::strcmp(setting, names[i]) == 0) level = i;
    }
    if (level < 0) {
      std::fprintf(stderr, "kvtier: KVTIER_LOG must be debug, info, warn, error or off, not '%s'; using warn\n",
                   setting);
      level = KVT_LOG_LEVEL_WARN;
    }
  }
  kvt_set_log_callback(ToStderr, nullptr, level);
}

}  // namespace kvtier::cli
