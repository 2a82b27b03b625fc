// C API: kvt_model — loading a checkpoint directory or GGUF file, reference counting, model info.
#include <fstream>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "api/handles.h"
#include "model/config_features.h"
#include "model/gguf_file.h"
#include "nlohmann/json.hpp"

extern "C" {

KVT_API kvt_status kvt_model_load(const char* directory, kvt_model** out, char* errbuf, int32_t errbuf_len) {
  return kvt_model_load_with_progress(directory, nullptr, nullptr, out, errbuf, errbuf_len);
}

KVT_API kvt_status kvt_model_load_with_progress(const char* directory, kvt_progress_fn progress, void* user_data,
                                                kvt_model** out, char* errbuf, int32_t errbuf_len) {
  using kvtier::api::CopyToBuffer;
  if (directory == nullptr || out == nullptr) {
    CopyToBuffer(directory == nullptr ? "model directory is NULL" : "output pointer is NULL", errbuf, errbuf_len);
    return KVT_ERR_INVALID_ARGUMENT;
  }
  return kvtier::api::Guard([&] {
    const kvtier::ProgressFn report = kvtier::api::ToProgressFn(progress, user_data);
    auto fail = [&](const absl::Status& status) {
      CopyToBuffer(std::string(status.message()), errbuf, errbuf_len);
      return kvtier::api::ToKvtStatus(status, kvtier::api::CallKind::kCreate);
    };
    auto checkpoint = kvtier::Checkpoint::Open(directory, report);
    if (!checkpoint.ok()) return fail(checkpoint.status());
    auto defaults = kvtier::RequestDefaultsFrom((*checkpoint)->generation_config());
    if (!defaults.ok()) {
      return fail(absl::Status(defaults.status().code(),
                               absl::StrCat(directory, "/", defaults.status().message())));
    }
    std::shared_ptr<const kvtier::tokenizer::Tokenizer> tokenizer;
    const kvtier::GgufFile* gguf = (*checkpoint)->gguf();
    const bool has_tokenizer =
        gguf != nullptr ? gguf->Find("tokenizer.ggml.model") != nullptr
                        : std::ifstream(std::string(directory) + "/tokenizer.json").good();
    kvtier::ProgressStage tokenizing(report, "tokenizer", has_tokenizer ? 1 : 0);
    if (absl::Status s = tokenizing.Begin(); !s.ok()) return fail(s);
    if (has_tokenizer) {
      auto loaded = gguf != nullptr ? kvtier::tokenizer::Tokenizer::FromGguf(*gguf)
                                    : kvtier::tokenizer::Tokenizer::FromDirectory(directory);
      if (loaded.ok()) {
        tokenizer = std::move(*loaded);
      } else if (gguf == nullptr || !absl::IsNotFound(loaded.status())) {  // a GGUF may say it has none
        return fail(absl::Status(loaded.status().code(),
                                 (gguf != nullptr ? "tokenizer: " : "tokenizer.json: ") +
                                     std::string(loaded.status().message())));
      }
    }
    if (absl::Status s = tokenizing.End(); !s.ok()) return fail(s);
    auto* model = new kvt_model();
    model->checkpoint = std::move(*checkpoint);
    model->tokenizer = std::move(tokenizer);
    model->request_defaults = *std::move(defaults);
    *out = model;
    CopyToBuffer("", errbuf, errbuf_len);
    return KVT_OK;
  });
}

KVT_API void kvt_model_free(kvt_model* model) { kvtier::api::UnrefModel(model); }

KVT_API int32_t kvt_model_vocab_size(const kvt_model* model) {
  return model == nullptr ? 0 : static_cast<int32_t>(model->checkpoint->config().vocab_size);
}

KVT_API kvt_status kvt_model_info_json(const kvt_model* model, char* buf, int32_t buf_len, int32_t* out_len) {
  if (model == nullptr || (buf == nullptr && buf_len > 0) || buf_len < 0) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    const kvtier::ModelConfig& c = model->checkpoint->config();
    nlohmann::json info = {
        {"architecture", std::string(kvtier::ArchitectureName(c.architecture))},
        {"hidden_size", c.hidden_size},
        {"num_layers", c.num_layers},
        {"num_heads", c.num_heads},
        {"num_kv_heads", c.num_kv_heads},
        {"head_dim", c.head_dim},
        {"intermediate_size", c.intermediate_size},
        {"vocab_size", c.vocab_size},
        {"max_position_embeddings", c.max_position_embeddings},
        {"num_parameters", c.NumParameters()},
        {"weight_bytes", model->checkpoint->TotalTensorBytes()},
        {"kv_bytes_per_token_bf16", c.num_layers * 2 * c.kv_dim() * 2},
        {"kv_bytes_per_token_fp32", c.num_layers * 2 * c.kv_dim() * 4},
        {"generation_defaults",
         kvtier::RequestDefaultsJson(model->request_defaults, model->checkpoint->generation_config())},
    };
    nlohmann::ordered_json features;
    kvtier::AddModelFeaturesJson(c, &features);
    for (const auto& [key, value] : features.items()) info[key] = nlohmann::json::parse(value.dump());
    const std::string text = info.dump();
    if (out_len != nullptr) *out_len = static_cast<int32_t>(text.size());
    kvtier::api::CopyToBuffer(text, buf, buf_len);
    return KVT_OK;
  });
}

KVT_API int32_t kvt_model_has_tokenizer(const kvt_model* model) {
  return model != nullptr && model->tokenizer != nullptr ? 1 : 0;
}

KVT_API kvt_status kvt_model_tokenize(const kvt_model* model, const char* text, int32_t text_len,
                                      int32_t add_special_tokens, int32_t* buf, int32_t buf_len, int32_t* out_len,
                                      char* errbuf, int32_t errbuf_len) {
  using kvtier::api::CopyToBuffer;
  if (model == nullptr || (text == nullptr && text_len > 0) || text_len < 0 || buf_len < 0 ||
      (buf == nullptr && buf_len > 0)) {
    CopyToBuffer("model, text or buffer is NULL, or a length is negative", errbuf, errbuf_len);
    return KVT_ERR_INVALID_ARGUMENT;
  }
  return kvtier::api::Guard([&] {
    if (model->tokenizer == nullptr) {
      CopyToBuffer("this model has no tokenizer.json", errbuf, errbuf_len);
      return KVT_ERR_UNSUPPORTED;
    }
    kvtier::tokenizer::EncodeOptions options;
    options.add_special_tokens = add_special_tokens != 0;
    auto ids = model->tokenizer->Encode(std::string_view(text == nullptr ? "" : text, static_cast<size_t>(text_len)), options);
    if (!ids.ok()) {
      CopyToBuffer(std::string(ids.status().message()), errbuf, errbuf_len);
      return kvtier::api::ToKvtStatus(ids.status());
    }
    for (size_t i = 0; i < ids->size() && i < static_cast<size_t>(buf_len); ++i) buf[i] = (*ids)[i];
    if (out_len != nullptr) *out_len = static_cast<int32_t>(ids->size());
    return KVT_OK;
  });
}

KVT_API kvt_status kvt_model_detokenize(const kvt_model* model, const int32_t* ids, int32_t num_ids,
                                        int32_t skip_special_tokens, char* buf, int32_t buf_len, int32_t* out_len,
                                        char* errbuf, int32_t errbuf_len) {
  using kvtier::api::CopyToBuffer;
  if (model == nullptr || (ids == nullptr && num_ids > 0) || num_ids < 0 || buf_len < 0 ||
      (buf == nullptr && buf_len > 0)) {
    CopyToBuffer("model, ids or buffer is NULL, or a length is negative", errbuf, errbuf_len);
    return KVT_ERR_INVALID_ARGUMENT;
  }
  return kvtier::api::Guard([&] {
    if (model->tokenizer == nullptr) {
      CopyToBuffer("this model has no tokenizer.json", errbuf, errbuf_len);
      return KVT_ERR_UNSUPPORTED;
    }
    kvtier::tokenizer::DecodeOptions options;
    options.skip_special_tokens = skip_special_tokens != 0;
    auto text = model->tokenizer->Decode(absl::Span<const int32_t>(ids, static_cast<size_t>(num_ids)), options);
    if (!text.ok()) {
      CopyToBuffer(std::string(text.status().message()), errbuf, errbuf_len);
      return kvtier::api::ToKvtStatus(text.status());
    }
    if (out_len != nullptr) *out_len = static_cast<int32_t>(text->size());
    CopyToBuffer(*text, buf, buf_len);
    return KVT_OK;
  });
}

KVT_API kvt_status kvt_model_token_bytes(const kvt_model* model, int32_t id, char* buf, int32_t buf_len,
                                         int32_t* out_len) {
  if (model == nullptr || buf_len < 0 || (buf == nullptr && buf_len > 0)) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    if (model->tokenizer == nullptr) return KVT_ERR_UNSUPPORTED;
    std::optional<std::string> bytes = model->tokenizer->TokenBytes(id);
    if (!bytes.has_value()) {  // a special token, as decoding writes it; or an unknown id
      auto text = model->tokenizer->Decode(absl::Span<const int32_t>(&id, 1));
      if (!text.ok()) return kvtier::api::ToKvtStatus(text.status());
      bytes = std::move(*text);
    }
    if (out_len != nullptr) *out_len = static_cast<int32_t>(bytes->size());
    kvtier::api::CopyToBuffer(*bytes, buf, buf_len);
    return KVT_OK;
  });
}

}  // extern "C"
