// SafetensorsFile: one .safetensors file mapped read-only, its header fully validated, its
// tensors exposed as TensorViews into the mapping. Immutable after Open; thread-safe reads.
#ifndef KVTIER_MODEL_SAFETENSORS_H_
#define KVTIER_MODEL_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tensor.h"

namespace kvtier {

// Element size of a safetensors dtype string ("F32", "I64", "F8_E4M3", ...); nullopt when
// the format does not define it.
std::optional<size_t> SafetensorsDTypeSize(std::string_view dtype);
// "F32"/"F16"/"BF16"/"F8_E4M3" -> DType; nullopt for any other dtype (kvtier reads only these).
std::optional<DType> ParseDType(std::string_view dtype);

class SafetensorsFile {
 public:
  // A tensor whose dtype kvtier cannot compute with (I64, F64, U8, or a dtype newer than
  // this reader). Its byte range is validated; it is an error only if the model needs it.
  struct UnsupportedTensor {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
  };

  // NotFound if the file is missing. DataLoss naming the file (and tensor) for any
  // malformed header: length past the end of the file or over 100 MB, invalid JSON,
  // bad entry, data_offsets begin > end or past the data, byte size != shape x dtype size,
  // overlapping tensors.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // Tensors of dtype F32/F16/BF16/F8_E4M3, in header order; views stay valid while this lives.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::vector<UnsupportedTensor>& unsupported_tensors() const { return unsupported_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent (or of an unsupported dtype).
  const TensorView* Find(const std::string& name) const;
  const UnsupportedTensor* FindUnsupported(const std::string& name) const;
  size_t file_size() const { return size_; }

 private:
  SafetensorsFile() = default;
  void Unmap();

  std::string path_;
  void* mapping_ = nullptr;
  size_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::vector<UnsupportedTensor> unsupported_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace kvtier

#endif  // KVTIER_MODEL_SAFETENSORS_H_
