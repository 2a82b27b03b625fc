// RequestDefaults: what a request's sampling fields are when the request does not set them
// — the checkpoint's generation_config.json where it says something, kvtier's own defaults
// otherwise — and how they combine with what a request sets (a field the request sets
// always wins). Plain value types; thread-safe to share.
#ifndef KVTIER_ENGINE_REQUEST_DEFAULTS_H_
#define KVTIER_ENGINE_REQUEST_DEFAULTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampling_params.h"
#include "model/generation_config.h"
#include "nlohmann/json.hpp"

namespace kvtier {

// How generation_config.json's fields become defaults (transformers' reading of the file):
//  - do_sample true: temperature = the file's (1.0 if absent), top_k = the file's (50 if
//    absent, transformers' default), top_p = the file's (1.0 if absent).
//  - do_sample false or absent: greedy (temperature 0), as transformers' generate() is; the
//    file's top_k / top_p still become the defaults a request that sets a temperature uses.
//  - repetition_penalty, max_new_tokens: the file's when present.
//  - eos_token_id: added to the model's stop ids (Engine), not a request field.
// Without a file (or for fields it lacks): greedy, top_k 0 (off), top_p 1, repetition
// penalty 1 (off), 16 new tokens.
struct RequestDefaults {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float repetition_penalty = 1.0f;
  int32_t max_new_tokens = 16;
  // The names of the fields that came from generation_config.json (for inspect).
  std::vector<std::string> from_generation_config;
};

// The defaults a checkpoint's generation config gives. InvalidArgument naming the field
// (e.g. "generation_config.json: field 'top_p' must be in (0, 1], got 1.5") for a value
// outside the range kvtier's request setter for that field accepts.
absl::StatusOr<RequestDefaults> RequestDefaultsFrom(const GenerationConfig& config);

// The sampling fields a request set explicitly (its setters mark them).
struct ExplicitSamplingFields {
  bool temperature = false;
  bool top_k = false;
  bool top_p = false;
  bool repetition_penalty = false;
  bool max_new_tokens = false;
};

// params with every field the request did not set replaced by its default.
SamplingParams ApplyRequestDefaults(const RequestDefaults& defaults, const ExplicitSamplingFields& set,
                                    SamplingParams params);

// {"do_sample", "temperature", "top_k", "top_p", "repetition_penalty", "max_new_tokens",
//  "eos_token_ids", "from_generation_config"}: the defaults in force, for model info and
// `kvtier inspect`. eos_token_ids are generation_config.json's (the model's own are in
// config.json).
nlohmann::ordered_json RequestDefaultsJson(const RequestDefaults& defaults, const GenerationConfig& config);

}  // namespace kvtier

#endif  // KVTIER_ENGINE_REQUEST_DEFAULTS_H_
