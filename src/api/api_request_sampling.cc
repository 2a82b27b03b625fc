// C API: kvt_request's sampler chain, log-probability and parallel sampling settings.
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "api/handles.h"
#include "backend/sampling_ranges.h"

namespace {

// Sets `field` to `value` when `check` accepts it; the request's message otherwise.
template <typename T>
kvt_status SetChecked(kvt_request* request, T* field, T value, const absl::Status& check) {
  if (!check.ok()) {
    request->error = std::string(check.message());
    return KVT_ERR_INVALID_ARGUMENT;
  }
  *field = value;
  request->error.clear();
  return KVT_OK;
}

}  // namespace

extern "C" {

KVT_API kvt_status kvt_request_set_repetition_penalty(kvt_request* request, float penalty) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  const kvt_status s =
      SetChecked(request, &request->params.repetition_penalty, penalty, kvtier::ValidateRepetitionPenalty(penalty));
  // Set explicitly: it wins over generation_config.json's repetition_penalty.
  if (s == KVT_OK) request->explicit_fields.repetition_penalty = true;
  return s;
}

KVT_API kvt_status kvt_request_set_presence_penalty(kvt_request* request, float penalty) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return SetChecked(request, &request->params.presence_penalty, penalty, kvtier::ValidatePresencePenalty(penalty));
}

KVT_API kvt_status kvt_request_set_frequency_penalty(kvt_request* request, float penalty) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return SetChecked(request, &request->params.frequency_penalty, penalty, kvtier::ValidateFrequencyPenalty(penalty));
}

KVT_API kvt_status kvt_request_set_min_p(kvt_request* request, float min_p) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return SetChecked(request, &request->params.min_p, min_p, kvtier::ValidateMinP(min_p));
}

KVT_API kvt_status kvt_request_set_logit_bias(kvt_request* request, const int32_t* tokens, const float* biases,
                                              int32_t count) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    auto fail = [&](std::string message) {
      request->error = std::move(message);
      return KVT_ERR_INVALID_ARGUMENT;
    };
    if (count < 0) return fail(absl::StrCat("logit bias count must be >= 0, got ", count));
    if (count > 0 && (tokens == nullptr || biases == nullptr)) return fail("logit bias tokens or biases pointer is NULL");
    std::vector<std::pair<int32_t, float>> bias;
    absl::flat_hash_set<int32_t> seen;
    for (int32_t i = 0; i < count; ++i) {
      if (tokens[i] < 0) return fail(absl::StrCat("logit bias token ", i, " is negative (", tokens[i], ")"));
      if (!seen.insert(tokens[i]).second) return fail(absl::StrCat("logit bias names token ", tokens[i], " twice"));
      if (absl::Status s = kvtier::ValidateLogitBias(biases[i]); !s.ok()) {
        return fail(absl::StrCat("token ", tokens[i], ": ", s.message()));
      }
      bias.emplace_back(tokens[i], biases[i]);
    }
    request->params.logit_bias = std::move(bias);
    request->error.clear();
    return KVT_OK;
  });
}

KVT_API kvt_status kvt_request_set_logprobs(kvt_request* request, int32_t top_n) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return SetChecked(request, &request->params.logprobs, top_n, kvtier::ValidateTopLogprobs(top_n, "logprobs"));
}

KVT_API kvt_status kvt_request_set_prompt_logprobs(kvt_request* request, int32_t top_n) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return SetChecked(request, &request->params.prompt_logprobs, top_n,
                    kvtier::ValidateTopLogprobs(top_n, "prompt_logprobs"));
}

KVT_API kvt_status kvt_request_set_n(kvt_request* request, int32_t n) {
  if (request == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return SetChecked(request, &request->params.n, n, kvtier::ValidateNumCompletions(n));
}

}  // extern "C"
