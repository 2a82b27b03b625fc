// GGUF writer (gguf_writer.h).
#include "model/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/gguf_file.h"

namespace kvtier {
namespace {

constexpr size_t kMaxNameBytes = 63;  // llama.cpp's GGML_MAX_NAME - 1

class Bytes {
 public:
  template <typename T>
  void Put(T value) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &value, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    out_.append(s);
  }
  void Pad(uint64_t alignment) { out_.append((alignment - out_.size() % alignment) % alignment, '\0'); }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

void PutElement(Bytes* out, GgufValueType type, const GgufValue& v, size_t i) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kBool:
      out->Put<uint8_t>(static_cast<uint8_t>(v.ints()[i]));
      break;
    case GgufValueType::kInt8:
      out->Put<int8_t>(static_cast<int8_t>(v.ints()[i]));
      break;
    case GgufValueType::kUint16:
      out->Put<uint16_t>(static_cast<uint16_t>(v.ints()[i]));
      break;
    case GgufValueType::kInt16:
      out->Put<int16_t>(static_cast<int16_t>(v.ints()[i]));
      break;
    case GgufValueType::kUint32:
      out->Put<uint32_t>(static_cast<uint32_t>(v.ints()[i]));
      break;
    case GgufValueType::kInt32:
      out->Put<int32_t>(static_cast<int32_t>(v.ints()[i]));
      break;
    case GgufValueType::kUint64:
      out->Put<uint64_t>(static_cast<uint64_t>(v.ints()[i]));
      break;
    case GgufValueType::kInt64:
      out->Put<int64_t>(v.ints()[i]);
      break;
    case GgufValueType::kFloat32:
      out->Put<float>(static_cast<float>(v.reals()[i]));
      break;
    case GgufValueType::kFloat64:
      out->Put<double>(v.reals()[i]);
      break;
    case GgufValueType::kString:
      out->PutString(v.strings()[i]);
      break;
    case GgufValueType::kArray:
      break;  // GgufValue holds no arrays of arrays
  }
}

void PutValue(Bytes* out, const GgufValue& v) {
  out->Put<uint32_t>(static_cast<uint32_t>(v.type()));
  if (v.is_array()) {
    out->Put<uint32_t>(static_cast<uint32_t>(v.element_type()));
    out->Put<uint64_t>(v.size());
  }
  for (size_t i = 0; i < v.size(); ++i) PutElement(out, v.element_type(), v, i);
}

absl::Status IoError(const std::string& what, const std::string& path) {
  const int err = errno;
  const std::string message = absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(message);
  if (err == EACCES || err == EPERM || err == EROFS) return absl::PermissionDeniedError(message);
  if (err == ENOENT) return absl::NotFoundError(message);
  return absl::InternalError(message);
}

}  // namespace

absl::Status WriteGgufFile(const std::string& path, const GgufMetadata& metadata,
                           const std::vector<TensorToWrite>& tensors, const GgufWriteOptions& options) {
  const uint32_t alignment = options.alignment;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF alignment ", alignment, " is not a power of two"));
  }
  GgufMetadata kvs = metadata;
  if (alignment != kGgufDefaultAlignment) kvs.emplace_back("general.alignment", GgufValue::Uint32(alignment));
  std::set<std::string> keys, names;
  for (const auto& [key, value] : kvs) {
    if (!keys.insert(key).second) return absl::InvalidArgumentError(absl::StrCat("GGUF metadata key '", key, "' given twice"));
  }

  Bytes header;
  header.Put<uint32_t>(0x46554747);  // "GGUF"
  header.Put<uint32_t>(3);
  header.Put<uint64_t>(tensors.size());
  header.Put<uint64_t>(kvs.size());
  for (const auto& [key, value] : kvs) {
    header.PutString(key);
    PutValue(&header, value);
  }
  uint64_t offset = 0;
  int64_t total_bytes = 0;
  for (const TensorToWrite& t : tensors) {
    const GgmlType* type = GgmlTypeOf(t.dtype);
    if (type == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "': GGUF has no dtype ", std::string(DTypeName(t.dtype))));
    }
    if (t.name.size() > kMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat("tensor name '", t.name, "' is longer than ", kMaxNameBytes, " bytes"));
    }
    if (!names.insert(t.name).second) return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' given twice"));
    const int64_t row = t.shape.empty() ? 1 : t.shape.back();
    if (row % type->block_elements != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': rows of ", row, " elements are not whole ",
                                                     std::string(type->name), " blocks of ", type->block_elements));
    }
    header.PutString(t.name);
    header.Put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) header.Put<uint64_t>(static_cast<uint64_t>(*d));
    header.Put<uint32_t>(type->code);
    header.Put<uint64_t>(offset);
    offset += (static_cast<uint64_t>(t.nbytes()) + alignment - 1) / alignment * alignment;
    total_bytes += t.nbytes();
  }
  header.Pad(alignment);

  const std::string tmp = path + ".tmp";
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (file == nullptr) return IoError("create", tmp);
  auto fail = [&tmp, &file](absl::Status status) {
    file.reset();
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return status;
  };
  if (std::fwrite(header.str().data(), 1, header.str().size(), file.get()) != header.str().size()) {
    return fail(IoError("write", tmp));
  }
  ProgressStage stage(options.progress, "weights", total_bytes);
  if (absl::Status s = stage.Begin(); !s.ok()) return fail(s);
  std::vector<uint8_t> buffer;
  for (const TensorToWrite& t : tensors) {
    const size_t n = static_cast<size_t>(t.nbytes());
    buffer.assign(n + (alignment - n % alignment) % alignment, 0);
    if (n > 0) t.produce(0, t.num_elements(), buffer.data());
    if (std::fwrite(buffer.data(), 1, buffer.size(), file.get()) != buffer.size()) return fail(IoError("write", tmp));
    if (absl::Status s = stage.Add(static_cast<int64_t>(n)); !s.ok()) return fail(s);
  }
  if (std::fflush(file.get()) != 0) return fail(IoError("write", tmp));
  if (std::fclose(file.release()) != 0) return fail(IoError("close", tmp));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return fail(IoError("rename to", path));
  return stage.End();
}

}  // namespace kvtier
