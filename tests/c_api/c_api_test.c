/* Pure-C test of the public API: drives the whole life cycle through libkvtier.so exactly
 * as a C service would, including the documented failure paths.
 * Usage: c_api_test MODEL_DIR TEXT_MODEL_DIR TEXT_MODEL_GGUF (the text model as GGUF) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_check.h"
#include "kvtier/kvtier.h"

static void test_version(void) {
  CHECK(kvt_version_major() == KVT_VERSION_MAJOR);
  CHECK(kvt_version_minor() == KVT_VERSION_MINOR);
  CHECK(strcmp(kvt_version_string(), KVT_VERSION_STRING) == 0);
  CHECK(strcmp(kvt_status_string(KVT_ERR_BUSY), "KVT_ERR_BUSY") == 0);
  CHECK(strcmp(kvt_status_string((kvt_status)999), "KVT_ERR_UNKNOWN_STATUS") == 0);
}

static void test_options(void) {
  kvt_options* o = NULL;
  CHECK_STATUS(kvt_options_create(&o), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "block_tokens", 8), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "block_tokens", 0), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_options_errmsg(o), "block_tokens") != NULL);
  CHECK_STATUS(kvt_options_set_int(o, "no_such_option", 1), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_options_errmsg(o), "no_such_option") != NULL);
  CHECK_STATUS(kvt_options_set_string(o, "gpu_kv_bytes", "2MiB"), KVT_OK);
  CHECK_STATUS(kvt_options_set_string(o, "gpu_kv_bytes", "lots"), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_string(o, "backend", "tpu"), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_string(o, "backend", NULL), KVT_ERR_INVALID_ARGUMENT);
  /* Storage formats: auto | bf16 | fp16 | fp8 (weights also q8_0 | q4_k), strings only. */
  CHECK_STATUS(kvt_options_set_string(o, "weight_dtype", "q4_k"), KVT_OK);
  CHECK_STATUS(kvt_options_set_string(o, "weight_dtype", "q8_0"), KVT_OK);
  CHECK_STATUS(kvt_options_set_string(o, "kv_dtype", "q8_0"), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_options_errmsg(o), "'kv_dtype' must be auto, bf16, fp16 or fp8, got 'q8_0'") != NULL);
  CHECK_STATUS(kvt_options_set_string(o, "weight_dtype", "fp8"), KVT_OK);
  CHECK_STATUS(kvt_options_set_string(o, "kv_dtype", "bf16"), KVT_OK);
  CHECK_STATUS(kvt_options_set_string(o, "kv_dtype", "int4"), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_options_errmsg(o), "'kv_dtype' must be auto, bf16, fp16 or fp8, got 'int4'") != NULL);
  CHECK_STATUS(kvt_options_set_int(o, "weight_dtype", 8), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_options_errmsg(o), "takes a string") != NULL);
  /* Tensor parallelism: 1, 2, 4 or 8 ranks; devices lists GPU ordinals. */
  CHECK_STATUS(kvt_options_set_int(o, "tensor_parallel", 4), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "tensor_parallel", 3), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_options_errmsg(o), "tensor_parallel must be 1, 2, 4 or 8, got 3") != NULL);
  CHECK_STATUS(kvt_options_set_string(o, "tensor_parallel", "16"), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_string(o, "devices", "0,1"), KVT_OK);
  CHECK_STATUS(kvt_options_set_string(o, "devices", "0,gpu1"), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_options_errmsg(o), "'devices' must list GPU ordinals") != NULL);
  CHECK_STATUS(kvt_options_set_int(o, "devices", 1), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_int(o, "sharded_reduction", 1), KVT_OK);
  /* CUDA diagnostics: switches are 0 or 1, the GEMV prefetch depth 2..8. */
  CHECK_STATUS(kvt_options_set_int(o, "cuda_graphs", 0), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_pdl", 2), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_options_errmsg(o), "cuda_pdl") != NULL);
  CHECK_STATUS(kvt_options_set_string(o, "cuda_fast_attention", "0"), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_pdl_early", 1), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_gemv_prefetch", 8), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_gemv_prefetch", 16), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_skinny_gemm", 2), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_skinny_gemm", 3), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_skinny_gemm", 4), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_options_errmsg(o), "cuda_skinny_gemm") != NULL);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_prefill_wgmma_variant", 7), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_prefill_wgmma_variant", 8), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_prefill_cudnn", 1), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_prefill_cudnn", -1), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_options_errmsg(o), "cuda_prefill_cudnn") != NULL);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_prefill_cudnn", 0), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_prefill_fp8_attention", 0), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_prefill_fp8_attention", 2), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_decode_fp8_pair_tiles", -1), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_decode_fp8_pair_tiles", 2), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_decode_fp8_pair_tiles", 3), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_options_errmsg(o), "cuda_decode_fp8_pair_tiles") != NULL);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_moe_decode_fused", 1), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_moe_decode_fused", -2), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_gemv_bulk", 0), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_gemv_bulk", -2), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_moe_down_bulk", 0), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_moe_down_bulk", 2), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_moe_skinny", 1), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_moe_skinny", 2), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_l2_prefetch", 3), KVT_OK);
  CHECK_STATUS(kvt_options_set_int(o, "cuda_l2_prefetch", 4), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_int(NULL, "threads", 1), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_create(NULL), KVT_ERR_INVALID_ARGUMENT);
  kvt_options_free(o);
  kvt_options_free(NULL);
}

static void test_model_errors(void) {
  kvt_model* m = NULL;
  char err[256];
  CHECK_STATUS(kvt_model_load("/nonexistent/kvtier/model", &m, err, sizeof err), KVT_ERR_NOT_FOUND);
  CHECK(m == NULL);
  CHECK(strlen(err) > 0);
  CHECK_STATUS(kvt_model_load(NULL, &m, err, sizeof err), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_model_load("/tmp", NULL, NULL, 0), KVT_ERR_INVALID_ARGUMENT);
}

static int generate_all(kvt_context* ctx, kvt_events* ev, int64_t* ids, int n, int32_t out[][64], int32_t* lens,
                        int32_t* reasons) {
  int steps = 0;
  while (kvt_context_num_unfinished(ctx) > 0 && steps < 10000) {
    int i;
    if (kvt_step(ctx, ev) != KVT_OK) return -1;
    for (i = 0; i < kvt_events_count(ev); ++i) {
      int64_t seq;
      int32_t token, reason;
      int k;
      kvt_events_get(ev, i, &seq, &token, &reason);
      for (k = 0; k < n; ++k) {
        if (ids[k] != seq) continue;
        if (token != KVT_NO_TOKEN && lens[k] < 64) out[k][lens[k]++] = token;
        if (reason != KVT_FINISH_REASON_NONE) reasons[k] = reason;
      }
    }
    ++steps;
  }
  return steps;
}

static void test_generation(const char* model_dir) {
  char err[512];
  kvt_model* model = NULL;
  kvt_options* opts = NULL;
  kvt_context* ctx = NULL;
  kvt_events* ev = NULL;
  kvt_request* req = NULL;
  int32_t prompt[3][5] = {{5, 6, 7, 8, 9}, {10, 11, 12, 13, 14}, {20, 21, 22, 23, 24}};
  int64_t ids[3];
  int32_t out[3][64];
  int32_t lens[3] = {0, 0, 0};
  int32_t reasons[3] = {0, 0, 0};
  int32_t solo[64];
  int32_t solo_len = 0, solo_reason = 0, state = -1, reason = -1, n = 0;
  int64_t value = 0;
  int i;
  char stats[8192];
  int32_t stats_len = 0;

  CHECK_STATUS(kvt_model_load(model_dir, &model, err, sizeof err), KVT_OK);
  if (model == NULL) {
    fprintf(stderr, "cannot load %s: %s\n", model_dir, err);
    return;
  }
  CHECK(kvt_model_vocab_size(model) > 0);
  CHECK_STATUS(kvt_model_info_json(model, stats, sizeof stats, &stats_len), KVT_OK);
  CHECK(strstr(stats, "LlamaForCausalLM") != NULL);
  kvt_options_create(&opts);
  kvt_options_set_string(opts, "gpu_kv_bytes", TEST_GPU_KV_BYTES);
  kvt_options_set_string(opts, "backend", "cpu");
  kvt_options_set_int(opts, "threads", 2);
  /* A KV format the CPU backend cannot hold is refused at creation, naming it. */
  CHECK_STATUS(kvt_options_set_string(opts, "kv_dtype", "bf16"), KVT_OK);
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_ERR_UNSUPPORTED);
  CHECK(ctx == NULL);
  CHECK(strstr(err, "kv_dtype 'bf16'") != NULL);
  CHECK_STATUS(kvt_options_set_string(opts, "kv_dtype", "auto"), KVT_OK);
  /* A degree the model's 2 KV heads do not split, and a devices list of the wrong length. */
  CHECK_STATUS(kvt_options_set_int(opts, "tensor_parallel", 4), KVT_OK);
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(err, "num_key_value_heads (2) is not divisible") != NULL);
  CHECK_STATUS(kvt_options_set_int(opts, "tensor_parallel", 2), KVT_OK);
  CHECK_STATUS(kvt_options_set_string(opts, "devices", "0"), KVT_OK);
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(err, "devices names 1 GPUs, tensor_parallel is 2") != NULL);
  CHECK_STATUS(kvt_options_set_int(opts, "tensor_parallel", 1), KVT_OK);
  CHECK_STATUS(kvt_options_set_string(opts, "devices", ""), KVT_OK);
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_OK);
  kvt_model_free(model); /* the context keeps the model alive */
  kvt_events_create(&ev);
  kvt_request_create(&req);
  CHECK_STATUS(kvt_request_set_max_new_tokens(req, 6), KVT_OK);
  CHECK_STATUS(kvt_request_set_ignore_eos(req, 1), KVT_OK);

  /* Failure paths: each returns a status and a message, and adds nothing. */
  CHECK_STATUS(kvt_sequence_add(ctx, req, &ids[0]), KVT_ERR_INVALID_ARGUMENT); /* no prompt */
  CHECK(strstr(kvt_context_errmsg(ctx), "empty") != NULL);
  CHECK_STATUS(kvt_request_set_prompt_tokens(req, prompt[0], 0), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_request_set_max_new_tokens(req, 0), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_request_errmsg(req), "max_new_tokens") != NULL);
  {
    int32_t bad[2] = {1, 1 << 30};
    CHECK_STATUS(kvt_request_set_prompt_tokens(req, bad, 2), KVT_OK);
    CHECK_STATUS(kvt_sequence_add(ctx, req, &ids[0]), KVT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kvt_context_errmsg(ctx), "vocabulary") != NULL);
  }
  CHECK_STATUS(kvt_sequence_add(ctx, NULL, &ids[0]), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_sequence_cancel(ctx, 424242), KVT_ERR_NOT_FOUND);
  CHECK_STATUS(kvt_sequence_status(ctx, 424242, &state, &reason), KVT_ERR_NOT_FOUND);
  CHECK_STATUS(kvt_step(NULL, ev), KVT_ERR_INVALID_ARGUMENT);
  CHECK(kvt_context_num_unfinished(ctx) == 0);

  /* Solo run via the blocking call. */
  CHECK_STATUS(kvt_request_set_prompt_tokens(req, prompt[1], 5), KVT_OK);
  CHECK_STATUS(kvt_generate(ctx, req, solo, 64, &solo_len, &solo_reason), KVT_OK);
  CHECK(solo_len == 6);
  CHECK(solo_reason == KVT_FINISH_REASON_LENGTH);

  /* Three at once; the second must match its solo run; the third is cancelled. */
  for (i = 0; i < 3; ++i) {
    CHECK_STATUS(kvt_request_set_prompt_tokens(req, prompt[i], 5), KVT_OK);
    CHECK_STATUS(kvt_sequence_add(ctx, req, &ids[i]), KVT_OK);
  }
  CHECK_STATUS(kvt_sequence_status(ctx, ids[0], &state, &reason), KVT_OK);
  CHECK(state == KVT_SEQUENCE_STATE_WAITING);
  CHECK_STATUS(kvt_sequence_cancel(ctx, ids[2]), KVT_OK);
  CHECK(generate_all(ctx, ev, ids, 3, out, lens, reasons) > 0);
  CHECK(lens[1] == solo_len);
  CHECK(memcmp(out[1], solo, sizeof(int32_t) * (size_t)solo_len) == 0);
  CHECK(reasons[2] == KVT_FINISH_REASON_CANCELLED);
  CHECK_STATUS(kvt_sequence_cancel(ctx, ids[2]), KVT_ERR_STATE);
  CHECK_STATUS(kvt_sequence_tokens(ctx, ids[1], NULL, 0, &n), KVT_OK);
  CHECK(n == 6);
  CHECK_STATUS(kvt_sequence_status(ctx, ids[1], &state, &reason), KVT_OK);
  CHECK(state == KVT_SEQUENCE_STATE_FINISHED && reason == KVT_FINISH_REASON_LENGTH);
  {
    /* No error for a sequence that did not fail; bad buffers and ids are refused. */
    char error[64] = "x";
    int32_t error_len = -1;
    CHECK_STATUS(kvt_sequence_error(ctx, ids[1], error, sizeof error, &error_len), KVT_OK);
    CHECK(error_len == 0 && error[0] == '\0');
    CHECK_STATUS(kvt_sequence_error(ctx, ids[1], NULL, 4, &error_len), KVT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kvt_sequence_error(ctx, 424242, error, sizeof error, &error_len), KVT_ERR_NOT_FOUND);
  }
  CHECK_STATUS(kvt_sequence_release(ctx, ids[1]), KVT_OK);
  CHECK_STATUS(kvt_sequence_tokens(ctx, ids[1], NULL, 0, &n), KVT_ERR_NOT_FOUND);

  CHECK_STATUS(kvt_context_stats_json(ctx, stats, sizeof stats, &stats_len), KVT_OK);
  CHECK(stats_len > 0 && strstr(stats, "\"tiers\"") != NULL);
  CHECK_STATUS(kvt_context_stat(ctx, "tiers.gpu.used_bytes", &value), KVT_OK);
  CHECK(value == 0);
  CHECK_STATUS(kvt_context_stat(ctx, "generated_tokens", &value), KVT_OK);
  CHECK(value >= 12);
  CHECK_STATUS(kvt_context_stat(ctx, "no.such.stat", &value), KVT_ERR_NOT_FOUND);

  kvt_request_free(req);
  kvt_events_free(ev);
  kvt_context_free(ctx);
  kvt_options_free(opts);
  CHECK(kvt_live_handles() == 0);
}

/* Generates from a text prompt; returns the streamed text (concatenated event pieces). */
static int generate_text(kvt_context* ctx, kvt_request* req, char* out, size_t cap, int32_t* reason) {
  kvt_events* ev = NULL;
  int64_t id = 0;
  size_t used = 0;
  char full[4096];
  int32_t full_len = 0;
  kvt_events_create(&ev);
  if (kvt_sequence_add(ctx, req, &id) != KVT_OK) {
    kvt_events_free(ev);
    return -1;
  }
  while (kvt_context_num_unfinished(ctx) > 0) {
    int i;
    if (kvt_step(ctx, ev) != KVT_OK) break;
    for (i = 0; i < kvt_events_count(ev); ++i) {
      const char* piece;
      int32_t len;
      kvt_events_get(ev, i, NULL, NULL, reason);
      CHECK_STATUS(kvt_events_text(ev, i, &piece, &len), KVT_OK);
      if (used + (size_t)len < cap) {
        memcpy(out + used, piece, (size_t)len);
        used += (size_t)len;
      }
    }
  }
  out[used] = '\0';
  /* The streamed pieces concatenate to the sequence's text. */
  CHECK_STATUS(kvt_sequence_text(ctx, id, full, sizeof full, &full_len), KVT_OK);
  CHECK((size_t)full_len == used && memcmp(full, out, used) == 0);
  kvt_sequence_release(ctx, id);
  kvt_events_free(ev);
  return (int)used;
}

static void test_text(const char* model_dir) {
  char err[512], text[4096], stopped[4096], decoded[256];
  kvt_model* model = NULL;
  kvt_context* ctx = NULL;
  kvt_options* opts = NULL;
  kvt_request* req = NULL;
  int32_t ids[64], n = 0, len = 0, reason = 0;
  const int32_t expected[] = {256, 72, 101, 108, 108, 111};
  int text_len, stopped_len;
  const char* cut;

  CHECK_STATUS(kvt_model_load(model_dir, &model, err, sizeof err), KVT_OK);
  if (model == NULL) return;
  CHECK(kvt_model_has_tokenizer(model) == 1);
  CHECK_STATUS(kvt_model_tokenize(model, "Hello", 5, 1, ids, 64, &n, err, sizeof err), KVT_OK);
  CHECK(n == 6 && memcmp(ids, expected, sizeof expected) == 0);
  CHECK_STATUS(kvt_model_detokenize(model, ids, n, 1, decoded, sizeof decoded, &len, err, sizeof err), KVT_OK);
  CHECK(len == 5 && strcmp(decoded, "Hello") == 0);
  ids[0] = 1 << 20;
  CHECK_STATUS(kvt_model_detokenize(model, ids, 1, 1, decoded, sizeof decoded, &len, err, sizeof err),
               KVT_ERR_INVALID_ARGUMENT);
  CHECK(strlen(err) > 0);
  CHECK_STATUS(kvt_model_tokenize(model, "\xff\xfe", 2, 1, ids, 64, &n, err, sizeof err), KVT_ERR_INVALID_ARGUMENT);
  /* A token's own bytes: a byte token gives its byte even when it is part of a character. */
  CHECK_STATUS(kvt_model_token_bytes(model, 72, decoded, sizeof decoded, &len), KVT_OK);
  CHECK(len == 1 && strcmp(decoded, "H") == 0);
  CHECK_STATUS(kvt_model_token_bytes(model, 0xC3, decoded, sizeof decoded, &len), KVT_OK);
  CHECK(len == 1 && (unsigned char)decoded[0] == 0xC3 && decoded[1] == '\0');
  CHECK_STATUS(kvt_model_token_bytes(model, 0xC3, NULL, 0, &len), KVT_OK);
  CHECK(len == 1);
  CHECK_STATUS(kvt_model_token_bytes(model, 256, decoded, sizeof decoded, &len), KVT_OK); /* BOS: its text */
  CHECK(len > 0 && (int32_t)strlen(decoded) == len);
  CHECK_STATUS(kvt_model_token_bytes(model, 1 << 20, decoded, sizeof decoded, &len), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_model_token_bytes(model, -1, decoded, sizeof decoded, &len), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_model_token_bytes(model, 72, NULL, 4, &len), KVT_ERR_INVALID_ARGUMENT);

  kvt_options_create(&opts);
  kvt_options_set_string(opts, "gpu_kv_bytes", TEST_GPU_KV_BYTES);
  kvt_options_set_string(opts, "backend", "cpu");
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_OK);
  kvt_request_create(&req);
  kvt_request_set_max_new_tokens(req, 24);
  kvt_request_set_ignore_eos(req, 1);
  CHECK_STATUS(kvt_request_set_prompt_text(req, "Tiers at work", 13), KVT_OK);
  text_len = generate_text(ctx, req, text, sizeof text, &reason);
  CHECK(text_len > 0);
  CHECK(reason == KVT_FINISH_REASON_LENGTH);
  /* Stop at a character from the middle of that text: the output is what came before it. */
  if (text_len > 4) {
    const char* at = text + text_len / 2;
    size_t stop_len = 1;
    while (((unsigned char)*at & 0xC0) == 0x80) --at; /* start of a UTF-8 character */
    while (((unsigned char)at[stop_len] & 0xC0) == 0x80) ++stop_len;
    CHECK_STATUS(kvt_request_add_stop_string(req, at, (int32_t)stop_len), KVT_OK);
    stopped_len = generate_text(ctx, req, stopped, sizeof stopped, &reason);
    {
      char needle[8] = {0};
      memcpy(needle, at, stop_len);
      cut = strstr(text, needle);
    }
    CHECK(reason == KVT_FINISH_REASON_STOP);
    CHECK(cut != NULL && stopped_len == (int)(cut - text) && memcmp(stopped, text, (size_t)stopped_len) == 0);
  }
  CHECK_STATUS(kvt_request_add_chat_message(req, "robot", "hi"), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_request_set_prompt_text(req, NULL, 3), KVT_ERR_INVALID_ARGUMENT);
  /* A chat prompt on a model without a chat template or markers is ChatML as plain text; the
   * sequence's prompt tokens are that text encoded. */
  {
    const char chatml[] = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                          "<|im_start|>assistant\n";
    int32_t want[128], got[128], want_n = 0, got_n = 0;
    int64_t id = 0;
    CHECK_STATUS(kvt_request_add_chat_message(req, "system", "Be brief."), KVT_OK);
    CHECK_STATUS(kvt_request_add_chat_message(req, "user", "Hi"), KVT_OK);
    CHECK_STATUS(kvt_sequence_add(ctx, req, &id), KVT_OK);
    CHECK_STATUS(kvt_model_tokenize(model, chatml, (int32_t)strlen(chatml), 0, want, 128, &want_n, err, sizeof err),
                 KVT_OK);
    CHECK_STATUS(kvt_sequence_prompt_tokens(ctx, id, NULL, 0, &got_n), KVT_OK);
    CHECK(got_n == want_n);
    CHECK_STATUS(kvt_sequence_prompt_tokens(ctx, id, got, 128, &got_n), KVT_OK);
    CHECK(got_n == want_n && memcmp(got, want, sizeof(int32_t) * (size_t)want_n) == 0);
    CHECK_STATUS(kvt_sequence_prompt_tokens(ctx, id, NULL, 3, &got_n), KVT_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kvt_sequence_prompt_tokens(ctx, id + 100, got, 128, &got_n), KVT_ERR_NOT_FOUND);
    CHECK_STATUS(kvt_sequence_cancel(ctx, id), KVT_OK);
    while (kvt_context_num_unfinished(ctx) > 0) kvt_step(ctx, NULL);
  }
  kvt_request_free(req);
  kvt_context_free(ctx);
  kvt_options_free(opts);
  kvt_model_free(model);
  CHECK(kvt_live_handles() == 0);
}

/* Cache namespaces: sequences share prompt-prefix blocks only within one; the tokens never
 * depend on it; invalid namespaces are refused with a message and change nothing. */
static void test_cache_namespace(const char* model_dir) {
  char err[512];
  char long_ns[258];
  kvt_model* model = NULL;
  kvt_options* opts = NULL;
  kvt_context* ctx = NULL;
  kvt_request* req = NULL;
  int32_t prompt[40];
  int32_t out[3][8];
  int32_t len = 0, reason = 0;
  int64_t hits = -1;
  const char* names[3] = {"tenant-a", "tenant-b", "tenant-a"};
  const int64_t expected_hits[3] = {0, 0, 2}; /* two full blocks of 16 reused the third time */
  int i;

  for (i = 0; i < 40; ++i) prompt[i] = 3 + (i * 7) % 200;
  CHECK_STATUS(kvt_model_load(model_dir, &model, err, sizeof err), KVT_OK);
  if (model == NULL) return;
  kvt_options_create(&opts);
  kvt_options_set_string(opts, "gpu_kv_bytes", TEST_GPU_KV_BYTES);
  kvt_options_set_string(opts, "backend", "cpu");
  kvt_options_set_int(opts, "threads", 2);
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_OK);
  kvt_model_free(model);
  kvt_options_free(opts);
  kvt_request_create(&req);
  kvt_request_set_prompt_tokens(req, prompt, 40);
  kvt_request_set_max_new_tokens(req, 8);
  kvt_request_set_ignore_eos(req, 1);
  for (i = 0; i < 3; ++i) {
    CHECK_STATUS(kvt_request_set_cache_namespace(req, names[i]), KVT_OK);
    CHECK_STATUS(kvt_generate(ctx, req, out[i], 8, &len, &reason), KVT_OK);
    CHECK(len == 8);
    CHECK_STATUS(kvt_context_stat(ctx, "prefix_hits.gpu", &hits), KVT_OK);
    CHECK(hits == expected_hits[i]);
  }
  CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0);
  CHECK(memcmp(out[0], out[2], sizeof out[0]) == 0);
  CHECK_STATUS(kvt_context_stat(ctx, "prefix_token_mismatch", &hits), KVT_OK);
  CHECK(hits == 0);

  CHECK_STATUS(kvt_request_set_cache_namespace(req, "\xff"), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_request_errmsg(req), "UTF-8") != NULL);
  CHECK_STATUS(kvt_request_set_cache_namespace(req, NULL), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_request_errmsg(req), "NULL") != NULL);
  memset(long_ns, 'x', 257);
  long_ns[257] = '\0';
  CHECK_STATUS(kvt_request_set_cache_namespace(req, long_ns), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_request_errmsg(req), "256") != NULL);
  CHECK_STATUS(kvt_request_set_cache_namespace(NULL, "a"), KVT_ERR_INVALID_ARGUMENT);
  /* The request kept "tenant-a": a fourth run hits again. */
  CHECK_STATUS(kvt_generate(ctx, req, out[0], 8, &len, &reason), KVT_OK);
  CHECK_STATUS(kvt_context_stat(ctx, "prefix_hits.gpu", &hits), KVT_OK);
  CHECK(hits == 4);
  CHECK_STATUS(kvt_request_set_cache_namespace(req, ""), KVT_OK);
  kvt_request_free(req);
  kvt_context_free(ctx);
  CHECK(kvt_live_handles() == 0);
}

/* Structured output: setters refuse what does not compile, naming where; generation under a
 * JSON schema or a GBNF grammar ends complete with KVT_FINISH_REASON_GRAMMAR. */
static void test_structured(const char* model_dir, const char* text_model_dir) {
  char err[512], text[4096];
  kvt_model* model = NULL;
  kvt_model* plain = NULL;
  kvt_context* ctx = NULL;
  kvt_context* plain_ctx = NULL;
  kvt_options* opts = NULL;
  kvt_request* req = NULL;
  int32_t reason = 0;
  int64_t id = 0;
  int i, len;

  kvt_request_create(&req);
  CHECK_STATUS(kvt_request_set_json_schema(req, "{\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"x\"}}}"),
               KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_request_errmsg(req), "#/properties/a") != NULL && strstr(kvt_request_errmsg(req), "pattern") != NULL);
  CHECK_STATUS(kvt_request_set_json_schema(req, "{\"type\":"), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_request_set_grammar(req, "root ::= \"a\"\nx ::= y\n"), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_request_errmsg(req), "line 2, column 7") != NULL);
  CHECK_STATUS(kvt_request_set_grammar(req, "root ::= root \"a\" | \"b\"\n"), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_request_errmsg(req), "left recursion") != NULL);
  CHECK_STATUS(kvt_request_set_json_schema(NULL, "{}"), KVT_ERR_INVALID_ARGUMENT);

  kvt_options_create(&opts);
  kvt_options_set_string(opts, "gpu_kv_bytes", TEST_GPU_KV_BYTES);
  kvt_options_set_string(opts, "backend", "cpu");
  /* A model without tokenizer.json cannot take a grammar. */
  CHECK_STATUS(kvt_model_load(model_dir, &plain, err, sizeof err), KVT_OK);
  CHECK_STATUS(kvt_context_create(plain, opts, &plain_ctx, err, sizeof err), KVT_OK);
  kvt_request_set_prompt_tokens(req, (const int32_t[]){1, 2, 3}, 3);
  CHECK_STATUS(kvt_request_set_grammar(req, "root ::= \"yes\" | \"no\"\n"), KVT_OK);
  CHECK_STATUS(kvt_sequence_add(plain_ctx, req, &id), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_context_errmsg(plain_ctx), "tokenizer") != NULL);

  CHECK_STATUS(kvt_model_load(text_model_dir, &model, err, sizeof err), KVT_OK);
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_OK);
  kvt_request_set_prompt_text(req, "Answer:", 7);
  kvt_request_set_temperature(req, 1.0f);
  kvt_request_set_max_new_tokens(req, 64);
  for (i = 0; i < 4; ++i) {
    kvt_request_set_seed(req, i);
    len = generate_text(ctx, req, text, sizeof text, &reason);
    CHECK(reason == KVT_FINISH_REASON_GRAMMAR);
    CHECK(len >= 0 && (strcmp(text, "yes") == 0 || strcmp(text, "no") == 0));
  }
  CHECK_STATUS(kvt_request_set_json_schema(
                   req, "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"}},\"required\":[\"ok\"],"
                        "\"additionalProperties\":false}"),
               KVT_OK);
  len = generate_text(ctx, req, text, sizeof text, &reason);
  CHECK(reason == KVT_FINISH_REASON_GRAMMAR);
  CHECK(len > 0 && text[0] == '{' && text[len - 1] == '}' && strstr(text, "\"ok\"") != NULL);
  /* NULL removes the constraint. */
  CHECK_STATUS(kvt_request_set_json_schema(req, NULL), KVT_OK);
  kvt_request_set_ignore_eos(req, 1);
  kvt_request_set_max_new_tokens(req, 5);
  generate_text(ctx, req, text, sizeof text, &reason);
  CHECK(reason == KVT_FINISH_REASON_LENGTH);

  kvt_request_free(req);
  kvt_context_free(ctx);
  kvt_context_free(plain_ctx);
  kvt_options_free(opts);
  kvt_model_free(model);
  kvt_model_free(plain);
  CHECK(kvt_live_handles() == 0);
}

/* The same model as a checkpoint directory and as a GGUF file (kvtier mkmodel --format
 * gguf): the same text, token for token, through the same calls. */
static void test_gguf(const char* dir, const char* gguf) {
  char err[512], from_dir[4096], from_gguf[4096];
  int lens[2] = {-1, -2};
  const char* paths[2];
  char* outs[2];
  int k;
  paths[0] = dir;
  paths[1] = gguf;
  outs[0] = from_dir;
  outs[1] = from_gguf;
  for (k = 0; k < 2; ++k) {
    kvt_model* model = NULL;
    kvt_options* opts = NULL;
    kvt_context* ctx = NULL;
    kvt_request* req = NULL;
    int32_t reason = 0;
    CHECK_STATUS(kvt_model_load(paths[k], &model, err, sizeof err), KVT_OK);
    if (model == NULL) return;
    CHECK(kvt_model_has_tokenizer(model) == 1);
    CHECK(kvt_model_vocab_size(model) == 258);
    kvt_options_create(&opts);
    kvt_options_set_string(opts, "backend", "cpu");
    CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_OK);
    kvt_request_create(&req);
    kvt_request_set_max_new_tokens(req, 16);
    kvt_request_set_ignore_eos(req, 1);
    CHECK_STATUS(kvt_request_set_prompt_text(req, "Tiers at work", 13), KVT_OK);
    lens[k] = generate_text(ctx, req, outs[k], sizeof from_dir, &reason);
    kvt_request_free(req);
    kvt_context_free(ctx);
    kvt_options_free(opts);
    kvt_model_free(model);
  }
  CHECK(lens[0] > 0 && lens[0] == lens[1] && memcmp(from_dir, from_gguf, (size_t)lens[0]) == 0);
  CHECK(kvt_live_handles() == 0);
}

int main(int argc, char** argv) {
  if (!check_args(argc, argv, "MODEL_DIR TEXT_MODEL_DIR TEXT_MODEL_GGUF")) return 2;
  test_version();
  test_options();
  test_model_errors();
  test_generation(argv[1]);
  test_cache_namespace(argv[1]);
  test_text(argv[2]);
  test_text(argv[3]);
  test_gguf(argv[2], argv[3]);
  test_structured(argv[1], argv[2]);
  return check_report();
}
