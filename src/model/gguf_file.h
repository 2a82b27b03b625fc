// GgufFile: one GGUF file (llama.cpp's model format) mapped read-only, its header, metadata
// and tensor directory fully validated, its tensors exposed as byte ranges of the mapping.
// Immutable after Open; thread-safe reads.
//
// Layout (little-endian): "GGUF", u32 version (2 or 3), u64 tensor count, u64 metadata
// count; metadata (string key, u32 type, value); tensor infos (string name, u32 n_dims,
// u64 dims innermost first, u32 ggml type, u64 offset); padding to `general.alignment`
// (u32, default 32); the data section, where each tensor lies at its aligned offset.
// Strings are a u64 length and that many bytes; arrays a u32 element type, u64 count and
// the elements.
#ifndef KVTIER_MODEL_GGUF_FILE_H_
#define KVTIER_MODEL_GGUF_FILE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gguf_types.h"

namespace kvtier {

inline constexpr uint32_t kGgufDefaultAlignment = 32;

struct GgufTensorInfo {
  std::string name;
  // ggml's order: dims[0] is the innermost (contiguous) dimension, so a [rows, cols]
  // matrix has dims {cols, rows}.
  std::vector<int64_t> dims;
  const GgmlType* type = nullptr;  // never null after Open
  uint64_t offset = 0;             // within the data section
  const uint8_t* data = nullptr;   // nbytes bytes inside the mapping
  size_t nbytes = 0;

  int64_t num_elements() const;
  // Row-major shape (outermost first), as safetensors and kvtier's TensorView spell it.
  std::vector<int64_t> Shape() const;
};

class GgufFile {
 public:
  // NotFound if missing. DataLoss naming the file and the problem for a malformed file:
  // bad magic, truncation (where, and what was being read), a value or tensor count larger
  // than the file could hold, a metadata type the format does not define, an array of
  // arrays, a duplicate key or tensor name, general.alignment not a power of two, more than
  // four dimensions, a row not a whole number of blocks, a tensor past the end of the file,
  // misaligned, or overlapping another. Unimplemented: GGUF version 1 (or above 3), a
  // big-endian file, or a tensor type code ggml does not define (its number named).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // The same checks on bytes in memory (which must outlive the result): for the fuzzer.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(const uint8_t* data, size_t size,
                                                             const std::string& name);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  // Metadata in file order.
  const GgufMetadata& metadata() const { return metadata_; }
  // nullptr when absent.
  const GgufValue* Find(std::string_view key) const;
  // Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  absl::Status Parse();

  std::string path_;
  void* mapping_ = nullptr;  // owned when non-null
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  GgufMetadata metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace kvtier

#endif  // KVTIER_MODEL_GGUF_FILE_H_
