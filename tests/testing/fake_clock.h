// FakeClock: a Clock (common/clock.h) that stands still until a test advances it, so that
// a measured speed and an age are exact and pass without sleeping. Thread-safe (the disk
// reader threads read it while a test's file advances it).
#ifndef KVTIER_TESTS_TESTING_FAKE_CLOCK_H_
#define KVTIER_TESTS_TESTING_FAKE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/clock.h"

namespace kvtier::testing {

class FakeClock final : public Clock {
 public:
  TimePoint Now() const override { return TimePoint(std::chrono::nanoseconds(nanos_.load())); }
  void Advance(std::chrono::nanoseconds d) { nanos_.fetch_add(d.count()); }

 private:
  // Far from the epoch, so that "an age since never" cannot look recent.
  std::atomic<int64_t> nanos_{int64_t{1000} * 1000 * 1000 * 1000};
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_FAKE_CLOCK_H_
