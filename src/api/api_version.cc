// C API: version and status names.
#include <cstring>

#include "api/handles.h"

extern "C" {

KVT_API int32_t kvt_version_major(void) { return KVT_VERSION_MAJOR; }
KVT_API int32_t kvt_version_minor(void) { return KVT_VERSION_MINOR; }
KVT_API int32_t kvt_version_patch(void) { return KVT_VERSION_PATCH; }
KVT_API const char* kvt_version_string(void) { return KVT_VERSION_STRING; }

KVT_API const char* kvt_status_string(kvt_status status) {
  // A C caller may pass any int (C enums are ints); outside the enumerators' range that
  // is not a valid C++ enum value, so read the bits as an integer first.
  int32_t value = 0;
  static_assert(sizeof(status) == sizeof(value));
  std::memcpy(&value, &status, sizeof value);
  switch (value) {
    case KVT_OK: return "KVT_OK";
    case KVT_ERR_INVALID_ARGUMENT: return "KVT_ERR_INVALID_ARGUMENT";
    case KVT_ERR_NOT_FOUND: return "KVT_ERR_NOT_FOUND";
    case KVT_ERR_UNSUPPORTED: return "KVT_ERR_UNSUPPORTED";
    case KVT_ERR_CAPACITY: return "KVT_ERR_CAPACITY";
    case KVT_ERR_BUSY: return "KVT_ERR_BUSY";
    case KVT_ERR_IO: return "KVT_ERR_IO";
    case KVT_ERR_CORRUPT: return "KVT_ERR_CORRUPT";
    case KVT_ERR_OUT_OF_MEMORY: return "KVT_ERR_OUT_OF_MEMORY";
    case KVT_ERR_STATE: return "KVT_ERR_STATE";
    case KVT_ERR_BACKEND: return "KVT_ERR_BACKEND";
    case KVT_ERR_INTERNAL: return "KVT_ERR_INTERNAL";
    case KVT_ERR_CANCELLED: return "KVT_ERR_CANCELLED";
  }
  return "KVT_ERR_UNKNOWN_STATUS";
}

KVT_API int64_t kvt_live_handles(void) { return kvtier::api::LiveHandles().load(); }

}  // extern "C"
