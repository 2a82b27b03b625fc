// Interrupts: SIGINT and SIGTERM turned into a flag the commands check between steps, so
// that `kvtier run` and `kvtier bench` can cancel their sequences and free the context (which
// saves the disk cache and its index) before exiting with 128 + the signal number. The
// handler only stores the signal number in a lock-free atomic (async-signal-safe); a second
// signal while the first is being handled ends the process at once, with the default action.
// Process-wide by nature; install once, from the main thread.
#ifndef KVTIER_TOOLS_KVTIER_INTERRUPT_H_
#define KVTIER_TOOLS_KVTIER_INTERRUPT_H_

namespace kvtier::cli {

// Catches SIGINT and SIGTERM from now on.
void InstallInterruptHandlers();

// The number of the first signal caught, 0 while none.
int InterruptSignal();

// 128 + the signal number: the exit status of a command ended by that signal (130 for
// SIGINT, 143 for SIGTERM).
int InterruptExitStatus(int signal_number);

// "SIGINT", "SIGTERM", else "a signal".
const char* InterruptName(int signal_number);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_INTERRUPT_H_
