// StopStringMatcher: earliest stop string in the held text plus the new piece.
#include "tokenizer/stop_strings.h"

#include <algorithm>

namespace kvtier::tokenizer {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (std::string& s : stop_strings) {
    if (s.empty()) continue;
    stops_.push_back(std::move(s));
  }
}

StopStringMatcher::Result StopStringMatcher::Add(std::string_view piece) {
  Result result;
  if (stopped_) return result;
  held_.append(piece);
  // Earliest start among the stop strings now present; held_ never contains a whole one
  // from before, so only matches ending in the new piece are possible.
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    size_t at = held_.find(stops_[i]);
    if (at != std::string::npos && (best == std::string::npos || at < best)) {
      best = at;
      result.stop_index = i;
    }
  }
  if (result.stop_index.has_value()) {
    result.text = held_.substr(0, best);
    held_.clear();
    stopped_ = true;
    return result;
  }
  // Hold back the longest tail that is a proper prefix of some stop string. Stop strings
  // are whole characters, so the cut lies on a character boundary.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    for (size_t len = std::min(stop.size() - 1, held_.size()); len > keep; --len) {
      if (std::string_view(held_).substr(held_.size() - len) == std::string_view(stop).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  result.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return result;
}

std::string StopStringMatcher::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace kvtier::tokenizer
