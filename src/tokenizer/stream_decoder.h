// StreamDecoder: turns ids arriving one at a time into text pieces that never split a
// UTF-8 character and concatenate to Decode(all ids). It decodes a short window of recent
// ids twice (with and without the newest) and emits the difference, holding text back while
// it ends in an incomplete character (U+FFFD from a partial byte sequence); the window
// keeps decoder context such as sentencepiece's leading-space strip consistent. When the
// tokenizer cleans up spaces (" ." -> "."), that runs on the text stream, holding back a
// tail a later rule could still change.
// One instance per sequence; not thread-safe. The tokenizer must outlive it.
#ifndef KVTIER_TOKENIZER_STREAM_DECODER_H_
#define KVTIER_TOKENIZER_STREAM_DECODER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizer/tokenizer.h"

namespace kvtier::tokenizer {

class StreamDecoder {
 public:
  // context: ids before the streamed ones (e.g. the prompt). They are never emitted but give
  // the first streamed pieces their context (a leading space after the prompt, not stripped).
  StreamDecoder(const Tokenizer* tokenizer, DecodeOptions options,
                absl::Span<const int32_t> context = {});

  // The text that id completes; often empty. InvalidArgument for an id outside the vocabulary.
  absl::StatusOr<std::string> Add(int32_t id);
  // Text still held back (an incomplete character at the end), emitted as U+FFFD as Decode
  // would. Call once when the sequence ends.
  absl::StatusOr<std::string> Flush();

 private:
  const Tokenizer* tokenizer_;
  absl::StatusOr<std::string> AddRaw(int32_t id);
  absl::StatusOr<std::string> FlushRaw();
  // Runs clean-up on text up to the last point no rule can match across.
  std::string CleanUp(std::string raw, bool final);

  DecodeOptions options_;  // clean-up off: done by CleanUp instead
  bool clean_up_ = false;
  std::string pending_;  // raw text not yet cleaned up and emitted
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // start of the decode window
  size_t read_offset_ = 0;    // ids before this are emitted
};

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_STREAM_DECODER_H_
