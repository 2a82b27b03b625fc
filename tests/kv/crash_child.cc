// The child process of crash_test.cc: generates with a disk tier through the C API, as a
// service would, until it is killed, and reports on stdout (one line each, flushed):
//   ready                      the context is created
//   P <k> <t,t,...>            request k was added with this prompt
//   G <k> <token>              request k generated a token
//   B <k> <n> <monotonic ns>   request k's first n blocks are full (their K/V computed): a
//                              block is reported once the step that computed its last
//                              position has returned, so no later than it was full
// Usage: kv_crash_child MODEL_DIR DISK_PATH ROUND HOST_KV_BYTES
// Requests are the same in every run of a round (CrashPrompt); some rounds reuse prompts
// of earlier rounds, so the child itself reads blocks an earlier, killed child wrote. After
// kCrashRequestsPerRound requests it idles without stepping until killed.
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "kv/crash_workload.h"
#include "kvtier/kvtier.h"

namespace {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int Die(const char* what, const char* message) {
  std::fprintf(stderr, "kv_crash_child: %s: %s\n", what, message);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) return Die("usage", "kv_crash_child MODEL_DIR DISK_PATH ROUND HOST_KV_BYTES");
  const int round = std::atoi(argv[3]);
  char err[512];
  kvt_model* model = nullptr;
  if (kvt_model_load(argv[1], &model, err, sizeof err) != KVT_OK) return Die("model", err);
  kvt_options* options = nullptr;
  kvt_options_create(&options);
  kvtier::testing::SetCrashOptions(options, argv[2]);
  kvt_options_set_string(options, "host_kv_bytes", argv[4]);
  kvt_context* context = nullptr;
  if (kvt_context_create(model, options, &context, err, sizeof err) != KVT_OK) return Die("context", err);
  std::printf("ready\n");
  std::fflush(stdout);
  kvt_events* events = nullptr;
  kvt_events_create(&events);
  std::map<int64_t, int> request_of;                // sequence id -> request index
  std::map<int, int64_t> tokens_of, reported_of;    // request -> tokens so far, full blocks reported
  int next = 0;
  while (true) {
    if (request_of.empty() && next == kvtier::testing::kCrashRequestsPerRound) {
      std::fflush(stdout);
      pause();  // idle, as a service with nothing to do, until killed
    }
    while (static_cast<int>(request_of.size()) < kvtier::testing::kCrashConcurrency &&
           next < kvtier::testing::kCrashRequestsPerRound) {
      const std::vector<int32_t> prompt = kvtier::testing::CrashPrompt(round, next);
      kvt_request* request = nullptr;
      kvt_request_create(&request);
      kvt_request_set_prompt_tokens(request, prompt.data(), static_cast<int32_t>(prompt.size()));
      kvt_request_set_max_new_tokens(request, kvtier::testing::kCrashNewTokens);
      kvt_request_set_ignore_eos(request, 1);
      int64_t id = 0;
      if (kvt_sequence_add(context, request, &id) != KVT_OK) return Die("add", kvt_context_errmsg(context));
      kvt_request_free(request);
      std::printf("P %d ", next);
      for (size_t i = 0; i < prompt.size(); ++i) std::printf(i == 0 ? "%d" : ",%d", prompt[i]);
      std::printf("\n");
      request_of[id] = next;
      tokens_of[next] = static_cast<int64_t>(prompt.size());
      ++next;
    }
    if (kvt_step(context, events) != KVT_OK) return Die("step", kvt_context_errmsg(context));
    const int64_t now = MonotonicNs();
    for (int32_t i = 0; i < kvt_events_count(events); ++i) {
      int64_t seq = 0;
      int32_t token = 0, finish = 0;
      kvt_events_get(events, i, &seq, &token, &finish);
      const int k = request_of.at(seq);
      if (token != KVT_NO_TOKEN) {
        std::printf("G %d %d\n", k, token);
        ++tokens_of[k];
      }
      // Every position but the last sampled token's has its K/V computed.
      const int64_t full = (tokens_of[k] - 1) / kvtier::testing::kCrashBlockTokens;
      if (full > reported_of[k]) {
        std::printf("B %d %lld %lld\n", k, static_cast<long long>(full), static_cast<long long>(now));
        reported_of[k] = full;
      }
      if (finish != KVT_FINISH_REASON_NONE) {
        request_of.erase(seq);
        kvt_sequence_release(context, seq);
      }
    }
    std::fflush(stdout);
  }
}
