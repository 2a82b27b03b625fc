// Clock: where code that measures a speed or an age reads the time — the steady clock, or a
// test's fake one (tests/testing/fake_clock.h) so that what it measures is exact and an age
// passes without sleeping. Implementations are thread-safe (the disk reader threads read it).
#ifndef KVTIER_COMMON_CLOCK_H_
#define KVTIER_COMMON_CLOCK_H_

#include <chrono>

namespace kvtier {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;

  // The process's steady clock.
  static const Clock* Steady();
  // `clock`, or the steady clock where none is given (an option left unset).
  static const Clock* OrSteady(const Clock* clock) { return clock != nullptr ? clock : Steady(); }
};

class SteadyClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
};

inline const Clock* Clock::Steady() {
  static const SteadyClock clock;
  return &clock;
}

// Seconds of the steady clock since `start` (a duration the process reports, not one a test fakes).
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace kvtier

#endif  // KVTIER_COMMON_CLOCK_H_
