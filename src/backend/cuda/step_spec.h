// StepSpec: how the CUDA backend runs one piece of a batch (a sub-step that fits its
// workspace) — what the step hands back and the logits rows it reads. Each forward entry
// point of CudaBackend fills one and passes it by value. Plain value.
#ifndef KVTIER_BACKEND_CUDA_STEP_SPEC_H_
#define KVTIER_BACKEND_CUDA_STEP_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/row_sampling.h"
#include "backend/sampler_chain.h"
#include "backend/token_masks.h"

namespace kvtier::cuda {

// What a step hands back once its forward ran.
enum class StepOutput {
  kLogits,   // every logits row, copied to `StepSpec::logits` (Forward)
  kArgmax,   // each row's greedy token, picked on the device (ForwardGreedy)
  kSampled,  // each row's token sampled on the device with StepSpec::sampling (ForwardSampled)
  kChain,    // the sampler chain run on the device (ForwardAndSample)
};

// The sampler chain's share of one piece: the samples (indices into batch->samples, ordered
// by row) reading its logits rows, which are the step's rows from first_row on.
struct ChainPiece {
  const SamplingBatch* batch = nullptr;
  std::span<const int32_t> samples;
  int64_t first_row = 0;
  SamplingResult* result = nullptr;
};

struct StepSpec {
  StepOutput output = StepOutput::kLogits;
  // kLogits: host destination of the piece's logits rows (num_logit_rows x vocab floats).
  float* logits = nullptr;
  // kSampled: one per logits row of the piece.
  std::span<const RowSampling> sampling;
  // Every output but kLogits: the batch's grammar masks (null: none), applied before the
  // pick; the piece's rows start at first_row of the batch.
  const TokenMasks* masks = nullptr;
  size_t first_row = 0;
  ChainPiece chain;  // kChain

  // Token ids picked on the device and copied back (argmax or sampled).
  bool picks_ids() const { return output == StepOutput::kArgmax || output == StepOutput::kSampled; }
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_STEP_SPEC_H_
