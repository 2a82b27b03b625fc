// The valid ranges of the sampling parameters, stated once: SamplingParams::Validate
// (engine), the C API's request setters and ValidateRowSampling (backend) all check through
// these, so a value one layer accepts no other rejects. Here, below the engine, because the
// backend checks the rows it samples. Stateless; thread-safe.
#ifndef KVTIER_BACKEND_SAMPLING_RANGES_H_
#define KVTIER_BACKEND_SAMPLING_RANGES_H_

#include <cstdint>

#include "absl/status/status.h"

namespace kvtier {

// Each returns OK, or InvalidArgument "<name> must be <range>, got <value>".
// temperature: finite and >= 0 (0 = greedy).
absl::Status ValidateTemperature(float temperature);
// top_k: >= 0 (0 = off).
absl::Status ValidateTopK(int32_t top_k);
// top_p: in (0, 1] (1 = off).
absl::Status ValidateTopP(float top_p);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_SAMPLING_RANGES_H_
