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

#endif /* KVTIER_TESTS_C_API_C_CHECK_H_ */
