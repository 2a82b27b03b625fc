// The process-wide log sink (log.h). Readers (loggers) hold the lock shared while the
// sink runs, so SetLogSink, holding it exclusively, returns only once no call of the old
// sink is in progress. The level check is one relaxed atomic load, so disabled logging
// costs nothing measurable on the stepping thread.
#include "common/log.h"

#include <atomic>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvtier {
namespace {

// Above every level: nothing is enabled.
constexpr int32_t kOff = static_cast<int32_t>(LogLevel::kError) + 1;

struct SinkState {
  absl::Mutex mu;
  LogSink sink ABSL_GUARDED_BY(mu) = nullptr;
  void* user_data ABSL_GUARDED_BY(mu) = nullptr;
  std::atomic<int32_t> min_level{kOff};
};

// Never destroyed: threads that outlive static destruction (a context freed at exit) may
// still log.
SinkState& State() {
  static auto* state = new SinkState();
  return *state;
}

// Set while this thread runs the sink.
thread_local bool inside_sink = false;

// ForwardLog's hooks (both set or both null).
std::atomic<LogEnabledFn> forward_enabled{nullptr};
std::atomic<LogMessageFn> forward_message{nullptr};

}  // namespace

absl::Status SetLogSink(LogSink sink, void* user_data, int32_t min_level) {
  if (min_level < static_cast<int32_t>(LogLevel::kDebug) || min_level > static_cast<int32_t>(LogLevel::kError)) {
    return absl::InvalidArgumentError(
        absl::StrCat("log level must be 0 (debug) .. 3 (error), got ", min_level));
  }
  if (inside_sink) {
    return absl::FailedPreconditionError("the log callback cannot be changed from inside the log callback");
  }
  SinkState& state = State();
  absl::WriterMutexLock lock(&state.mu);
  state.sink = sink;
  state.user_data = user_data;
  state.min_level.store(sink == nullptr ? kOff : min_level, std::memory_order_relaxed);
  return absl::OkStatus();
}

void ForwardLog(LogEnabledFn enabled, LogMessageFn message) {
  forward_message.store(message, std::memory_order_relaxed);
  forward_enabled.store(enabled, std::memory_order_release);
}

bool LogEnabled(LogLevel level) {
  if (LogEnabledFn enabled = forward_enabled.load(std::memory_order_acquire)) return enabled(static_cast<int32_t>(level));
  return static_cast<int32_t>(level) >= State().min_level.load(std::memory_order_relaxed);
}

void LogMessage(LogLevel level, std::string_view message) {
  if (LogEnabledFn enabled = forward_enabled.load(std::memory_order_acquire)) {
    if (enabled(static_cast<int32_t>(level))) {
      forward_message.load(std::memory_order_relaxed)(static_cast<int32_t>(level), std::string(message).c_str());
    }
    return;
  }
  if (inside_sink || !LogEnabled(level)) return;
  // One line per message: a newline inside would read as two records.
  std::string line(message);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  SinkState& state = State();
  absl::ReaderMutexLock lock(&state.mu);
  if (state.sink == nullptr || static_cast<int32_t>(level) < state.min_level.load(std::memory_order_relaxed)) return;
  struct InsideSink {
    InsideSink() { inside_sink = true; }
    ~InsideSink() { inside_sink = false; }
  } inside;
  state.sink(state.user_data, static_cast<int32_t>(level), line.c_str());
}

}  // namespace kvtier
