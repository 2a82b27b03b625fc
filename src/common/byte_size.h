// Parsing of human byte sizes ("512", "64KiB", "2GiB", "1.5GB"). Stateless; thread-safe.
#ifndef KVTIER_COMMON_BYTE_SIZE_H_
#define KVTIER_COMMON_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kvtier {

// Plain bytes or a KiB/MiB/GiB/TiB (binary), KB/MB/GB/TB (decimal), K/M/G (binary) or B
// suffix. InvalidArgument naming the text otherwise.
absl::StatusOr<int64_t> ParseByteSize(const std::string& text);

}  // namespace kvtier

#endif  // KVTIER_COMMON_BYTE_SIZE_H_
