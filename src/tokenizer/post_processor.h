// PostProcessor: the "post_processor" part of tokenizer.json, adding the special tokens of
// a single sequence (e.g. BOS) when encoding with add_special_tokens. Immutable after
// creation; thread-safe.
#ifndef KVTIER_TOKENIZER_POST_PROCESSOR_H_
#define KVTIER_TOKENIZER_POST_PROCESSOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"

namespace kvtier::tokenizer {

class PostProcessor {
 public:
  using TokenLookup = std::function<std::optional<int32_t>(std::string_view)>;
  virtual ~PostProcessor() = default;

  // Supported types: TemplateProcessing, ByteLevel, Sequence. Null config: nullptr. Other
  // types: Unimplemented. lookup resolves token strings named by a template.
  static absl::StatusOr<std::unique_ptr<PostProcessor>> FromJson(const Json& config,
                                                                 const TokenLookup& lookup);

  virtual std::vector<int32_t> Process(std::vector<int32_t> ids, bool add_special_tokens) const = 0;
};

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_POST_PROCESSOR_H_
