// ReportProgress and ProgressStage (progress.h).
#include "common/progress.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvtier {

absl::Status ReportProgress(const ProgressFn& fn, std::string_view stage, int64_t done, int64_t total) {
  if (!fn || fn(stage, done, total)) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat("cancelled by the progress callback during '", std::string(stage), "'"));
}

absl::Status ProgressStage::Add(int64_t units) {
  // Clamped: a stage whose units overshoot its estimate still never reports past its total.
  done_ = std::min(total_, done_ + std::max<int64_t>(0, units));
  return ReportProgress(fn_, stage_, done_, total_);
}

}  // namespace kvtier
