// The library's one way to say something outside a returned status: a process-wide log
// sink with levels, installed through kvt_set_log_callback. Nothing is written anywhere
// unless a sink is installed (the library never writes to stderr by itself).
// Thread-safe: any thread may log (the disk I/O threads do), and the sink may be replaced
// at any time; once SetLogSink returns, the previous sink is not running and is never
// called again, so its owner may free what it points at.
#ifndef KVTIER_COMMON_LOG_H_
#define KVTIER_COMMON_LOG_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvtier {

// The values of kvt_log_level.
enum class LogLevel : int32_t { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// message: one line, NUL-terminated, valid only during the call.
using LogSink = void (*)(void* user_data, int32_t level, const char* message);

// Installs sink for messages at min_level and above (nullptr: logging off). InvalidArgument
// for a level outside [kDebug, kError]; FailedPrecondition when called from inside a sink
// (it would wait for itself).
absl::Status SetLogSink(LogSink sink, void* user_data, int32_t min_level);

// True when a message at this level would reach a sink: lets callers skip formatting.
bool LogEnabled(LogLevel level);

// Sends one message to the sink. A message logged from inside the sink (the sink calling
// back into the library) is dropped rather than recursing.
void LogMessage(LogLevel level, std::string_view message);

// A copy of this code linked into a module (the CUDA backend's libkvtier_cuda.so links the
// core statically) has a log state of its own that no kvt_set_log_callback reaches:
// ForwardLog makes that copy ask `enabled` and hand every message to `message` instead — the
// loading library's LogEnabled and LogMessage. Set once, right after the module is loaded.
using LogEnabledFn = bool (*)(int32_t level);
using LogMessageFn = void (*)(int32_t level, const char* message);
void ForwardLog(LogEnabledFn enabled, LogMessageFn message);

// Log(LogLevel::kWarn, "disk tier: ", what): formats only when the level is enabled.
template <typename... Parts>
void Log(LogLevel level, const Parts&... parts) {
  if (LogEnabled(level)) LogMessage(level, absl::StrCat(parts...));
}

}  // namespace kvtier

#endif  // KVTIER_COMMON_LOG_H_
