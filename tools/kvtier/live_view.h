// `kvtier run --live`: each sequence's text as it grows, one line per sequence. On a terminal
// the lines are redrawn in place after every step (the end of the text when it is wider than
// the terminal); otherwise each sequence is printed once, as one plain line, when it
// finishes. Then the tiers and, in words, what the cache did. Not thread-safe (CLI only).
#ifndef KVTIER_TOOLS_KVTIER_LIVE_VIEW_H_
#define KVTIER_TOOLS_KVTIER_LIVE_VIEW_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvtier::cli {

class LiveView {
 public:
  // ids: the sequences in the order their lines are shown; prompts: each one's prompt text
  // (shown before its continuation; may be shorter than ids).
  LiveView(std::vector<int64_t> ids, std::map<int64_t, std::string> prompts);

  // After a step: the texts so far and the finish reasons (names) of the finished ones.
  void Update(const std::map<int64_t, std::string>& texts, const std::map<int64_t, std::string>& finished);

  // The per-tier table and the cache's story from the context's stats JSON.
  static void PrintTiers(const nlohmann::json& stats);

 private:
  std::string Line(int64_t id, const std::string& text, const std::string& finish, size_t width) const;

  std::vector<int64_t> ids_;
  std::map<int64_t, std::string> prompts_;
  std::map<int64_t, bool> printed_;  // plain mode: already printed
  bool terminal_;
  bool drawn_ = false;
};

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_LIVE_VIEW_H_
