// Waiting in a test for something another thread makes true, without a fixed sleep: a
// busy CI machine can hold a thread far longer than a sleep allows for.
#ifndef KVTIER_TESTS_TESTING_WAIT_UNTIL_H_
#define KVTIER_TESTS_TESTING_WAIT_UNTIL_H_

#include <chrono>
#include <thread>

namespace kvtier::testing {

// Polls `done` every millisecond until it returns true (true) or `timeout` has passed
// (false: the caller's assertion then fails on the state it sees).
template <typename Done>
bool WaitUntil(Done done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_WAIT_UNTIL_H_
