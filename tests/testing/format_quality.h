// What a weight or KV format costs in quality, measured on a text: each backend's next-token
// distributions against a reference backend's (KL divergence, top-1 agreement) and each one's
// perplexity of the text. Shared by kvtier_fp8_quality (CUDA) and the CPU formats' test.
#ifndef KVTIER_TESTS_TESTING_FORMAT_QUALITY_H_
#define KVTIER_TESTS_TESTING_FORMAT_QUALITY_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/backend.h"

namespace kvtier::testing {

// One backend's tally over the scored positions.
struct FormatScore {
  std::vector<double> kl;  // KL(P_reference || P_this) in nats per position, ascending (empty: the reference)
  int64_t top1_agree = 0;  // positions whose argmax equals the reference's
  double nll = 0;          // sum of -log P(the text's next token)

  double KlMean() const;
  double KlQuantile(double q) const;  // q in [0, 1]; 0 for the reference
  double Top1(int64_t positions) const { return static_cast<double>(top1_agree) / static_cast<double>(positions); }
  double Perplexity(int64_t positions) const;
};

struct QualityRun {
  int64_t positions = 0;  // scored positions
  int64_t windows = 0;
  std::vector<FormatScore> scores;  // one per backend, in order; [0] is the reference
};

// Cuts `ids` into consecutive windows of `window` tokens, prefills each from position 0 as
// one chunk with every position's logits on every backend (each needs a KV pool of the
// window's blocks, numbered from 0, and `window` logits rows per step), and scores every
// position but a window's last (it predicts nothing in the text), up to `max_positions`
// (0: all). backends[0] is the reference.
absl::StatusOr<QualityRun> ScoreFormats(const std::vector<Backend*>& backends, const std::vector<int32_t>& ids,
                                        int64_t window, int64_t max_positions);

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_FORMAT_QUALITY_H_
