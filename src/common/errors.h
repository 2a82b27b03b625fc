// Status codes kvtier uses beyond abseil's obvious ones, so that the C boundary can map
// every failure to one kvt_status without parsing messages:
//   InvalidArgument/OutOfRange -> KVT_ERR_INVALID_ARGUMENT, NotFound -> KVT_ERR_NOT_FOUND,
//   Unimplemented -> KVT_ERR_UNSUPPORTED, ResourceExhausted -> KVT_ERR_CAPACITY (or
//   KVT_ERR_OUT_OF_MEMORY when creating), Unavailable -> KVT_ERR_BUSY, DataLoss ->
//   KVT_ERR_CORRUPT, FailedPrecondition -> KVT_ERR_STATE, Aborted -> KVT_ERR_BACKEND,
//   Unknown -> KVT_ERR_IO, Cancelled -> KVT_ERR_CANCELLED (a progress callback asked to
//   stop), anything else -> KVT_ERR_INTERNAL. Stateless; thread-safe.
#ifndef KVTIER_COMMON_ERRORS_H_
#define KVTIER_COMMON_ERRORS_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace kvtier {

// A file read/write failed (short write, EIO, full disk).
inline absl::Status IoError(absl::string_view message) {
  return absl::Status(absl::StatusCode::kUnknown, message);
}
inline bool IsIoError(const absl::Status& s) { return s.code() == absl::StatusCode::kUnknown; }

// The compute backend failed (CUDA error, cuBLAS error): the step did not happen.
inline absl::Status BackendError(absl::string_view message) {
  return absl::Status(absl::StatusCode::kAborted, message);
}

}  // namespace kvtier

#endif  // KVTIER_COMMON_ERRORS_H_
