// C API: kvt_request — prompt and sampling parameters of one generation request.
#include "absl/strings/str_cat.h"
#include "api/handles.h"
#include "backend/sampling_ranges.h"
#include "kv/block_hash.h"
#include "grammar/automaton.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"

namespace {

kvt_status Fail(kvt_request* request, std::string message) {
  request->error = std::move(message);
  return KVT_ERR_INVALID_ARGUMENT;
}

kvt_status Ok(kvt_request* request) {
  request->error.clear();
  return KVT_OK;
}

// Sets the request's grammar from text (or clears it for NULL/""), checking what can be
// checked without the model: the syntax, and the automaton (left recursion, size).
template <typename Compile>
kvt_status SetGrammar(kvt_request* request, const char* text, Compile compile) {
  if (text == nullptr || text[0] == '\0') {
    request->params.grammar = nullptr;
    return Ok(request);
  }
  absl::StatusOr<kvtier::grammar::Grammar> grammar = compile(std::string_view(text));
  if (!grammar.ok()) return Fail(request, std::string(grammar.status().message()));
  absl::StatusOr<std::shared_ptr<const kvtier::grammar::Automaton>> automaton =
      kvtier::grammar::Automaton::Build(*grammar);
  if (!automaton.ok()) return Fail(request, absl::StrCat("grammar: ", automaton.status().message()));
  request->params.grammar = std::make_shared<const kvtier::grammar::Grammar>(*std::move(grammar));
  return Ok(request);
}

}  // namespace

extern "C" {

KVT_API kvt_status kvt_request_create(kvt_request** out) {
  if (out == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    *out = new kvt_request();
    return KVT_OK;
  });
}

KVT_API void kvt_request_free(kvt_request* request) { delete request; }

KVT_API kvt_status kvt_request_set_prompt_tokens(kvt_request* request, const int32_t* tokens, int32_t num_tokens) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    if (num_tokens <= 0) return Fail(request, absl::StrCat("the prompt needs at least one token, got ", num_tokens));
    if (tokens == nullptr) return Fail(request, "prompt tokens pointer is NULL");
    request->prompt.assign(tokens, tokens + num_tokens);
    request->prompt_kind = kvt_request::PromptKind::kTokens;
    return Ok(request);
  });
}

KVT_API kvt_status kvt_request_set_prompt_text(kvt_request* request, const char* text, int32_t text_len) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    if (text == nullptr || text_len <= 0) return Fail(request, "the prompt text is NULL or empty");
    request->prompt_text.assign(text, static_cast<size_t>(text_len));
    request->prompt_kind = kvt_request::PromptKind::kText;
    return Ok(request);
  });
}

KVT_API kvt_status kvt_request_add_chat_message(kvt_request* request, const char* role, const char* content) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    if (role == nullptr || content == nullptr) return Fail(request, "chat role or content is NULL");
    const std::string r = role;
    if (r != "system" && r != "user" && r != "assistant") {
      return Fail(request, absl::StrCat("chat role must be system, user or assistant, got '", r, "'"));
    }
    if (request->prompt_kind != kvt_request::PromptKind::kChat) request->chat.clear();
    request->chat.push_back({r, content});
    request->prompt_kind = kvt_request::PromptKind::kChat;
    return Ok(request);
  });
}

KVT_API kvt_status kvt_request_add_stop_string(kvt_request* request, const char* text, int32_t text_len) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    if (text == nullptr || text_len <= 0) return Fail(request, "the stop string is NULL or empty");
    request->params.stop_strings.emplace_back(text, static_cast<size_t>(text_len));
    return Ok(request);
  });
}

KVT_API kvt_status kvt_request_set_max_new_tokens(kvt_request* request, int32_t n) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  if (n < 1) return Fail(request, absl::StrCat("max_new_tokens must be >= 1, got ", n));
  request->params.max_new_tokens = n;
  request->explicit_fields.max_new_tokens = true;
  return Ok(request);
}

KVT_API kvt_status kvt_request_set_temperature(kvt_request* request, float t) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  if (absl::Status s = kvtier::ValidateTemperature(t); !s.ok()) return Fail(request, std::string(s.message()));
  request->params.temperature = t;
  request->explicit_fields.temperature = true;
  return Ok(request);
}

KVT_API kvt_status kvt_request_set_top_k(kvt_request* request, int32_t k) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  if (absl::Status s = kvtier::ValidateTopK(k); !s.ok()) return Fail(request, std::string(s.message()));
  request->params.top_k = k;
  request->explicit_fields.top_k = true;
  return Ok(request);
}

KVT_API kvt_status kvt_request_set_top_p(kvt_request* request, float p) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  if (absl::Status s = kvtier::ValidateTopP(p); !s.ok()) return Fail(request, std::string(s.message()));
  request->params.top_p = p;
  request->explicit_fields.top_p = true;
  return Ok(request);
}

KVT_API kvt_status kvt_request_set_seed(kvt_request* request, int64_t seed) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  request->params.seed = static_cast<uint64_t>(seed);
  return Ok(request);
}

KVT_API kvt_status kvt_request_set_stop_tokens(kvt_request* request, const int32_t* tokens, int32_t num_tokens) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    if (num_tokens < 0) return Fail(request, absl::StrCat("number of stop tokens must be >= 0, got ", num_tokens));
    if (num_tokens > 0 && tokens == nullptr) return Fail(request, "stop tokens pointer is NULL");
    for (int32_t i = 0; i < num_tokens; ++i) {
      if (tokens[i] < 0) return Fail(request, absl::StrCat("stop token ", i, " is negative (", tokens[i], ")"));
    }
    request->params.stop_token_ids.assign(tokens, tokens + num_tokens);
    return Ok(request);
  });
}

KVT_API kvt_status kvt_request_set_ignore_eos(kvt_request* request, int32_t ignore) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  request->params.ignore_eos = ignore != 0;
  return Ok(request);
}

KVT_API kvt_status kvt_request_set_priority(kvt_request* request, int32_t priority) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  request->params.priority = priority;
  return Ok(request);
}

KVT_API kvt_status kvt_request_set_pin_prefix(kvt_request* request, int32_t pin) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  request->params.pin_prefix = pin != 0;
  return Ok(request);
}

KVT_API kvt_status kvt_request_set_cache_namespace(kvt_request* request, const char* ns) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    if (ns == nullptr) return Fail(request, "the cache namespace is NULL (use \"\" for the default one)");
    const std::string_view text(ns);
    if (absl::Status s = kvtier::ValidateCacheNamespace(text); !s.ok()) return Fail(request, std::string(s.message()));
    request->params.cache_namespace.assign(text);
    return Ok(request);
  });
}

KVT_API kvt_status kvt_request_set_json_schema(kvt_request* request, const char* schema_json) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    return SetGrammar(request, schema_json,
                      [](std::string_view text) { return kvtier::grammar::JsonSchemaToGrammar(text); });
  });
}

KVT_API kvt_status kvt_request_set_grammar(kvt_request* request, const char* gbnf) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    return SetGrammar(request, gbnf, [](std::string_view text) { return kvtier::grammar::ParseGbnf(text); });
  });
}

KVT_API const char* kvt_request_errmsg(const kvt_request* request) {
  return request == nullptr ? "request handle is NULL" : request->error.c_str();
}

}  // extern "C"
