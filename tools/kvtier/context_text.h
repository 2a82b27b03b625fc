// The context's text outputs of the C API (kvt_context_stats_json, kvt_context_metrics_text)
// as strings.
#ifndef KVTIER_TOOLS_KVTIER_CONTEXT_TEXT_H_
#define KVTIER_TOOLS_KVTIER_CONTEXT_TEXT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "kvtier/kvtier.h"

namespace kvtier::cli {

using ContextTextFn = kvt_status (*)(kvt_context*, char*, int32_t, int32_t*);

// The whole text `fn` writes for `context`; nullopt when a call fails. The size a first
// call reports can be too small by the time of the copy (the I/O threads and the stepping
// thread move the counters in between, and a number can gain a digit), so the copy is
// made again, larger, until the text fits.
std::optional<std::string> ContextText(kvt_context* context, ContextTextFn fn);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_CONTEXT_TEXT_H_
