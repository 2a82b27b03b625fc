// StorageDType: the options weight_dtype and kv_dtype, i.e. the number format a backend
// holds weights or KV in (compute may be wider). Plain enum and pure functions; thread-safe.
#ifndef KVTIER_BACKEND_STORAGE_DTYPE_H_
#define KVTIER_BACKEND_STORAGE_DTYPE_H_

#include <optional>
#include <string_view>

namespace kvtier {

// kAuto: the backend's natural format (CPU: fp32; CUDA: the checkpoint's 16-bit type).
// kFp8: E4M3 with fp32 scales (common/fp8_e4m3.h); weights get one scale per output
// channel (model/fp8_weights.h QuantizeRowsFp8).
enum class StorageDType { kAuto, kBf16, kFp16, kFp8 };

inline std::optional<StorageDType> ParseStorageDType(std::string_view name) {
  if (name == "auto") return StorageDType::kAuto;
  if (name == "bf16") return StorageDType::kBf16;
  if (name == "fp16") return StorageDType::kFp16;
  if (name == "fp8") return StorageDType::kFp8;
  return std::nullopt;
}

inline std::string_view StorageDTypeName(StorageDType dtype) {
  switch (dtype) {
    case StorageDType::kAuto:
      return "auto";
    case StorageDType::kBf16:
      return "bf16";
    case StorageDType::kFp16:
      return "fp16";
    case StorageDType::kFp8:
      return "fp8";
  }
  return "?";
}

}  // namespace kvtier

#endif  // KVTIER_BACKEND_STORAGE_DTYPE_H_
