// GenerationConfig: the sampling fields of an HF checkpoint's generation_config.json, as
// written there (a field absent or null reads as absent). Types are checked here; ranges
// and what the fields mean for a request are the engine's (engine/request_defaults.h).
// Immutable value type; thread-safe to share.
#ifndef KVTIER_MODEL_GENERATION_CONFIG_H_
#define KVTIER_MODEL_GENERATION_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier {

struct GenerationConfig {
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<int64_t> top_k;
  std::optional<double> top_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
  std::vector<int32_t> eos_token_ids;  // eos_token_id: an integer or a list of them
};

// Parses generation_config.json text (messages name the field; the caller adds the path). Fields kvtier does not use (max_length, num_beams,
// pad_token_id, transformers' bookkeeping) are ignored, as transformers ignores fields it
// does not know. InvalidArgument naming the field for a known field of the wrong type
// (e.g. "temperature": "0.6") or an eos id outside int32, and for text that is not a JSON
// object.
absl::StatusOr<GenerationConfig> ParseGenerationConfig(std::string_view json_text);

}  // namespace kvtier

#endif  // KVTIER_MODEL_GENERATION_CONFIG_H_
