// Shared helpers of the C API: live-handle counter, status mapping, model references.
#include "api/handles.h"

#include <algorithm>

namespace kvtier::api {

std::atomic<int64_t>& LiveHandles() {
  static std::atomic<int64_t> count{0};
  return count;
}

kvt_status ToKvtStatus(const absl::Status& status, CallKind kind) {
  switch (status.code()) {
    case absl::StatusCode::kOk: return KVT_OK;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange: return KVT_ERR_INVALID_ARGUMENT;
    case absl::StatusCode::kNotFound: return KVT_ERR_NOT_FOUND;
    case absl::StatusCode::kUnimplemented: return KVT_ERR_UNSUPPORTED;
    case absl::StatusCode::kResourceExhausted:
      return kind == CallKind::kCreate ? KVT_ERR_OUT_OF_MEMORY : KVT_ERR_CAPACITY;
    case absl::StatusCode::kUnavailable: return KVT_ERR_BUSY;
    case absl::StatusCode::kDataLoss: return KVT_ERR_CORRUPT;
    case absl::StatusCode::kFailedPrecondition: return KVT_ERR_STATE;
    case absl::StatusCode::kAborted: return KVT_ERR_BACKEND;
    case absl::StatusCode::kUnknown: return KVT_ERR_IO;
    case absl::StatusCode::kCancelled: return KVT_ERR_CANCELLED;
    default: return KVT_ERR_INTERNAL;
  }
}

void CopyToBuffer(const std::string& text, char* buf, int32_t buf_len) {
  if (buf == nullptr || buf_len <= 0) return;
  const size_t n = std::min(text.size(), static_cast<size_t>(buf_len) - 1);
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
}

ProgressFn ToProgressFn(kvt_progress_fn fn, void* user_data) {
  if (fn == nullptr) return {};
  return [fn, user_data](std::string_view stage, int64_t done, int64_t total) {
    const std::string name(stage);  // NUL-terminated for C
    return fn(user_data, name.c_str(), done, total) == 0;
  };
}

void UnrefModel(kvt_model* model) {
  if (model != nullptr && model->references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete model;
}

kvt_status SetContextError(kvt_context* context, const absl::Status& status) {
  if (!status.ok()) {
    absl::MutexLock lock(&context->error_mu);
    context->error = std::string(status.message());
  }
  return ToKvtStatus(status);
}

}  // namespace kvtier::api
