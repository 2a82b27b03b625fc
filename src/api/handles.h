// The C API's opaque handle types, the live-handle counter and the catch-all barrier that
// keeps every C++ exception on this side of the boundary. Thread-safety per type: see
// include/kvtier/kvtier.h.
#ifndef KVTIER_API_HANDLES_H_
#define KVTIER_API_HANDLES_H_

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/progress.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/request_defaults.h"
#include "engine/sampling_params.h"
#include "kvtier/kvtier.h"
#include "model/checkpoint.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvtier::api {

// Counts live handles of every type (kvt_live_handles).
std::atomic<int64_t>& LiveHandles();

// Base of every handle: counts itself in LiveHandles for its lifetime.
struct CountedHandle {
  CountedHandle() { LiveHandles().fetch_add(1, std::memory_order_relaxed); }
  CountedHandle(const CountedHandle&) = delete;
  CountedHandle& operator=(const CountedHandle&) = delete;
  ~CountedHandle() { LiveHandles().fetch_sub(1, std::memory_order_relaxed); }
};

// Which call failed decides how ResourceExhausted reads: at creation it means memory
// could not be had, when adding a sequence that the request can never fit.
enum class CallKind { kCreate, kOther };
kvt_status ToKvtStatus(const absl::Status& status, CallKind kind = CallKind::kOther);

// Copies text into a caller buffer (NUL-terminated, truncated to fit) when one is given.
void CopyToBuffer(const std::string& text, char* buf, int32_t buf_len);

// A C progress callback as a ProgressFn (empty when fn is NULL): non-zero from fn cancels.
ProgressFn ToProgressFn(kvt_progress_fn fn, void* user_data);

}  // namespace kvtier::api

struct kvt_options : kvtier::api::CountedHandle {
  kvtier::EngineOptions engine;
  std::string error;
};

// The prompt is given as token ids, as text, or as chat messages (the last one set wins);
// text and messages are tokenized with the context's model when the request is added.
struct kvt_request : kvtier::api::CountedHandle {
  enum class PromptKind { kNone, kTokens, kText, kChat };
  PromptKind prompt_kind = PromptKind::kNone;
  std::vector<int32_t> prompt;
  std::string prompt_text;
  std::vector<kvtier::tokenizer::ChatMessage> chat;
  kvtier::SamplingParams params;
  // The sampling fields set by a setter: those keep their value over the model's defaults.
  kvtier::ExplicitSamplingFields explicit_fields;
  std::string error;
};

// Reference-counted: the user's handle and every context each hold one reference.
struct kvt_model : kvtier::api::CountedHandle {
  std::shared_ptr<const kvtier::Checkpoint> checkpoint;
  std::shared_ptr<const kvtier::tokenizer::Tokenizer> tokenizer;  // null without tokenizer.json
  kvtier::RequestDefaults request_defaults;  // from generation_config.json, else kvtier's
  std::atomic<int32_t> references{1};
};

struct kvt_context : kvtier::api::CountedHandle {
  kvt_model* model = nullptr;  // one reference held
  std::unique_ptr<kvtier::Engine> engine;
  mutable absl::Mutex error_mu;
  std::string error ABSL_GUARDED_BY(error_mu);
  std::vector<kvtier::StepEvent> scratch_events;  // stepping thread only
};

struct kvt_events : kvtier::api::CountedHandle {
  std::vector<kvtier::StepEvent> events;
};

namespace kvtier::api {

// Drops one model reference, deleting the model at zero.
void UnrefModel(kvt_model* model);

// Records status as the context's last error (when not OK) and returns its kvt_status.
kvt_status SetContextError(kvt_context* context, const absl::Status& status);

// Runs body, converting any escaping exception into KVT_ERR_INTERNAL (or OUT_OF_MEMORY for
// std::bad_alloc), so nothing crosses the C boundary.
template <typename Body>
kvt_status Guard(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return KVT_ERR_OUT_OF_MEMORY;
  } catch (...) {
    return KVT_ERR_INTERNAL;
  }
}

}  // namespace kvtier::api

#endif  // KVTIER_API_HANDLES_H_
