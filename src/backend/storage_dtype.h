// StorageDType: the options weight_dtype and kv_dtype, i.e. the number format a backend
// holds weights or KV in (compute may be wider). Plain enum and pure functions; thread-safe.
#ifndef KVTIER_BACKEND_STORAGE_DTYPE_H_
#define KVTIER_BACKEND_STORAGE_DTYPE_H_

#include <optional>
#include <string_view>
#include <utility>

namespace kvtier {

// kAuto: the backend's natural format (CPU: fp32; CUDA: the checkpoint's 16-bit type).
// kFp8: E4M3 with fp32 scales (common/fp8_e4m3.h); weights get one scale per output
// channel (model/fp8_weights.h QuantizeRowsFp8).
// kQ8_0, kQ4_K: weights only, CPU only: GGUF's blocks (model/block_quants.h), quantized
// at load as llama.cpp's reference quantizer does.
enum class StorageDType { kAuto, kBf16, kFp16, kFp8, kQ8_0, kQ4_K };

// The one table of option spellings: ParseStorageDType and StorageDTypeName both read it.
inline constexpr std::pair<StorageDType, std::string_view> kStorageDTypeNames[] = {
    {StorageDType::kAuto, "auto"},
    {StorageDType::kBf16, "bf16"},
    {StorageDType::kFp16, "fp16"},
    {StorageDType::kFp8, "fp8"},
    {StorageDType::kQ8_0, "q8_0"},
    {StorageDType::kQ4_K, "q4_k"},
};

// True for the weight-only block formats (not a KV format).
inline bool IsBlockStorageDType(StorageDType dtype) {
  return dtype == StorageDType::kQ8_0 || dtype == StorageDType::kQ4_K;
}

inline std::optional<StorageDType> ParseStorageDType(std::string_view name) {
  for (const auto& [dtype, spelling] : kStorageDTypeNames) {
    if (spelling == name) return dtype;
  }
  return std::nullopt;
}

inline std::string_view StorageDTypeName(StorageDType dtype) {
  for (const auto& [value, spelling] : kStorageDTypeNames) {
    if (value == dtype) return spelling;
  }
  return "?";
}

}  // namespace kvtier

#endif  // KVTIER_BACKEND_STORAGE_DTYPE_H_
