// Test helpers shared by the engine-level tests: random prompts of ordinary token ids and
// greedy sampling that runs to max_new_tokens whatever the model emits.
#ifndef KVTIER_TESTS_TESTING_ENGINE_PROMPTS_H_
#define KVTIER_TESTS_TESTING_ENGINE_PROMPTS_H_

#include <cstdint>
#include <random>
#include <vector>

#include "engine/sampling_params.h"

namespace kvtier::testing {

// `prefix` followed by `length` ids drawn from [3, 503) by a generator seeded with `seed`
// (ids below 3 are left out: the tiny test models use them as special tokens).
inline std::vector<int32_t> Prompt(int seed, int length, const std::vector<int32_t>& prefix = {}) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> ids = prefix;
  for (int i = 0; i < length; ++i) ids.push_back(static_cast<int32_t>(3 + rng() % 500));
  return ids;
}

// Greedy decoding of exactly `max_new` tokens (end-of-sequence ignored).
inline SamplingParams Greedy(int max_new) {
  SamplingParams p;
  p.max_new_tokens = max_new;
  p.ignore_eos = true;
  return p;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_ENGINE_PROMPTS_H_
