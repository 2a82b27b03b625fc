// The sampler chain: what a step asks of sampling beyond one draw per logits row, what
// comes back, and the host reference (SampleOnHost) that the CPU backend runs and the CUDA
// kernels are tested against. Plain values; SampleOnHost is stateless and thread-safe.
//
// Per sample, in this order (and why):
//   0. log-probabilities, of the raw logits: the model's own distribution, as OpenAI and
//      vLLM report by default and as transformers' compute_transition_scores gives on
//      `output_logits` (normalize_logits=True). Someone scoring text or comparing formats
//      wants the model, not the request's sampling settings.
//   1. structured output's allowed-token mask (masked logits = -inf), when there is one:
//      first, so that nothing after it can revive a forbidden token.
//   2. logit bias (+bias): transformers runs its SequenceBiasLogitsProcessor before the
//      repetition penalty; the bias is the caller's prior, the penalties react to history.
//   3. repetition penalty over the prompt and generated tokens, transformers' semantics:
//      logit > 0 ? logit / p : logit * p.
//   4. frequency and presence penalties over the generated tokens, OpenAI's semantics:
//      logit -= count * frequency + (count > 0) * presence (after repetition, as vLLM).
//   5. temperature, 6. top-k, 7. top-p, 8. min-p: transformers' warper order (SampleRow).
//   9. the draw, from the sequence's own random stream (SampleRow).
// Steps 2-4 touch only the tokens they name, so they travel as a sparse list per logits
// row (TokenAdjustment). Greedy rows take the first maximum after step 4: penalties and
// bias act on greedy decoding too, as in transformers.
#ifndef KVTIER_BACKEND_SAMPLER_CHAIN_H_
#define KVTIER_BACKEND_SAMPLER_CHAIN_H_

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "backend/logprobs.h"
#include "backend/row_sampling.h"

namespace kvtier {

// Steps 2-4 for one token of one logits row. Each token appears at most once per row.
struct TokenAdjustment {
  int32_t token = 0;
  float bias = 0.0f;        // logit bias
  float repetition = 1.0f;  // the repetition penalty when the token is in the context, else 1
  float subtract = 0.0f;    // count * frequency + (count > 0) * presence (PenaltySubtrahend)
};

// What steps 2-4 make of one logit: one rounding per operation, in this order, never a
// fused multiply-add (this file is compiled with -ffp-contract=off; the device uses the
// _rn intrinsics), so the CPU and the GPU produce the same bits.
float AdjustLogit(float logit, const TokenAdjustment& adjustment);
// The frequency and presence penalties of a token generated `count` times, as one
// subtrahend, computed once on the host for both backends.
float PenaltySubtrahend(int32_t count, float frequency_penalty, float presence_penalty);

// Steps 1-4 on one row: `logits` is changed in place.
void ApplyAdjustments(std::span<float> logits, std::span<const TokenAdjustment> adjustments);

// A range of SamplingBatch::adjustments.
struct AdjustmentRange {
  int32_t begin = 0;
  int32_t count = 0;
};

// One token to pick.
struct SampleSpec {
  int32_t logits_row = 0;     // several samples may read one row (parallel sampling)
  RowSampling sampling;       // temperature, top-k, top-p, min-p and the draw
  int32_t top_logprobs = -1;  // -1: no log-probabilities; 0..20: the pick's, and that many alternatives
};

// One known token to score (prompt log-probabilities): its log-probability at a logits row.
struct ScoreSpec {
  int32_t logits_row = 0;
  int32_t target = 0;
  int32_t top_logprobs = 0;  // 0..20 alternatives
};

struct SamplingBatch {
  std::vector<SampleSpec> samples;
  // Per logits row (empty: no row has any), its range of `adjustments`. Adjustments belong
  // to the row, not the sample: samples sharing a row share its history.
  std::vector<AdjustmentRange> row_adjustments;
  std::vector<TokenAdjustment> adjustments;
  std::vector<ScoreSpec> scores;

  void Clear() {
    samples.clear();
    row_adjustments.clear();
    adjustments.clear();
    scores.clear();
  }
};

// A scored position: the token, its log-probability, and its alternatives
// SamplingResult::top[top_begin, top_begin + top_count).
struct LogprobEntry {
  int32_t token = 0;
  float logprob = NAN;  // NaN when not asked for
  int32_t top_begin = 0;
  int32_t top_count = 0;
};

struct SamplingResult {
  std::vector<int32_t> tokens;                // per sample
  std::vector<LogprobEntry> sample_logprobs;  // per sample (logprob NaN when not asked)
  std::vector<LogprobEntry> scores;           // per score
  std::vector<TokenLogprob> top;              // every alternative, in entry order

  void Clear() {
    tokens.clear();
    sample_logprobs.clear();
    scores.clear();
    top.clear();
  }
};

// InvalidArgument naming the sample, score or adjustment unless: every sample and score
// names a row < logit_rows; sampling in range (ValidateOneRowSampling); top_logprobs in
// range; targets and adjusted tokens in [0, vocab), each token once per row, finite bias
// and subtrahend, repetition > 0; row_adjustments empty or one per row, inside adjustments.
absl::Status ValidateSamplingBatch(const SamplingBatch& batch, size_t logit_rows, int64_t vocab);

// The whole chain on the host over `logits` (logit_rows, vocab), already validated: scores
// first (raw rows), then per row its log-probabilities (raw), its adjustments (the rows are
// left adjusted) and its samples. Fills every field of *result.
void SampleOnHost(std::span<float> logits, int64_t vocab, const SamplingBatch& batch,
                  SamplingResult* result);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_SAMPLER_CHAIN_H_
