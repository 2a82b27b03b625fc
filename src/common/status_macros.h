// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status (this abseil ships neither).
// Stateless macros; thread-safe.
#ifndef KVTIER_COMMON_STATUS_MACROS_H_
#define KVTIER_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVT_CONCAT_INNER_(a, b) a##b
#define KVT_CONCAT_(a, b) KVT_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status kvt_status_ = (expr);             \
    if (!kvt_status_.ok()) return kvt_status_;       \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(KVT_CONCAT_(kvt_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#endif  // KVTIER_COMMON_STATUS_MACROS_H_
