// C API: kvt_step and the kvt_events it fills.
#include "api/handles.h"

extern "C" {

KVT_API kvt_status kvt_events_create(kvt_events** out) {
  if (out == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    *out = new kvt_events();
    return KVT_OK;
  });
}

KVT_API void kvt_events_free(kvt_events* events) { delete events; }

KVT_API int32_t kvt_events_count(const kvt_events* events) {
  return events == nullptr ? 0 : static_cast<int32_t>(events->events.size());
}

KVT_API kvt_status kvt_events_get(const kvt_events* events, int32_t i, int64_t* seq_id, int32_t* token,
                                  int32_t* finish_reason) {
  if (events == nullptr || i < 0 || i >= static_cast<int32_t>(events->events.size())) return KVT_ERR_INVALID_ARGUMENT;
  const kvtier::StepEvent& event = events->events[static_cast<size_t>(i)];
  if (seq_id != nullptr) *seq_id = event.sequence;
  if (token != nullptr) *token = event.token.value_or(KVT_NO_TOKEN);
  if (finish_reason != nullptr) *finish_reason = static_cast<int32_t>(event.finish);
  return KVT_OK;
}

KVT_API kvt_status kvt_events_text(const kvt_events* events, int32_t i, const char** text, int32_t* text_len) {
  if (events == nullptr || i < 0 || i >= static_cast<int32_t>(events->events.size()) || text == nullptr) {
    return KVT_ERR_INVALID_ARGUMENT;
  }
  const std::string& piece = events->events[static_cast<size_t>(i)].text;
  *text = piece.c_str();
  if (text_len != nullptr) *text_len = static_cast<int32_t>(piece.size());
  return KVT_OK;
}

KVT_API kvt_status kvt_step(kvt_context* context, kvt_events* events) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    std::vector<kvtier::StepEvent>& out = events != nullptr ? events->events : context->scratch_events;
    out.clear();
    return kvtier::api::SetContextError(context, context->engine->Step(&out));
  });
}

}  // extern "C"
