// Sampler: picks the next token from one row of logits — greedy, temperature, top-k,
// top-p — using the sequence's own random stream, so results do not depend on which
// other sequences share the batch. Stateless apart from the caller's Rng; thread-safe.
#ifndef KVTIER_ENGINE_SAMPLER_H_
#define KVTIER_ENGINE_SAMPLER_H_

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "backend/row_sampling.h"
#include "engine/sampling_params.h"

namespace kvtier {

// mt19937_64's output sequence is fixed by the C++ standard, so a seed reproduces the
// same tokens on every platform; doubles are formed from it by our own code for the same
// reason (the standard distributions are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  double NextUnit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  std::mt19937_64 engine_;
};

// The sequence's parameters for its next token, with the token's one draw from rng taken
// now (none when greedy), so the draws do not depend on where the sampling runs.
RowSampling DrawRowSampling(const SamplingParams& params, Rng& rng);

// Greedy: the first index of the maximum. Otherwise softmax(logits / T) restricted to the
// top_k most likely and then to the smallest prefix whose mass reaches top_p, renormalised,
// sampled with one draw from rng (SampleRow with DrawRowSampling's draw). `scratch` avoids
// per-call allocation.
int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, Rng& rng,
                    std::vector<std::pair<float, int32_t>>* scratch);

}  // namespace kvtier

#endif  // KVTIER_ENGINE_SAMPLER_H_
