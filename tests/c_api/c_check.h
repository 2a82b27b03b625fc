/* The checks of the pure-C API tests: CHECK(cond) and CHECK_STATUS(expr, expected) count,
 * report each failure with its place on stderr and go on, so one run lists every failing
 * check; a test's main prints the counts and exits non-zero when any failed. One test
 * program per translation unit (the counters are its own). */
#ifndef KVTIER_TESTS_C_API_C_CHECK_H_
#define KVTIER_TESTS_C_API_C_CHECK_H_

#include <stdio.h>

#include "kvtier/kvtier.h"

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                             \
  do {                                                                          \
    ++checks;                                                                   \
    if (!(cond)) {                                                              \
      ++failures;                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                           \
  } while (0)

#define CHECK_STATUS(expr, expected)                                                      \
  do {                                                                                    \
    kvt_status got_ = (expr);                                                             \
    ++checks;                                                                             \
    if (got_ != (expected)) {                                                             \
      ++failures;                                                                         \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, #expr, \
              kvt_status_string(got_), kvt_status_string(expected));                      \
    }                                                                                     \
  } while (0)

/* The device tier the tests' contexts get: the CPU backend zeroes its KV pool when the
 * context is created, and the default (256 MiB) would cost each context that much memory
 * writing (and many times that under the sanitizers), for a few short prompts. */
#define TEST_GPU_KV_BYTES "16MiB"

/* Whether the program got the arguments `usage` names (one per word); says how to call it
 * when not. */
static inline int check_args(int argc, char** argv, const char* usage) {
  int want = 1;
  const char* c;
  for (c = usage; *c != '\0'; ++c) want += (*c == ' ');
  if (argc == want + 1) return 1;
  fprintf(stderr, "usage: %s %s\n", argv[0], usage);
  return 0;
}

/* Prints the counts; what a test's main returns: 0 when every check passed. */
static inline int check_report(void) {
  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures == 0 ? 0 : 1;
}

/* Loads the model in `model_dir` and creates a context over it on the CPU backend with two
 * threads, both checked; what failed is left NULL. */
static inline void open_cpu_context(const char* model_dir, kvt_model** model, kvt_options** opts, kvt_context** ctx) {
  char err[512];
  *model = NULL;
  *opts = NULL;
  *ctx = NULL;
  CHECK_STATUS(kvt_model_load(model_dir, model, err, sizeof err), KVT_OK);
  if (*model == NULL) return;
  kvt_options_create(opts);
  kvt_options_set_string(*opts, "gpu_kv_bytes", TEST_GPU_KV_BYTES);
  kvt_options_set_string(*opts, "backend", "cpu");
  kvt_options_set_int(*opts, "threads", 2);
  CHECK_STATUS(kvt_context_create(*model, *opts, ctx, err, sizeof err), KVT_OK);
}

#endif /* KVTIER_TESTS_C_API_C_CHECK_H_ */
