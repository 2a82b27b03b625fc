// What `kvtier run` shows of the sequences it runs. By default the generated text as it comes:
// one sequence's text straight to stdout, several sequences in the live view (live_view.h:
// redrawn lines on a terminal, one plain line per sequence when piped). --events prints one
// line per step event and a summary; --json one object at the end; --live the live view and
// the tiers. Token ids stand for the text when the model has no tokenizer. Not thread-safe
// (CLI only).
#ifndef KVTIER_TOOLS_KVTIER_RUN_OUTPUT_H_
#define KVTIER_TOOLS_KVTIER_RUN_OUTPUT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/kvtier.h"
#include "live_view.h"
#include "nlohmann/json.hpp"

namespace kvtier::cli {

enum class RunView {
  kText,    // the text as it comes (the default)
  kLive,    // --live: the live view, then the tiers and what the cache did
  kEvents,  // --events: a line per event (token or piece, log-probabilities, finish), a summary
  kJson,    // --json: one object with every sequence and the statistics
};

const char* FinishName(int32_t reason);

// What the sequences produced, filled from the step events.
struct RunRecord {
  std::vector<int64_t> ids;  // every sequence, in the order shown
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, std::string> texts;
  std::map<int64_t, int32_t> finish;
  std::map<int64_t, nlohmann::json> logprobs;       // with --logprobs
  std::map<int64_t, std::vector<int32_t>> prompts;  // first completion of a prompt -> its ids, when known

  // Appends one step's events.
  void Record(const kvt_events* events);
  // What sequence id has produced so far: its text, or its token ids when there is no text.
  std::string Shown(int64_t id, bool text) const;
};

// Shows the sequences' output as the steps produce it, then the end of the run.
class RunOutput {
 public:
  // text: the model has a tokenizer. prompts: each text prompt by its first sequence, shown
  // before its continuation in the live view.
  RunOutput(RunView view, bool text, const std::vector<int64_t>& ids, std::map<int64_t, std::string> prompts);

  // After a step whose events `record` has recorded.
  void AfterStep(const kvt_events* events, const RunRecord& record);
  // When the run ends: the --json object, the --events summary, or the --live tiers.
  void Finish(const RunRecord& record, const nlohmann::json& stats, int32_t logprobs, int32_t prompt_logprobs,
              kvt_context* context);

 private:
  void PrintEvents(const kvt_events* events) const;

  RunView view_;
  bool text_;
  std::optional<LiveView> live_;  // kLive, and kText with several sequences
  size_t streamed_ = 0;           // kText with one sequence: bytes of it printed
};

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_RUN_OUTPUT_H_
