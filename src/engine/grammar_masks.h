// GrammarMasks: a step's allowed-token masks for its grammar-constrained rows, computed on
// a worker thread (and a few helpers when there are many rows) while the backend runs the
// forward of the same step, into host memory the backend allocated (page-locked on CUDA),
// so the words go straight to the device. Per step: BeginStep, AddRow for each constrained
// row, Start (the backend waits on the returned view before sampling), Finish.
// Thread-safety: everything but the worker's own loop runs on the stepping thread; the
// matchers are read by the worker between Start and Finish and by nobody else then.
#ifndef KVTIER_ENGINE_GRAMMAR_MASKS_H_
#define KVTIER_ENGINE_GRAMMAR_MASKS_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "backend/token_masks.h"
#include "common/thread_pool.h"
#include "grammar/matcher.h"

namespace kvtier {

class GrammarMasks {
 public:
  struct Counters {
    int64_t rows = 0;             // masks computed
    double compute_seconds = 0;   // worker time computing them
    double wait_seconds = 0;      // time the stepping thread waited for them (not hidden)
  };

  // vocab_size: the model's (mask width). num_threads: threads computing one step's masks.
  GrammarMasks(Backend* backend, int32_t vocab_size, int num_threads);
  ~GrammarMasks();
  GrammarMasks(const GrammarMasks&) = delete;
  GrammarMasks& operator=(const GrammarMasks&) = delete;

  void BeginStep(size_t num_logit_rows);
  // Logits row `row` is constrained by matcher. ResourceExhausted when host memory for the
  // masks cannot be had.
  absl::Status AddRow(size_t row, grammar::Matcher* matcher);
  // Starts computing the added rows' masks; the view for ForwardBatch::masks, or nullptr
  // when no row was added.
  const TokenMasks* Start();
  // Returns once the step's masks are computed (at once when none were started).
  void Finish();
  // After Finish: whether the row's mask allowed no token at all.
  bool AllowsNothing(size_t row) const;
  const Counters& counters() const { return counters_; }

 private:
  void WorkerLoop();
  void WaitForMasks();

  Backend* const backend_;
  const int32_t words_per_row_;
  const int num_threads_;
  std::unique_ptr<ThreadPool> pool_;  // with the worker, at the first Start
  uint32_t* storage_ = nullptr;  // (capacity_, words_per_row_) from the backend
  size_t capacity_ = 0;
  TokenMasks view_;
  std::vector<grammar::Matcher*> matchers_;  // per slot
  std::vector<uint8_t> empty_;               // per slot, written by the worker
  Counters counters_;

  // std::mutex: see common/thread_pool.h (TSan and the system abseil).
  std::mutex mu_;
  std::condition_variable cv_;
  bool job_ ABSL_GUARDED_BY(mu_) = false;   // a step's masks are wanted
  bool done_ ABSL_GUARDED_BY(mu_) = true;   // ... and computed
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  double job_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread worker_;  // started at the first Start
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_GRAMMAR_MASKS_H_
