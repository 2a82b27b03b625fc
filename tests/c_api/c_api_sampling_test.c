/* Pure-C test of the sampler chain, log-probability and parallel sampling calls of the
 * public API: every setter's validation, the events and sequence readers, n completions
 * with consecutive ids that each equal their solo run. Usage: c_api_sampling_test MODEL_DIR */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "c_check.h"
#include "kvtier/kvtier.h"

static const int32_t kPrompt[7] = {5, 6, 7, 8, 9, 5, 6};

static void test_setters(void) {
  kvt_request* req = NULL;
  int32_t tokens[2] = {3, 4};
  float biases[2] = {1.0f, -100.0f};
  int32_t dup[2] = {3, 3};
  float bad_bias[2] = {1.0f, 101.0f};
  CHECK_STATUS(kvt_request_create(&req), KVT_OK);
  CHECK_STATUS(kvt_request_set_repetition_penalty(req, 1.2f), KVT_OK);
  CHECK_STATUS(kvt_request_set_repetition_penalty(req, 0.0f), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_request_errmsg(req), "repetition_penalty") != NULL);
  CHECK_STATUS(kvt_request_set_repetition_penalty(req, (float)NAN), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_request_set_presence_penalty(req, 2.0f), KVT_OK);
  CHECK_STATUS(kvt_request_set_presence_penalty(req, 2.5f), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_request_errmsg(req), "presence_penalty") != NULL);
  CHECK_STATUS(kvt_request_set_frequency_penalty(req, -2.0f), KVT_OK);
  CHECK_STATUS(kvt_request_set_frequency_penalty(req, (float)NAN), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_request_set_min_p(req, 0.1f), KVT_OK);
  CHECK_STATUS(kvt_request_set_min_p(req, 1.5f), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_request_errmsg(req), "min_p") != NULL);
  CHECK_STATUS(kvt_request_set_logit_bias(req, tokens, biases, 2), KVT_OK);
  CHECK_STATUS(kvt_request_set_logit_bias(req, dup, biases, 2), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_request_errmsg(req), "twice") != NULL);
  CHECK_STATUS(kvt_request_set_logit_bias(req, tokens, bad_bias, 2), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_request_set_logit_bias(req, NULL, biases, 2), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_request_set_logit_bias(req, NULL, NULL, 0), KVT_OK);
  CHECK_STATUS(kvt_request_set_logit_bias(req, tokens, biases, -1), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_request_set_logprobs(req, 20), KVT_OK);
  CHECK_STATUS(kvt_request_set_logprobs(req, 21), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_request_errmsg(req), "logprobs") != NULL);
  CHECK_STATUS(kvt_request_set_logprobs(req, -1), KVT_OK);
  CHECK_STATUS(kvt_request_set_prompt_logprobs(req, -2), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_request_set_n(req, 0), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_request_set_n(req, 129), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_request_set_n(req, 4), KVT_OK);
  CHECK_STATUS(kvt_request_set_n(NULL, 4), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_request_set_min_p(NULL, 0.1f), KVT_ERR_INVALID_ARGUMENT);
  kvt_request_free(req);
}

/* Steps until nothing is unfinished, collecting tokens and event log-probabilities of the
 * sequences first .. first + n - 1. */
static void run(kvt_context* ctx, kvt_events* ev, int64_t first, int n, int32_t tokens[][8], float logprobs[][8],
                int32_t* lens) {
  int steps = 0, i;
  for (i = 0; i < n; ++i) lens[i] = 0;
  while (kvt_context_num_unfinished(ctx) > 0 && steps++ < 1000) {
    CHECK_STATUS(kvt_step(ctx, ev), KVT_OK);
    for (i = 0; i < kvt_events_count(ev); ++i) {
      int64_t seq = 0;
      int32_t token = 0, reason = 0, num_top = -1;
      float lp = 0;
      kvt_events_get(ev, i, &seq, &token, &reason);
      if (token == KVT_NO_TOKEN || seq < first || seq >= first + n || lens[seq - first] >= 8) continue;
      tokens[seq - first][lens[seq - first]] = token;
      if (kvt_events_logprob(ev, i, &lp, &num_top) == KVT_OK) {
        int32_t top_tokens[4], out_len = 0;
        float top_lp[4];
        CHECK(num_top == 3);
        CHECK_STATUS(kvt_events_top_logprobs(ev, i, top_tokens, top_lp, 4, &out_len), KVT_OK);
        CHECK(out_len == 3);
        CHECK(lp <= top_lp[0] + 1e-6f && top_lp[0] >= top_lp[1] && top_lp[1] >= top_lp[2]);
        CHECK_STATUS(kvt_events_top_logprobs(ev, i, NULL, top_lp, 4, &out_len), KVT_ERR_INVALID_ARGUMENT);
      } else {
        lp = NAN;
      }
      logprobs[seq - first][lens[seq - first]] = lp;
      ++lens[seq - first];
    }
  }
}

static void test_generation(const char* model_dir) {
  kvt_model* model = NULL;
  kvt_options* opts = NULL;
  kvt_context* ctx = NULL;
  kvt_events* ev = NULL;
  kvt_request* req = NULL;
  int32_t tokens[4][8], solo[1][8], lens[4], solo_len[1], bias_tokens[1] = {11}, out_len = 0, top_tokens[2];
  float logprobs[4][8], solo_lp[1][8], seq_lp[8], prompt_lp[8], top_lp[2], bias[1] = {1.5f};
  int64_t first = 0, id = 0;
  int i, j;

  open_cpu_context(model_dir, &model, &opts, &ctx);
  if (ctx == NULL) return;
  kvt_events_create(&ev);
  kvt_request_create(&req);
  kvt_request_set_prompt_tokens(req, kPrompt, 7);
  kvt_request_set_max_new_tokens(req, 8);
  kvt_request_set_ignore_eos(req, 1);
  kvt_request_set_temperature(req, 0.9f);
  kvt_request_set_min_p(req, 0.01f);
  kvt_request_set_repetition_penalty(req, 1.2f);
  kvt_request_set_presence_penalty(req, 0.5f);
  kvt_request_set_frequency_penalty(req, 0.5f);
  kvt_request_set_logit_bias(req, bias_tokens, bias, 1);
  kvt_request_set_logprobs(req, 3);
  kvt_request_set_prompt_logprobs(req, 1);
  kvt_request_set_seed(req, 40);
  CHECK_STATUS(kvt_request_set_n(req, 4), KVT_OK);
  CHECK_STATUS(kvt_generate(ctx, req, NULL, 0, &out_len, NULL), KVT_ERR_INVALID_ARGUMENT); /* n > 1 */
  CHECK(strstr(kvt_context_errmsg(ctx), "n = 4") != NULL);

  CHECK_STATUS(kvt_sequence_add(ctx, req, &first), KVT_OK);
  run(ctx, ev, first, 4, tokens, logprobs, lens);
  for (i = 0; i < 4; ++i) CHECK(lens[i] == 8);
  /* Readers: per sequence log-probabilities equal the events'; the prompt's on the first. */
  CHECK_STATUS(kvt_sequence_logprobs(ctx, first + 1, seq_lp, 8, &out_len), KVT_OK);
  CHECK(out_len == 8);
  for (j = 0; j < 8; ++j) CHECK(seq_lp[j] == logprobs[1][j]);
  CHECK_STATUS(kvt_sequence_top_logprobs(ctx, first + 1, 7, top_tokens, top_lp, 2, &out_len), KVT_OK);
  CHECK(out_len == 3);
  CHECK_STATUS(kvt_sequence_top_logprobs(ctx, first + 1, 8, top_tokens, top_lp, 2, &out_len), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_sequence_prompt_logprobs(ctx, first, prompt_lp, 8, &out_len), KVT_OK);
  CHECK(out_len == 6);
  for (j = 0; j < 6; ++j) CHECK(prompt_lp[j] < 0.0f);
  CHECK_STATUS(kvt_sequence_prompt_top_logprobs(ctx, first, 0, top_tokens, top_lp, 2, &out_len), KVT_OK);
  CHECK(out_len == 1);
  CHECK_STATUS(kvt_sequence_prompt_logprobs(ctx, first + 1, prompt_lp, 8, &out_len), KVT_ERR_STATE);

  /* Completion i is the request with n = 1 and seed 40 + i, run alone. */
  for (i = 0; i < 4; ++i) {
    kvt_request_set_n(req, 1);
    kvt_request_set_seed(req, 40 + i);
    CHECK_STATUS(kvt_sequence_add(ctx, req, &id), KVT_OK);
    run(ctx, ev, id, 1, solo, solo_lp, solo_len);
    CHECK(solo_len[0] == 8);
    for (j = 0; j < 8; ++j) {
      CHECK(solo[0][j] == tokens[i][j]);
      CHECK(solo_lp[0][j] == logprobs[i][j]);
    }
  }
  /* A request without logprobs: none on its events or readers. */
  kvt_request_set_logprobs(req, -1);
  kvt_request_set_prompt_logprobs(req, -1);
  CHECK_STATUS(kvt_sequence_add(ctx, req, &id), KVT_OK);
  CHECK_STATUS(kvt_step(ctx, ev), KVT_OK);
  CHECK(kvt_events_count(ev) == 1);
  CHECK_STATUS(kvt_events_logprob(ev, 0, NULL, NULL), KVT_ERR_NOT_FOUND);
  CHECK_STATUS(kvt_events_logprob(ev, 1, NULL, NULL), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_sequence_logprobs(ctx, id, seq_lp, 8, &out_len), KVT_ERR_STATE);
  CHECK_STATUS(kvt_sequence_logprobs(ctx, 99999, seq_lp, 8, &out_len), KVT_ERR_NOT_FOUND);
  /* A bias token outside the vocabulary is refused when added. */
  bias_tokens[0] = kvt_model_vocab_size(model);
  kvt_request_set_logit_bias(req, bias_tokens, bias, 1);
  CHECK_STATUS(kvt_sequence_add(ctx, req, &id), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_context_errmsg(ctx), "logit bias") != NULL);

  kvt_request_free(req);
  kvt_events_free(ev);
  kvt_context_free(ctx);
  kvt_options_free(opts);
  kvt_model_free(model);
  CHECK(kvt_live_handles() == 0);
}

int main(int argc, char** argv) {
  if (!check_args(argc, argv, "MODEL_DIR")) return 2;
  test_setters();
  test_generation(argv[1]);
  return check_report();
}
