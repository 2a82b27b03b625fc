// C API: kvt_model — loading a checkpoint directory, reference counting, model info.
#include "absl/strings/str_cat.h"
#include "api/handles.h"
#include "nlohmann/json.hpp"

extern "C" {

KVT_API kvt_status kvt_model_load(const char* directory, kvt_model** out, char* errbuf, int32_t errbuf_len) {
  using kvtier::api::CopyToBuffer;
  if (directory == nullptr || out == nullptr) {
    CopyToBuffer(directory == nullptr ? "model directory is NULL" : "output pointer is NULL", errbuf, errbuf_len);
    return KVT_ERR_INVALID_ARGUMENT;
  }
  return kvtier::api::Guard([&] {
    auto checkpoint = kvtier::Checkpoint::Open(directory);
    if (!checkpoint.ok()) {
      CopyToBuffer(std::string(checkpoint.status().message()), errbuf, errbuf_len);
      return kvtier::api::ToKvtStatus(checkpoint.status(), kvtier::api::CallKind::kCreate);
    }
    auto* model = new kvt_model();
    model->checkpoint = std::move(*checkpoint);
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
    };
    const std::string text = info.dump();
    if (out_len != nullptr) *out_len = static_cast<int32_t>(text.size());
    kvtier::api::CopyToBuffer(text, buf, buf_len);
    return KVT_OK;
  });
}

}  // extern "C"
