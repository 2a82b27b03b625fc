/* kvtier C example: load a checkpoint, continue two prompts at once, print what it wrote.
 *
 *   usage: kvtier_example [MODEL_DIR [MAX_NEW_TOKENS [BACKEND]]]     (BACKEND: auto, cpu, cuda)
 *
 * Without MODEL_DIR it uses the demo model of package kvtier-demo-model
 * (/usr/share/kvtier/models/demo, or $KVTIER_DEMO_MODEL). A model with a tokenizer.json gets
 * text prompts and its text is printed; one without (e.g. `kvtier mkmodel --preset tiny-llama
 * --out /tmp/tiny`) gets token ids and prints token ids.
 * Build with pkg-config (Makefile) or CMake (CMakeLists.txt, find_package(kvtier)). */
#include <kvtier/kvtier.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* DemoModelDir(void) {
  const char* env = getenv("KVTIER_DEMO_MODEL");
  return env != NULL && env[0] != '\0' ? env : "/usr/share/kvtier/models/demo";
}

int main(int argc, char** argv) {
  if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
    printf("usage: %s [MODEL_DIR [MAX_NEW_TOKENS [auto|cpu|cuda]]] (default model: %s)\n", argv[0], DemoModelDir());
    return 0;
  }
  const char* model_dir = argc > 1 ? argv[1] : DemoModelDir();
  const int32_t max_new = argc > 2 ? (int32_t)atoi(argv[2]) : 24;
  const char* backend = argc > 3 ? argv[3] : "auto"; /* auto: CUDA module if usable, else CPU */
  printf("kvtier header %s, library %s\n", KVT_VERSION_STRING, kvt_version_string());
  if (kvt_version_major() != KVT_VERSION_MAJOR) {
    fprintf(stderr, "library major version %d does not match the header's %d\n",
            (int)kvt_version_major(), KVT_VERSION_MAJOR);
    return 1;
  }

  char err[512];
  kvt_model* model = NULL;
  if (kvt_model_load(model_dir, &model, err, (int32_t)sizeof err) != KVT_OK) {
    fprintf(stderr, "kvt_model_load: %s%s\n", err,
            argc > 1 ? "" : " (install kvtier-demo-model, or give a MODEL_DIR)");
    return 1;
  }
  const int text = kvt_model_has_tokenizer(model);
  kvt_options* opts = NULL;
  kvt_options_create(&opts);
  if (kvt_options_set_string(opts, "backend", backend) != KVT_OK) {
    fprintf(stderr, "backend: %s\n", kvt_options_errmsg(opts));
    kvt_options_free(opts);
    kvt_model_free(model);
    return 2;
  }
  kvt_options_set_int(opts, "threads", 2);
  kvt_context* ctx = NULL;
  if (kvt_context_create(model, opts, &ctx, err, (int32_t)sizeof err) != KVT_OK) {
    fprintf(stderr, "kvt_context_create: %s\n", err);
    kvt_options_free(opts);
    kvt_model_free(model);
    return 1;
  }
  kvt_model_free(model); /* the context holds its own reference */

  static const int32_t prompt_ids[2][3] = {{1, 2, 3}, {4, 5, 6}};
  static const char* const prompt_texts[2] = {"The meaning of life is", "A computer is"};
  kvt_request* req = NULL;
  kvt_request_create(&req);
  kvt_request_set_max_new_tokens(req, max_new);
  /* A random-weight model has no real end of text: it produces exactly max_new tokens. */
  kvt_request_set_ignore_eos(req, text ? 0 : 1);
  int64_t ids[2];
  int failed = 0;
  for (int i = 0; i < 2; ++i) {
    if (text) {
      kvt_request_set_prompt_text(req, prompt_texts[i], (int32_t)strlen(prompt_texts[i]));
    } else {
      kvt_request_set_prompt_tokens(req, prompt_ids[i], 3);
    }
    if (kvt_sequence_add(ctx, req, &ids[i]) != KVT_OK) {
      fprintf(stderr, "kvt_sequence_add: %s\n", kvt_context_errmsg(ctx));
      failed = 1;
    }
  }

  kvt_events* ev = NULL;
  kvt_events_create(&ev);
  int32_t produced = 0;
  while (!failed && kvt_context_num_unfinished(ctx) > 0) {
    if (kvt_step(ctx, ev) != KVT_OK) {
      fprintf(stderr, "kvt_step: %s\n", kvt_context_errmsg(ctx));
      failed = 1;
      break;
    }
    for (int32_t i = 0; i < kvt_events_count(ev); ++i) {
      int64_t seq;
      int32_t token, finish;
      kvt_events_get(ev, i, &seq, &token, &finish);
      if (token != KVT_NO_TOKEN) ++produced;
      if (finish == KVT_FINISH_REASON_ERROR) failed = 1;
    }
  }
  for (int i = 0; i < 2 && !failed; ++i) {
    if (text) {
      char out[4096];
      int32_t len = 0;
      kvt_sequence_text(ctx, ids[i], out, (int32_t)sizeof out, &len);
      if (len >= (int32_t)sizeof out) len = (int32_t)sizeof out - 1;
      out[len] = '\0';
      printf("sequence %lld: %s%s\n", (long long)ids[i], prompt_texts[i], out);
      if (len == 0) failed = 1;
      continue;
    }
    int32_t tokens[256];
    int32_t n = 0;
    kvt_sequence_tokens(ctx, ids[i], tokens, 256, &n);
    printf("sequence %lld:", (long long)ids[i]);
    for (int32_t t = 0; t < n && t < 256; ++t) printf(" %d", (int)tokens[t]);
    printf("\n");
    if (n != max_new) failed = 1;
  }
  printf("%d tokens generated\n", (int)produced);

  kvt_events_free(ev);
  kvt_request_free(req);
  kvt_context_free(ctx);
  kvt_options_free(opts);
  return failed ? 1 : 0;
}
