// GgufFile: mmap + validation of the header, metadata and tensor directory (gguf_file.h).
// Immutable after Open.
#include "model/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace kvtier {
namespace {

constexpr uint32_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS

// Reads little-endian values from the file's bytes; every read is checked against the end.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  size_t position() const { return position_; }
  size_t remaining() const { return size_ - position_; }

  absl::Status Corrupt(const std::string& what) const {
    return absl::DataLossError(absl::StrCat("corrupt GGUF file ", path_, ": ", what));
  }

  template <typename T>
  absl::StatusOr<T> Read(std::string_view what) {
    if (remaining() < sizeof(T)) return Truncated(what, sizeof(T));
    T value;
    std::memcpy(&value, data_ + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }

  absl::StatusOr<std::string> ReadString(std::string_view what) {
    ASSIGN_OR_RETURN(uint64_t length, Read<uint64_t>(what));
    if (length > remaining()) return Truncated(what, length);
    std::string s(reinterpret_cast<const char*>(data_ + position_), static_cast<size_t>(length));
    position_ += static_cast<size_t>(length);
    return s;
  }

  absl::Status Truncated(std::string_view what, uint64_t wanted) const {
    return absl::DataLossError(absl::StrCat("truncated GGUF file ", path_, ": ", std::string(what), " at byte ", position_,
                                            " needs ", wanted, " bytes but the file ends at byte ", size_));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t position_ = 0;
  const std::string& path_;
};

// Reads one value of `type` (a scalar or, for kArray, an array of scalars).
absl::StatusOr<GgufValue> ReadValue(Cursor* in, uint32_t type_code, const std::string& key) {
  const std::string what = absl::StrCat("the value of '", key, "'");
  if (!GgufValueTypeName(type_code).has_value()) {
    return in->Corrupt(absl::StrCat("metadata '", key, "' has type ", type_code, ", which GGUF does not define"));
  }
  const auto type = static_cast<GgufValueType>(type_code);
  GgufValueType element = type;
  uint64_t count = 1;
  if (type == GgufValueType::kArray) {
    ASSIGN_OR_RETURN(uint32_t element_code, in->Read<uint32_t>(what));
    if (!GgufValueTypeName(element_code).has_value()) {
      return in->Corrupt(absl::StrCat("metadata '", key, "' is an array of type ", element_code,
                                      ", which GGUF does not define"));
    }
    element = static_cast<GgufValueType>(element_code);
    if (element == GgufValueType::kArray) {
      return in->Corrupt(absl::StrCat("metadata '", key, "' is an array of arrays (not supported)"));
    }
    ASSIGN_OR_RETURN(count, in->Read<uint64_t>(what));
    // Every element takes at least one byte (a string at least its 8-byte length): a count
    // the rest of the file cannot hold is corrupt, and refused before anything is allocated.
    const size_t least = element == GgufValueType::kString ? 8 : GgufValueTypeSize(element);
    if (count > in->remaining() / least) {
      return in->Truncated(absl::StrCat(what, " (", count, " elements)"), count * least);
    }
  }
  std::vector<int64_t> ints;
  std::vector<double> reals;
  std::vector<std::string> strings;
  for (uint64_t i = 0; i < count; ++i) {
    switch (element) {
      case GgufValueType::kUint8: {
        ASSIGN_OR_RETURN(uint8_t v, in->Read<uint8_t>(what));
        ints.push_back(v);
        break;
      }
      case GgufValueType::kInt8: {
        ASSIGN_OR_RETURN(int8_t v, in->Read<int8_t>(what));
        ints.push_back(v);
        break;
      }
      case GgufValueType::kUint16: {
        ASSIGN_OR_RETURN(uint16_t v, in->Read<uint16_t>(what));
        ints.push_back(v);
        break;
      }
      case GgufValueType::kInt16: {
        ASSIGN_OR_RETURN(int16_t v, in->Read<int16_t>(what));
        ints.push_back(v);
        break;
      }
      case GgufValueType::kUint32: {
        ASSIGN_OR_RETURN(uint32_t v, in->Read<uint32_t>(what));
        ints.push_back(v);
        break;
      }
      case GgufValueType::kInt32: {
        ASSIGN_OR_RETURN(int32_t v, in->Read<int32_t>(what));
        ints.push_back(v);
        break;
      }
      case GgufValueType::kUint64: {
        ASSIGN_OR_RETURN(uint64_t v, in->Read<uint64_t>(what));
        ints.push_back(static_cast<int64_t>(v));
        break;
      }
      case GgufValueType::kInt64: {
        ASSIGN_OR_RETURN(int64_t v, in->Read<int64_t>(what));
        ints.push_back(v);
        break;
      }
      case GgufValueType::kBool: {
        ASSIGN_OR_RETURN(uint8_t v, in->Read<uint8_t>(what));
        if (v > 1) return in->Corrupt(absl::StrCat("metadata '", key, "' has a bool of value ", int{v}));
        ints.push_back(v);
        break;
      }
      case GgufValueType::kFloat32: {
        ASSIGN_OR_RETURN(float v, in->Read<float>(what));
        reals.push_back(v);
        break;
      }
      case GgufValueType::kFloat64: {
        ASSIGN_OR_RETURN(double v, in->Read<double>(what));
        reals.push_back(v);
        break;
      }
      case GgufValueType::kString: {
        ASSIGN_OR_RETURN(std::string v, in->ReadString(what));
        strings.push_back(std::move(v));
        break;
      }
      case GgufValueType::kArray:
        break;  // refused above
    }
  }
  if (type != GgufValueType::kArray) {
    if (element == GgufValueType::kString) return GgufValue::String(std::move(strings[0]));
    if (element == GgufValueType::kFloat32 || element == GgufValueType::kFloat64) {
      return GgufValue::Real(element, reals[0]);
    }
    return GgufValue::Scalar(element, ints[0]);
  }
  if (element == GgufValueType::kString) return GgufValue::StringArray(std::move(strings));
  if (element == GgufValueType::kFloat32 || element == GgufValueType::kFloat64) {
    return GgufValue::RealArray(element, std::move(reals));
  }
  return GgufValue::IntArray(element, std::move(ints));
}

uint64_t AlignUp(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

}  // namespace

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::vector<int64_t> GgufTensorInfo::Shape() const { return std::vector<int64_t>(dims.rbegin(), dims.rend()); }

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat("GGUF file ", path, " not found"));
    return absl::PermissionDeniedError(absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* mapping = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_err = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (mapping == MAP_FAILED) {
      return absl::InternalError(absl::StrCat("cannot mmap ", path, ": ", std::strerror(map_err)));
    }
    file->mapping_ = mapping;
    file->bytes_ = static_cast<const uint8_t*>(mapping);
  } else {
    ::close(fd);
  }
  RETURN_IF_ERROR(file->Parse());
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(const uint8_t* data, size_t size,
                                                              const std::string& name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = name;
  file->bytes_ = data;
  file->size_ = size;
  RETURN_IF_ERROR(file->Parse());
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

absl::Status GgufFile::Parse() {
  Cursor in(bytes_, size_, path_);
  if (size_ < 4 || std::memcmp(bytes_, "GGUF", 4) != 0) {
    std::string seen;
    for (size_t i = 0; i < std::min<size_t>(size_, 4); ++i) {
      const char c = static_cast<char>(bytes_[i]);
      seen += (c >= 0x20 && c < 0x7f) ? c : '?';
    }
    return absl::DataLossError(
        absl::StrCat(path_, " is not a GGUF file: it begins with '", seen, "', not the magic 'GGUF'"));
  }
  ASSIGN_OR_RETURN(uint32_t magic, in.Read<uint32_t>("the magic"));
  (void)magic;
  ASSIGN_OR_RETURN(version_, in.Read<uint32_t>("the version"));
  if ((version_ & 0xFFFF) == 0 && version_ != 0) {
    return absl::UnimplementedError(
        absl::StrCat(path_, ": a big-endian GGUF file (version field ", version_, "); kvtier reads little-endian GGUF"));
  }
  if (version_ != 2 && version_ != 3) {
    return absl::UnimplementedError(
        absl::StrCat(path_, " is GGUF version ", version_, "; kvtier reads versions 2 and 3"));
  }
  ASSIGN_OR_RETURN(uint64_t num_tensors, in.Read<uint64_t>("the tensor count"));
  ASSIGN_OR_RETURN(uint64_t num_metadata, in.Read<uint64_t>("the metadata count"));
  // A metadata entry takes at least 12 bytes (key length, type), a tensor info at least 24.
  if (num_metadata > in.remaining() / 12 || num_tensors > in.remaining() / 24) {
    return absl::DataLossError(absl::StrCat("truncated or corrupt GGUF file ", path_, ": it declares ", num_metadata,
                                            " metadata entries and ", num_tensors, " tensors, more than its remaining ",
                                            in.remaining(), " bytes can hold"));
  }

  for (uint64_t i = 0; i < num_metadata; ++i) {
    ASSIGN_OR_RETURN(std::string key, in.ReadString(absl::StrCat("metadata key ", i)));
    if (key.empty()) return in.Corrupt(absl::StrCat("metadata key ", i, " is empty"));
    ASSIGN_OR_RETURN(uint32_t type, in.Read<uint32_t>(absl::StrCat("the type of '", key, "'")));
    ASSIGN_OR_RETURN(GgufValue value, ReadValue(&in, type, key));
    if (!metadata_index_.emplace(key, metadata_.size()).second) {
      return in.Corrupt(absl::StrCat("metadata key '", key, "' appears twice"));
    }
    metadata_.emplace_back(std::move(key), std::move(value));
  }
  if (const GgufValue* alignment = Find("general.alignment")) {
    const std::optional<int64_t> a = alignment->AsInt();
    if (alignment->type() != GgufValueType::kUint32 || !a.has_value() || *a == 0 || (*a & (*a - 1)) != 0) {
      return in.Corrupt(absl::StrCat("general.alignment is ", alignment->Describe(), ", not a u32 power of two"));
    }
    alignment_ = static_cast<uint32_t>(*a);
  }

  for (uint64_t i = 0; i < num_tensors; ++i) {
    GgufTensorInfo t;
    ASSIGN_OR_RETURN(t.name, in.ReadString(absl::StrCat("the name of tensor ", i)));
    const std::string where = absl::StrCat("tensor '", t.name, "'");
    ASSIGN_OR_RETURN(uint32_t num_dims, in.Read<uint32_t>(absl::StrCat("the dimension count of ", where)));
    if (num_dims > kMaxDims) {
      return in.Corrupt(absl::StrCat(where, " has ", num_dims, " dimensions (at most ", kMaxDims, ")"));
    }
    int64_t elements = 1;
    for (uint32_t d = 0; d < num_dims; ++d) {
      ASSIGN_OR_RETURN(uint64_t dim, in.Read<uint64_t>(absl::StrCat("the dimensions of ", where)));
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (dim > 0 && elements > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(dim))) {
        return in.Corrupt(absl::StrCat(where, " has too many elements (dimension ", d, " is ", dim, ")"));
      }
      t.dims.push_back(static_cast<int64_t>(dim));
      elements *= static_cast<int64_t>(dim);
    }
    ASSIGN_OR_RETURN(uint32_t type, in.Read<uint32_t>(absl::StrCat("the type of ", where)));
    t.type = FindGgmlType(type);
    if (t.type == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(path_, ": ", where, " has tensor type ", type, ", which kvtier does not know"));
    }
    ASSIGN_OR_RETURN(t.offset, in.Read<uint64_t>(absl::StrCat("the offset of ", where)));
    const int64_t row = t.dims.empty() ? 1 : t.dims[0];
    if (row % t.type->block_elements != 0) {
      return in.Corrupt(absl::StrCat(where, " of type ", std::string(t.type->name), " has rows of ", row,
                                     " elements, not a whole number of ", t.type->block_elements, "-element blocks"));
    }
    t.nbytes = static_cast<size_t>(elements / t.type->block_elements) * t.type->block_bytes;
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return in.Corrupt(absl::StrCat("tensor name '", t.name, "' appears twice"));
    }
    tensors_.push_back(std::move(t));
  }

  const uint64_t data_start = AlignUp(in.position(), alignment_);
  const uint64_t data_size = size_ > data_start ? size_ - data_start : 0;
  std::vector<std::pair<uint64_t, size_t>> ranges;  // (offset, tensor index)
  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensorInfo& t = tensors_[i];
    if (t.offset % alignment_ != 0) {
      return in.Corrupt(absl::StrCat("tensor '", t.name, "' starts at offset ", t.offset,
                                     ", not a multiple of the alignment ", alignment_));
    }
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return absl::DataLossError(absl::StrCat("GGUF file ", path_, " is truncated or corrupt: tensor '", t.name,
                                              "' (", t.nbytes, " bytes at data offset ", t.offset,
                                              ") lies past the end of the file (", data_size, " data bytes)"));
    }
    t.data = bytes_ + data_start + t.offset;
    ranges.emplace_back(t.offset, i);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t k = 1; k < ranges.size(); ++k) {
    const GgufTensorInfo& prev = tensors_[ranges[k - 1].second];
    const GgufTensorInfo& next = tensors_[ranges[k].second];
    if (prev.offset + prev.nbytes > next.offset) {
      return in.Corrupt(absl::StrCat("tensors '", prev.name, "' and '", next.name, "' overlap"));
    }
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kvtier
