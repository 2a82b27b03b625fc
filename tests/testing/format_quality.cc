// ScoreFormats (format_quality.h): doubles throughout, so the measurement adds no error of its own.
#include "testing/format_quality.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvtier::testing {
namespace {

// Log-softmax of one logits row.
void LogSoftmax(const float* logits, int64_t vocab, std::vector<double>* out) {
  out->resize(static_cast<size_t>(vocab));
  double max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) max = std::max(max, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_z = max + std::log(sum);
  for (int64_t i = 0; i < vocab; ++i) (*out)[static_cast<size_t>(i)] = static_cast<double>(logits[i]) - log_z;
}

size_t Argmax(const std::vector<double>& v) { return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin()); }

absl::Status PrefillWindow(Backend* backend, const std::vector<int32_t>& tokens, std::vector<float>* logits) {
  const int64_t bt = backend->kv_layout().block_tokens;
  std::vector<int32_t> table(static_cast<size_t>((static_cast<int64_t>(tokens.size()) + bt - 1) / bt));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  ForwardBatch batch;
  SequenceChunk chunk;
  chunk.tokens = tokens;
  chunk.start_position = 0;
  chunk.block_table = table;
  chunk.all_logits = true;
  batch.chunks.push_back(chunk);
  return backend->Forward(batch, logits);
}

}  // namespace

double FormatScore::KlMean() const {
  if (kl.empty()) return 0;
  double sum = 0;
  for (double v : kl) sum += v;
  return sum / static_cast<double>(kl.size());
}

double FormatScore::KlQuantile(double q) const {
  if (kl.empty()) return 0;
  const size_t i = static_cast<size_t>(q * static_cast<double>(kl.size()));
  return kl[std::min(kl.size() - 1, i)];
}

double FormatScore::Perplexity(int64_t positions) const { return std::exp(nll / static_cast<double>(positions)); }

absl::StatusOr<QualityRun> ScoreFormats(const std::vector<Backend*>& backends, const std::vector<int32_t>& ids,
                                        int64_t window, int64_t max_positions) {
  if (backends.empty()) return absl::InvalidArgumentError("ScoreFormats: no backends");
  if (window < 2) return absl::InvalidArgumentError("ScoreFormats: a window needs at least 2 tokens");
  const int64_t vocab = backends[0]->vocab_size();
  QualityRun run;
  run.scores.resize(backends.size());
  std::vector<float> logits;
  std::vector<std::vector<double>> reference;
  std::vector<double> row;
  for (size_t start = 0; start + 1 < ids.size(); start += static_cast<size_t>(window)) {
    if (max_positions > 0 && run.positions >= max_positions) break;
    const size_t len = std::min(ids.size() - start, static_cast<size_t>(window));
    const std::vector<int32_t> tokens(ids.begin() + static_cast<std::ptrdiff_t>(start),
                                      ids.begin() + static_cast<std::ptrdiff_t>(start + len));
    const size_t scored = len - 1;
    ++run.windows;
    for (size_t k = 0; k < backends.size(); ++k) {
      if (absl::Status s = PrefillWindow(backends[k], tokens, &logits); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("backend ", k, ": ", s.message()));
      }
      if (logits.size() != len * static_cast<size_t>(vocab)) {
        return absl::InternalError(absl::StrCat("backend ", k, ": ", logits.size(), " logits for ", len, " rows"));
      }
      FormatScore& score = run.scores[k];
      if (k == 0) reference.resize(scored);
      for (size_t p = 0; p < scored; ++p) {
        const size_t next = static_cast<size_t>(tokens[p + 1]);
        if (k == 0) {
          LogSoftmax(logits.data() + p * static_cast<size_t>(vocab), vocab, &reference[p]);
          score.nll -= reference[p][next];
          continue;
        }
        LogSoftmax(logits.data() + p * static_cast<size_t>(vocab), vocab, &row);
        const std::vector<double>& ref = reference[p];
        double kl = 0;
        for (size_t i = 0; i < ref.size(); ++i) kl += std::exp(ref[i]) * (ref[i] - row[i]);
        score.kl.push_back(std::max(kl, 0.0));
        score.top1_agree += Argmax(row) == Argmax(ref) ? 1 : 0;
        score.nll -= row[next];
      }
    }
    run.positions += static_cast<int64_t>(scored);
  }
  if (run.positions == 0) return absl::InvalidArgumentError("ScoreFormats: fewer than 2 tokens, nothing to score");
  for (FormatScore& score : run.scores) std::sort(score.kl.begin(), score.kl.end());
  return run;
}

}  // namespace kvtier::testing
