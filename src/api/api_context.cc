// C API: kvt_context — creation, error messages, statistics.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "api/handles.h"
#include "engine/prometheus_text.h"

using kvtier::api::Guard;
using kvtier::api::SetContextError;

extern "C" {

KVT_API kvt_status kvt_context_create(kvt_model* model, const kvt_options* options, kvt_context** out, char* errbuf,
                                      int32_t errbuf_len) {
  using kvtier::api::CopyToBuffer;
  if (model == nullptr || out == nullptr) {
    CopyToBuffer(model == nullptr ? "model handle is NULL" : "output pointer is NULL", errbuf, errbuf_len);
    return KVT_ERR_INVALID_ARGUMENT;
  }
  return Guard([&] {
    kvtier::EngineOptions engine_options = options == nullptr ? kvtier::EngineOptions() : options->engine;
    auto engine = kvtier::Engine::Create(model->checkpoint, engine_options, model->tokenizer);
    if (!engine.ok()) {
      CopyToBuffer(std::string(engine.status().message()), errbuf, errbuf_len);
      return kvtier::api::ToKvtStatus(engine.status(), kvtier::api::CallKind::kCreate);
    }
    auto* context = new kvt_context();
    model->references.fetch_add(1, std::memory_order_relaxed);
    context->model = model;
    context->engine = std::move(*engine);
    *out = context;
    CopyToBuffer("", errbuf, errbuf_len);
    return KVT_OK;
  });
}

KVT_API void kvt_context_free(kvt_context* context) {
  if (context == nullptr) return;
  kvt_model* model = context->model;
  delete context;  // engine first: it holds the checkpoint through the model
  kvtier::api::UnrefModel(model);
}

KVT_API const char* kvt_context_errmsg(const kvt_context* context) {
  if (context == nullptr) return "context handle is NULL";
  absl::MutexLock lock(&context->error_mu);
  return context->error.c_str();
}

KVT_API int32_t kvt_context_errmsg_copy(const kvt_context* context, char* buf, int32_t buf_len) {
  if (context == nullptr) return 0;
  absl::MutexLock lock(&context->error_mu);
  kvtier::api::CopyToBuffer(context->error, buf, buf_len);
  return static_cast<int32_t>(context->error.size());
}

KVT_API kvt_status kvt_context_unpin_prefixes(kvt_context* context) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] {
    context->engine->UnpinPrefixes();
    return KVT_OK;
  });
}

KVT_API kvt_status kvt_context_stats_json(kvt_context* context, char* buf, int32_t buf_len, int32_t* out_len) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] {
    if (buf_len < 0 || (buf == nullptr && buf_len > 0)) {
      return SetContextError(context, absl::InvalidArgumentError("stats buffer is NULL or its length negative"));
    }
    const std::string text = context->engine->Stats().dump();
    if (out_len != nullptr) *out_len = static_cast<int32_t>(text.size());
    kvtier::api::CopyToBuffer(text, buf, buf_len);
    return KVT_OK;
  });
}

KVT_API kvt_status kvt_context_metrics_text(kvt_context* context, char* buf, int32_t buf_len, int32_t* out_len) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] {
    if (buf_len < 0 || (buf == nullptr && buf_len > 0)) {
      return SetContextError(context, absl::InvalidArgumentError("metrics buffer is NULL or its length negative"));
    }
    const std::string text = kvtier::PrometheusText(context->engine->Stats());
    if (out_len != nullptr) *out_len = static_cast<int32_t>(text.size());
    kvtier::api::CopyToBuffer(text, buf, buf_len);
    return KVT_OK;
  });
}

KVT_API kvt_status kvt_context_stat(kvt_context* context, const char* name, int64_t* value) {
  if (context == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return Guard([&] {
    if (name == nullptr || value == nullptr) {
      return SetContextError(context, absl::InvalidArgumentError("statistic name or value pointer is NULL"));
    }
    nlohmann::json node = context->engine->Stats();
    for (absl::string_view part : absl::StrSplit(name, '.')) {
      if (!node.is_object() || !node.contains(std::string(part))) {
        return SetContextError(context, absl::NotFoundError(absl::StrCat("no statistic named '", name, "'")));
      }
      node = node[std::string(part)];
    }
    if (node.is_number_integer()) {
      *value = node.get<int64_t>();
    } else if (node.is_number()) {
      // Times are seconds as doubles: reported in microseconds through this integer call.
      *value = static_cast<int64_t>(node.get<double>() * 1e6);
    } else {
      return SetContextError(context, absl::InvalidArgumentError(absl::StrCat("statistic '", name, "' is not a number")));
    }
    return KVT_OK;
  });
}

}  // extern "C"
