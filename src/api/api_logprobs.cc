// C API: log-probabilities, read from step events and from sequences.
#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "api/handles.h"

using kvtier::api::Guard;
using kvtier::api::SetContextError;

namespace {

// Copies up to buf_len alternatives into (tokens, logprobs); *out_len gets how many there are.
void CopyTop(const std::vector<kvtier::TokenLogprob>& top, int32_t* tokens, float* logprobs, int32_t buf_len,
             int32_t* out_len) {
  const size_t n = std::min(top.size(), static_cast<size_t>(std::max(buf_len, 0)));
  for (size_t i = 0; i < n; ++i) {
    if (tokens != nullptr) tokens[i] = top[i].token;
    if (logprobs != nullptr) logprobs[i] = top[i].logprob;
  }
  if (out_len != nullptr) *out_len = static_cast<int32_t>(top.size());
}

bool BadBuffer(const void* a, const void* b, int32_t buf_len) {
  return buf_len < 0 || (buf_len > 0 && (a == nullptr || b == nullptr));
}

const kvtier::TokenLogprobs* EventLogprobs(const kvt_events* events, int32_t i) {
  if (events == nullptr || i < 0 || i >= static_cast<int32_t>(events->events.size())) return nullptr;
  const auto& lp = events->events[static_cast<size_t>(i)].logprobs;
  return lp.has_value() ? &*lp : nullptr;
}

// Reads one of the sequence's log-probability lists: `generated` (kvt_request_set_logprobs)
// or the prompt's; KVT_ERR_STATE when the request did not ask for it.
kvt_status ReadList(kvt_context* context, int64_t id, bool generated,
                    const std::function<void(const std::vector<kvtier::TokenLogprobs>&)>& fn) {
  bool asked = true;
  absl::Status read = context->engine->ReadSequence(id, [&](const kvtier::Sequence& seq) {
    asked = (generated ? seq.params.logprobs : seq.params.prompt_logprobs) >= 0;
    if (asked) fn(generated ? seq.generated_logprobs : seq.prompt_logprobs);
  });
  if (read.ok() && !asked) {
    read = absl::FailedPreconditionError(absl::StrCat("sequence ", id, "'s request did not ask for ",
                                                      generated ? "logprobs" : "prompt_logprobs"));
  }
  return SetContextError(context, read);
}

kvt_status CopyValues(kvt_context* context, int64_t id, bool generated, float* buf, int32_t buf_len,
                      int32_t* out_len) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] {
    if (buf_len < 0 || (buf == nullptr && buf_len > 0)) {
      return SetContextError(context, absl::InvalidArgumentError("buffer is NULL or its length negative"));
    }
    return ReadList(context, id, generated, [&](const std::vector<kvtier::TokenLogprobs>& list) {
      const size_t n = std::min(list.size(), static_cast<size_t>(buf_len));
      for (size_t i = 0; i < n; ++i) buf[i] = list[i].logprob;
      if (out_len != nullptr) *out_len = static_cast<int32_t>(list.size());
    });
  });
}

kvt_status CopyAlternatives(kvt_context* context, int64_t id, bool generated, int32_t j, int32_t* tokens,
                            float* logprobs, int32_t buf_len, int32_t* out_len) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] {
    if (BadBuffer(tokens, logprobs, buf_len)) {
      return SetContextError(context, absl::InvalidArgumentError("buffer is NULL or its length negative"));
    }
    bool in_range = true;
    size_t size = 0;
    const kvt_status st = ReadList(context, id, generated, [&](const std::vector<kvtier::TokenLogprobs>& list) {
      size = list.size();
      in_range = j >= 0 && static_cast<size_t>(j) < list.size();
      if (in_range) CopyTop(list[static_cast<size_t>(j)].top, tokens, logprobs, buf_len, out_len);
    });
    if (st != KVT_OK || in_range) return st;
    return SetContextError(context, absl::InvalidArgumentError(absl::StrCat("entry ", j, " out of range [0, ", size, ")")));
  });
}

}  // namespace

extern "C" {

KVT_API kvt_status kvt_events_logprob(const kvt_events* events, int32_t i, float* logprob, int32_t* num_top) {
  if (events == nullptr || i < 0 || i >= static_cast<int32_t>(events->events.size())) return KVT_ERR_INVALID_ARGUMENT;
  const kvtier::TokenLogprobs* lp = EventLogprobs(events, i);
  if (lp == nullptr) return KVT_ERR_NOT_FOUND;
  if (logprob != nullptr) *logprob = lp->logprob;
  if (num_top != nullptr) *num_top = static_cast<int32_t>(lp->top.size());
  return KVT_OK;
}

KVT_API kvt_status kvt_events_top_logprobs(const kvt_events* events, int32_t i, int32_t* tokens, float* logprobs,
                                           int32_t buf_len, int32_t* out_len) {
  if (events == nullptr || i < 0 || i >= static_cast<int32_t>(events->events.size()) ||
      BadBuffer(tokens, logprobs, buf_len)) {
    return KVT_ERR_INVALID_ARGUMENT;
  }
  const kvtier::TokenLogprobs* lp = EventLogprobs(events, i);
  if (lp == nullptr) return KVT_ERR_NOT_FOUND;
  return Guard([&] {
    CopyTop(lp->top, tokens, logprobs, buf_len, out_len);
    return KVT_OK;
  });
}

KVT_API kvt_status kvt_sequence_logprobs(kvt_context* context, int64_t id, float* buf, int32_t buf_len,
                                         int32_t* out_len) {
  return CopyValues(context, id, /*generated=*/true, buf, buf_len, out_len);
}

KVT_API kvt_status kvt_sequence_top_logprobs(kvt_context* context, int64_t id, int32_t j, int32_t* tokens,
                                             float* logprobs, int32_t buf_len, int32_t* out_len) {
  return CopyAlternatives(context, id, /*generated=*/true, j, tokens, logprobs, buf_len, out_len);
}

KVT_API kvt_status kvt_sequence_prompt_logprobs(kvt_context* context, int64_t id, float* buf, int32_t buf_len,
                                                int32_t* out_len) {
  return CopyValues(context, id, /*generated=*/false, buf, buf_len, out_len);
}

KVT_API kvt_status kvt_sequence_prompt_top_logprobs(kvt_context* context, int64_t id, int32_t j, int32_t* tokens,
                                                    float* logprobs, int32_t buf_len, int32_t* out_len) {
  return CopyAlternatives(context, id, /*generated=*/false, j, tokens, logprobs, buf_len, out_len);
}

}  // extern "C"
