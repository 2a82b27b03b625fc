// Implementation of ContextText (context_text.h).
#include "context_text.h"

namespace kvtier::cli {

std::optional<std::string> ContextText(kvt_context* context, ContextTextFn fn) {
  int32_t len = 0;
  if (fn(context, nullptr, 0, &len) != KVT_OK) return std::nullopt;
  std::string text;
  // Room to spare, so a counter that grows between the calls rarely costs another copy.
  int32_t capacity = len + 1 + 256;
  for (;;) {
    text.assign(static_cast<size_t>(capacity), '\0');
    if (fn(context, text.data(), capacity, &len) != KVT_OK) return std::nullopt;
    if (len < capacity) break;  // all of it, and its NUL
    capacity = len + 1 + 256;
  }
  text.resize(static_cast<size_t>(len));
  return text;
}

}  // namespace kvtier::cli
