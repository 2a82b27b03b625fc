// C API: sequences — add, cancel, read state and tokens, release, generate.
#include "absl/strings/str_cat.h"
#include "api/handles.h"

using kvtier::api::Guard;
using kvtier::api::SetContextError;

namespace {

enum class Tokens { kPrompt, kGenerated };

// Up to buf_len of a sequence's prompt tokens, or of the tokens it generated; *out_len gets
// how many there are.
kvt_status CopyTokens(kvt_context* context, int64_t id, Tokens which, int32_t* buf, int32_t buf_len,
                      int32_t* out_len) {
  const bool prompt = which == Tokens::kPrompt;
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] {
    if (buf_len < 0 || (buf == nullptr && buf_len > 0)) {
      return SetContextError(context, absl::InvalidArgumentError("token buffer is NULL or its length negative"));
    }
    return SetContextError(context, context->engine->ReadSequence(id, [&](const kvtier::Sequence& seq) {
      const int64_t first = prompt ? 0 : seq.num_prompt_tokens;
      const int64_t n = prompt ? seq.num_prompt_tokens : seq.num_generated();
      const int64_t copy = std::min<int64_t>(n, buf_len);
      for (int64_t i = 0; i < copy; ++i) buf[i] = seq.tokens[static_cast<size_t>(first + i)];
      if (out_len != nullptr) *out_len = static_cast<int32_t>(n);
    }));
  });
}

}  // namespace

extern "C" {

KVT_API kvt_status kvt_sequence_add(kvt_context* context, const kvt_request* request, int64_t* out_id) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] {
    if (request == nullptr || out_id == nullptr) {
      return SetContextError(context, absl::InvalidArgumentError(request == nullptr ? "request handle is NULL"
                                                                                    : "output id pointer is NULL"));
    }
    std::vector<int32_t> prompt = request->prompt;
    const auto& tokenizer = context->model->tokenizer;
    if (request->prompt_kind == kvt_request::PromptKind::kText ||
        request->prompt_kind == kvt_request::PromptKind::kChat) {
      if (tokenizer == nullptr) {
        return SetContextError(context, absl::UnimplementedError(
                                            "a text or chat prompt needs a tokenizer, and this model has no tokenizer.json"));
      }
      std::string text = request->prompt_text;
      kvtier::tokenizer::EncodeOptions encode;
      if (request->prompt_kind == kvt_request::PromptKind::kChat) {
        auto formatted = tokenizer->ApplyChatTemplate(request->chat, /*add_generation_prompt=*/true);
        if (!formatted.ok()) return SetContextError(context, formatted.status());
        text = std::move(*formatted);
        encode.add_special_tokens = false;  // the template already holds BOS and markers
      }
      auto ids = tokenizer->Encode(text, encode);
      if (!ids.ok()) return SetContextError(context, ids.status());
      prompt = std::move(*ids);
    }
    auto id = context->engine->Add(
        std::move(prompt),
        kvtier::ApplyRequestDefaults(context->model->request_defaults, request->explicit_fields, request->params));
    if (!id.ok()) return SetContextError(context, id.status());
    *out_id = *id;
    return KVT_OK;
  });
}

KVT_API kvt_status kvt_sequence_cancel(kvt_context* context, int64_t id) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] { return SetContextError(context, context->engine->Cancel(id)); });
}

KVT_API kvt_status kvt_sequence_status(kvt_context* context, int64_t id, int32_t* state, int32_t* finish_reason) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] {
    return SetContextError(context, context->engine->ReadSequence(id, [&](const kvtier::Sequence& seq) {
      if (state != nullptr) *state = static_cast<int32_t>(seq.state);
      if (finish_reason != nullptr) *finish_reason = static_cast<int32_t>(seq.finish);
    }));
  });
}

KVT_API kvt_status kvt_sequence_tokens(kvt_context* context, int64_t id, int32_t* buf, int32_t buf_len,
                                       int32_t* out_len) {
  return CopyTokens(context, id, Tokens::kGenerated, buf, buf_len, out_len);
}

KVT_API kvt_status kvt_sequence_prompt_tokens(kvt_context* context, int64_t id, int32_t* buf, int32_t buf_len,
                                              int32_t* out_len) {
  return CopyTokens(context, id, Tokens::kPrompt, buf, buf_len, out_len);
}

KVT_API kvt_status kvt_sequence_text(kvt_context* context, int64_t id, char* buf, int32_t buf_len, int32_t* out_len) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] {
    if (buf_len < 0 || (buf == nullptr && buf_len > 0)) {
      return SetContextError(context, absl::InvalidArgumentError("text buffer is NULL or its length negative"));
    }
    if (context->model->tokenizer == nullptr) {
      return SetContextError(context, absl::UnimplementedError("this model has no tokenizer.json: no text"));
    }
    return SetContextError(context, context->engine->ReadSequence(id, [&](const kvtier::Sequence& seq) {
      if (out_len != nullptr) *out_len = static_cast<int32_t>(seq.text.size());
      kvtier::api::CopyToBuffer(seq.text, buf, buf_len);
    }));
  });
}

KVT_API kvt_status kvt_sequence_error(kvt_context* context, int64_t id, char* buf, int32_t buf_len, int32_t* out_len) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] {
    if (buf_len < 0 || (buf == nullptr && buf_len > 0)) {
      return SetContextError(context, absl::InvalidArgumentError("error buffer is NULL or its length negative"));
    }
    return SetContextError(context, context->engine->ReadSequence(id, [&](const kvtier::Sequence& seq) {
      if (out_len != nullptr) *out_len = static_cast<int32_t>(seq.error.size());
      kvtier::api::CopyToBuffer(seq.error, buf, buf_len);
    }));
  });
}

KVT_API kvt_status kvt_sequence_release(kvt_context* context, int64_t id) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] { return SetContextError(context, context->engine->Release(id)); });
}

KVT_API int32_t kvt_context_num_unfinished(kvt_context* context) {
  if (context == nullptr) return 0;
  return static_cast<int32_t>(context->engine->NumUnfinished());
}

KVT_API kvt_status kvt_generate(kvt_context* context, const kvt_request* request, int32_t* buf, int32_t buf_len,
                                int32_t* out_len, int32_t* finish_reason) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] {
    if (buf_len < 0 || (buf == nullptr && buf_len > 0)) {
      return SetContextError(context, absl::InvalidArgumentError("token buffer is NULL or its length negative"));
    }
    if (request != nullptr && request->params.n > 1) {
      return SetContextError(context, absl::InvalidArgumentError(absl::StrCat(
                                          "kvt_generate runs one completion; the request asks for n = ", request->params.n,
                                          ": add it with kvt_sequence_add and step")));
    }
    int64_t id = 0;
    if (kvt_status s = kvt_sequence_add(context, request, &id); s != KVT_OK) return s;
    while (true) {
      bool done = false;
      absl::Status read = context->engine->ReadSequence(id, [&](const kvtier::Sequence& seq) { done = seq.finished(); });
      if (!read.ok()) return SetContextError(context, read);
      if (done) break;
      context->scratch_events.clear();
      absl::Status step = context->engine->Step(&context->scratch_events);
      if (!step.ok()) {
        context->engine->Cancel(id).IgnoreError();
        return SetContextError(context, step);
      }
    }
    absl::Status read = context->engine->ReadSequence(id, [&](const kvtier::Sequence& seq) {
      const int64_t n = seq.num_generated();
      for (int64_t i = 0; i < std::min<int64_t>(n, buf_len); ++i) {
        buf[i] = seq.tokens[static_cast<size_t>(seq.num_prompt_tokens + i)];
      }
      if (out_len != nullptr) *out_len = static_cast<int32_t>(n);
      if (finish_reason != nullptr) *finish_reason = static_cast<int32_t>(seq.finish);
    });
    context->engine->Release(id).IgnoreError();
    return SetContextError(context, read);
  });
}

}  // extern "C"
