// Decoder: the "decoder" part of tokenizer.json, turning token strings back into text.
// Each decoder rewrites the list of strings (the chain); the results are joined.
// Immutable after creation; thread-safe.
#ifndef KVTIER_TOKENIZER_DECODER_H_
#define KVTIER_TOKENIZER_DECODER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/strings.h"

namespace kvtier::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;

  // Supported types: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace.
  // Null config: nullptr. Other types: Unimplemented. added_contents: the contents of all
  // added tokens, which ByteLevel passes through undecoded; it must outlive the decoder.
  static absl::StatusOr<std::unique_ptr<Decoder>> FromJson(
      const Json& config, const StringSet* added_contents);

  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
  // Rewrites one token's string into the bytes it adds to the decoded text when it stands
  // after other text: raw bytes (no UTF-8 repair, so a token may hold part of a
  // character); steps that depend on position or neighbours (Strip, Fuse, Metaspace's
  // first-token rule) leave it unchanged. Grammar matching reads tokens through this.
  virtual void TokenToBytes(std::string* token) const = 0;
};

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_DECODER_H_
