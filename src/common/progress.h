// Progress of a long call (loading a model, creating a context, writing a checkpoint),
// reported stage by stage to a caller's function that may cancel the call. Plain value
// types; a ProgressFn is called on the thread that runs the call.
#ifndef KVTIER_COMMON_PROGRESS_H_
#define KVTIER_COMMON_PROGRESS_H_

#include <cstdint>
#include <functional>
#include <string_view>

#include "absl/status/status.h"

namespace kvtier {

// Called with the stage's name and how much of it is done, in the stage's own unit
// (bytes, tensors, files): every stage reports done = 0 first and done = total last, done
// never decreasing in between. Returns false to cancel the call.
using ProgressFn = std::function<bool(std::string_view stage, int64_t done, int64_t total)>;

// Reports to fn (nothing when fn is empty). Cancelled naming the stage when fn asks to stop.
absl::Status ReportProgress(const ProgressFn& fn, std::string_view stage, int64_t done, int64_t total);

// A stage counted in units: Begin reports 0, Add reports the running total, End reports
// total (once, however the units added up). Each returns Cancelled when fn asks to stop.
class ProgressStage {
 public:
  ProgressStage(const ProgressFn& fn, std::string_view stage, int64_t total)
      : fn_(fn), stage_(stage), total_(total) {}
  absl::Status Begin() { return ReportProgress(fn_, stage_, 0, total_); }
  absl::Status Add(int64_t units);
  absl::Status End() { return ReportProgress(fn_, stage_, total_, total_); }

 private:
  const ProgressFn& fn_;
  std::string_view stage_;
  int64_t total_;
  int64_t done_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_PROGRESS_H_
