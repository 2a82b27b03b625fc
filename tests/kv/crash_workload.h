// What crash_test.cc's child generates and with which options, shared by the child (which
// runs it) and the test (which verifies it): the same requests in every run of a round.
// Pure functions; thread-safe.
#ifndef KVTIER_TESTS_KV_CRASH_WORKLOAD_H_
#define KVTIER_TESTS_KV_CRASH_WORKLOAD_H_

#include <cstdint>
#include <random>
#include <vector>

#include "kvtier/kvtier.h"

namespace kvtier::testing {

inline constexpr int kCrashBlockTokens = 16;
inline constexpr int kCrashConcurrency = 4;  // sequences in flight
inline constexpr int kCrashNewTokens = 40;   // per request
// Requests per round: then the child goes idle (no more steps, as a service with nothing to
// do), so the idle flush is tested too, and a round's blocks fit the disk tier many times.
inline constexpr int kCrashRequestsPerRound = 300;

// The options of every context over the crash test's disk file: the same disk geometry
// (block tokens, disk budget, model) in the child and the test's verifying context.
inline void SetCrashOptions(kvt_options* options, const char* disk_path) {
  kvt_options_set_string(options, "backend", "cpu");
  kvt_options_set_int(options, "threads", 1);
  kvt_options_set_int(options, "block_tokens", kCrashBlockTokens);
  kvt_options_set_string(options, "gpu_kv_bytes", "1MiB");
  kvt_options_set_string(options, "disk_kv_bytes", "48MiB");
  kvt_options_set_string(options, "disk_path", disk_path);
}

// Request k of round r: 20-79 random tokens. Every third request of a round after the first
// repeats request k / 3 of an earlier round (the early requests, which a killed child has
// most likely run; each at most once per round), so the child reads blocks an earlier,
// killed child wrote.
inline std::vector<int32_t> FreshCrashPrompt(int round, int k) {
  std::mt19937 rng(static_cast<uint32_t>(round * 100003 + k));
  std::vector<int32_t> prompt(20 + rng() % 60);
  for (int32_t& t : prompt) t = static_cast<int32_t>(3 + rng() % 250);
  return prompt;
}

inline std::vector<int32_t> CrashPrompt(int round, int k) {
  if (round > 0 && k % 3 == 2) return FreshCrashPrompt((k / 3) % round, k / 3);
  return FreshCrashPrompt(round, k);
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_KV_CRASH_WORKLOAD_H_
