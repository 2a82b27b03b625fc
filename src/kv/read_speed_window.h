// ReadSpeedWindow: a tier's RECENT read speed, from its store's cumulative read counts
// (bytes read, and the seconds during which at least one read was in progress: the rate of
// reads in flight together, however many). A window starts at some counts and covers the
// reads since; once it holds window_bytes it is complete, its rate becomes the figure and a
// new window starts. A probe round has a window of its own, closed early (Close) when the
// round is submitted and again when it has landed: the round is a complete measurement, so
// one round replaces an old figure at once, a slow one included.
// The figure: the last complete window's rate (a young window rests on too few reads to
// replace it); before any window completed, the open window's; none before any read.
//
// Why a window and not an exponentially weighted rate: the reads overlap (several reader
// threads), so a read's own time is not the rate and there is no per-read sample to weigh;
// the store's busy clock gives a rate only over an interval, which is what a window is.
// And an average forgets a bad figure only after several fresh ones (or with a weight so
// high that it is a window anyway); a window's figure is wholly the reads of its interval.
// Not thread-safe: the stepping thread's (the counts are snapshots).
#ifndef KVTIER_KV_READ_SPEED_WINDOW_H_
#define KVTIER_KV_READ_SPEED_WINDOW_H_

#include <cstdint>
#include <optional>

#include "common/clock.h"

namespace kvtier {

class ReadSpeedWindow {
 public:
  // Cumulative counts: DiskStoreCounts::bytes_read and read_seconds.
  struct Reads {
    int64_t bytes = 0;
    double seconds = 0;
  };

  explicit ReadSpeedWindow(int64_t window_bytes) : window_bytes_(window_bytes) {}

  // Sees the counts at `now`: notes a read since the last call (last_read_at), and completes
  // the window once it holds window_bytes.
  void Observe(const Reads& total, Clock::TimePoint now);
  // Observe, then ends the window whatever it holds (its rate the figure if it read
  // anything) and starts the next: a probe round starts or has landed.
  void Close(const Reads& total, Clock::TimePoint now);
  // The figure (see the top), in bytes per second; nullopt before any read was counted.
  std::optional<double> BytesPerSecond(const Reads& total) const;
  // When Observe last saw the bytes read grow (nullopt: never).
  std::optional<Clock::TimePoint> last_read_at() const { return last_read_at_; }

 private:
  // The open window's rate at `total`; nullopt while it holds no bytes or no time.
  std::optional<double> OpenRate(const Reads& total) const;
  void Complete(const Reads& total);

  const int64_t window_bytes_;
  Reads start_;                   // the counts when the open window began
  Reads seen_;                    // the counts Observe saw last
  std::optional<double> complete_rate_;  // the last complete window's
  std::optional<Clock::TimePoint> last_read_at_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_READ_SPEED_WINDOW_H_
