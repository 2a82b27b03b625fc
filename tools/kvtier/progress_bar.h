// ProgressBar: shows the progress reports of a long CLI step (loading a model, creating a
// context, writing a checkpoint, running a benchmark) on stderr — a bar redrawn in place
// when stderr is a terminal; plain lines when it is a pipe or a file, so logs stay readable:
// one line as each stage ends, and one per quarter of a stage that takes over a second.
// Stages with nothing to do (total 0) are not shown. Not thread-safe: one thread reports.
#ifndef KVTIER_TOOLS_KVTIER_PROGRESS_BAR_H_
#define KVTIER_TOOLS_KVTIER_PROGRESS_BAR_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace kvtier::cli {

class ProgressBar {
 public:
  // label: what is going on ("loading model"). Draws a bar when `out` is a terminal.
  explicit ProgressBar(std::string label, FILE* out = stderr);
  ProgressBar(std::string label, FILE* out, bool terminal);
  ~ProgressBar();  // ends a bar's line
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // One report: the stage and how far it is (stages named "weights" count bytes).
  void Update(const std::string& stage, int64_t done, int64_t total);
  // Ends the current line on a terminal (later output starts on a fresh line).
  void Finish();

  // Makes Callback ask the reporting call to stop once `cancel` returns true (e.g. when a
  // SIGINT was caught: the load or context creation then ends with KVT_ERR_CANCELLED).
  void CancelWhen(std::function<bool()> cancel) { cancel_ = std::move(cancel); }

  // A kvt_progress_fn whose user_data is a ProgressBar: reports, and cancels when the
  // CancelWhen predicate says so (never without one).
  static int32_t Callback(void* user_data, const char* stage, int64_t done, int64_t total);

 private:
  void DrawBar(int64_t done, int64_t total);
  std::string Amount(int64_t done, int64_t total) const;

  const std::string label_;
  FILE* const out_;
  const bool terminal_;
  std::string stage_;             // the stage being shown
  int last_quarter_ = -1;         // pipes: the last quarter printed for stage_
  int last_percent_ = -1;         // terminals: the last percentage drawn
  bool line_open_ = false;        // terminals: a bar is on the current line
  std::chrono::steady_clock::time_point stage_start_;
  std::chrono::steady_clock::time_point last_draw_;
  std::function<bool()> cancel_;  // empty: never cancels
};

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_PROGRESS_BAR_H_
