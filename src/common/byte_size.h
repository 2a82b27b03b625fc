// Parsing and printing of human byte sizes ("512", "64KiB", "2GiB", "1.5GB"). Stateless; thread-safe.
#ifndef KVTIER_COMMON_BYTE_SIZE_H_
#define KVTIER_COMMON_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kvtier {

// Plain bytes or a KiB/MiB/GiB/TiB (binary), KB/MB/GB/TB (decimal), K/M/G (binary) or B
// suffix. InvalidArgument naming the text otherwise.
absl::StatusOr<int64_t> ParseByteSize(const std::string& text);

// "1.5 GiB (1610612736 bytes)": the largest binary unit that keeps the number >= 1, then
// the exact count (messages about budgets).
std::string FormatByteSize(int64_t bytes);

}  // namespace kvtier

#endif  // KVTIER_COMMON_BYTE_SIZE_H_
