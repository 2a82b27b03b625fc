// ReadSpeedWindow (read_speed_window.h): the window's bookkeeping.
#include "kv/read_speed_window.h"

namespace kvtier {

void ReadSpeedWindow::Observe(const Reads& total, Clock::TimePoint now) {
  if (total.bytes > seen_.bytes) last_read_at_ = now;
  seen_ = total;
  if (total.bytes - start_.bytes >= window_bytes_ && OpenRate(total).has_value()) Complete(total);
}

void ReadSpeedWindow::Close(const Reads& total, Clock::TimePoint now) {
  Observe(total, now);
  Complete(total);
}

std::optional<double> ReadSpeedWindow::BytesPerSecond(const Reads& total) const {
  const std::optional<double> open = OpenRate(total);
  // A window full since the last Observe is complete already (Observe would complete it).
  if (open.has_value() && total.bytes - start_.bytes >= window_bytes_) return open;
  return complete_rate_.has_value() ? complete_rate_ : open;
}

std::optional<double> ReadSpeedWindow::OpenRate(const Reads& total) const {
  const int64_t bytes = total.bytes - start_.bytes;
  const double seconds = total.seconds - start_.seconds;
  if (bytes <= 0 || seconds <= 0) return std::nullopt;
  return static_cast<double>(bytes) / seconds;
}

void ReadSpeedWindow::Complete(const Reads& total) {
  // A window that read nothing (failed reads count time, not bytes) leaves the figure.
  if (const std::optional<double> rate = OpenRate(total)) complete_rate_ = rate;
  start_ = total;
}

}  // namespace kvtier
