// C API: the process-wide log callback (common/log.h holds the sink and its guarantees).
#include "api/handles.h"
#include "common/log.h"

extern "C" {

KVT_API kvt_status kvt_set_log_callback(kvt_log_fn callback, void* user_data, int32_t min_level) {
  return kvtier::api::Guard([&] {
    return kvtier::api::ToKvtStatus(kvtier::SetLogSink(callback, user_data, min_level));
  });
}

}  // extern "C"
