// Implementation of the interrupt flag (interrupt.h).
#include "interrupt.h"

#include <signal.h>

#include <atomic>

namespace kvtier::cli {
namespace {

std::atomic<int> caught_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

void OnSignal(int signal_number) {
  int expected = 0;
  if (!caught_signal.compare_exchange_strong(expected, signal_number)) {
    // Second signal: the user insists. Default action (terminate) without cleaning up.
    ::signal(signal_number, SIG_DFL);
    ::raise(signal_number);
  }
}

}  // namespace

void InstallInterruptHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // I/O in progress continues; the flag is read between steps
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int InterruptSignal() { return caught_signal.load(); }

int InterruptExitStatus(int signal_number) { return 128 + signal_number; }

const char* InterruptName(int signal_number) {
  switch (signal_number) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace kvtier::cli
