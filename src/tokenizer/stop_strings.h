// StopStringMatcher: finds stop strings in streamed text even when they span pieces. It
// releases text as soon as it cannot be the start of a stop string, holds back a tail that
// still could be, and on a match releases exactly the text before the stop string.
// One instance per sequence; not thread-safe.
#ifndef KVTIER_TOKENIZER_STOP_STRINGS_H_
#define KVTIER_TOKENIZER_STOP_STRINGS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::tokenizer {

class StopStringMatcher {
 public:
  // Empty stop strings are ignored.
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Result {
    std::string text;                   // safe to emit now (never part of a stop string)
    std::optional<size_t> stop_index;   // set when a stop string completed: index into the list
  };

  // Feeds the next piece (whole UTF-8 characters). After a stop, further calls return nothing.
  Result Add(std::string_view piece);
  // At the end of a sequence that did not stop: the held-back tail.
  std::string Flush();
  // Bytes currently held back.
  size_t held_bytes() const { return held_.size(); }
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_STOP_STRINGS_H_
