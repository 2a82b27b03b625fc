// SafetensorsFile: mmap + header validation (safetensors.h). Immutable after Open.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace kvtier {
namespace {

using Json = nlohmann::json;

// The reference implementation refuses headers over 100 MB; so do we, before parsing.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat("corrupt safetensors file ", path, ": ", what));
}

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

absl::StatusOr<Entry> ParseEntry(const std::string& path, const std::string& name, const Json& value,
                                 uint64_t data_size) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!value.is_object()) return Corrupt(path, absl::StrCat(where, " entry is not an object"));
  Entry e;
  e.name = name;
  auto dtype = value.find("dtype");
  auto shape = value.find("shape");
  auto offsets = value.find("data_offsets");
  if (dtype == value.end() || !dtype->is_string()) return Corrupt(path, absl::StrCat(where, " has no string 'dtype'"));
  e.dtype = dtype->get<std::string>();
  if (shape == value.end() || !shape->is_array()) return Corrupt(path, absl::StrCat(where, " has no 'shape' list"));
  for (const Json& d : *shape) {
    if (!d.is_number_unsigned()) {
      return Corrupt(path, absl::StrCat(where, " has a bad shape ", shape->dump()));
    }
    uint64_t dim = d.get<uint64_t>();
    if (dim > (1ull << 40)) return Corrupt(path, absl::StrCat(where, " has an absurd dimension ", dim));
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned()) {
    return Corrupt(path, absl::StrCat(where, " needs 'data_offsets' [begin, end] of non-negative integers"));
  }
  e.begin = (*offsets)[0].get<uint64_t>();
  e.end = (*offsets)[1].get<uint64_t>();
  if (e.begin > e.end) {
    return Corrupt(path, absl::StrCat(where, " has data_offsets begin ", e.begin, " > end ", e.end));
  }
  if (e.end > data_size) {
    return Corrupt(path, absl::StrCat(where, " data_offsets [", e.begin, ", ", e.end, ") run past the ", data_size,
                                      " data bytes of the file"));
  }
  std::optional<size_t> elem = SafetensorsDTypeSize(e.dtype);
  if (elem) {
    // Checked product: a forged shape must not overflow into a "matching" size.
    unsigned __int128 expected = *elem;
    for (int64_t dim : e.shape) {
      expected *= static_cast<uint64_t>(dim);
      if (expected > (static_cast<unsigned __int128>(1) << 64)) break;
    }
    if (expected != e.end - e.begin) {
      return Corrupt(path, absl::StrCat(where, " holds ", e.end - e.begin, " bytes but shape ", ShapeString(e.shape),
                                        " x ", e.dtype, " needs ", static_cast<uint64_t>(expected)));
    }
  }
  return e;
}

}  // namespace

std::optional<size_t> SafetensorsDTypeSize(std::string_view dtype) {
  static const std::pair<std::string_view, size_t> kSizes[] = {
      {"F64", 8},     {"F32", 4},     {"F16", 2},      {"BF16", 2},        {"I64", 8},
      {"U64", 8},     {"I32", 4},     {"U32", 4},      {"I16", 2},         {"U16", 2},
      {"I8", 1},      {"U8", 1},      {"BOOL", 1},     {"F8_E4M3", 1},     {"F8_E5M2", 1},
  };
  for (const auto& [name, size] : kSizes) {
    if (name == dtype) return size;
  }
  return std::nullopt;
}

std::optional<DType> ParseDType(std::string_view dtype) {
  const std::optional<DType> parsed = DTypeFromName(dtype);
  if (!parsed.has_value() || IsBlockQuantized(*parsed)) return std::nullopt;  // GGUF's alone
  return parsed;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat("safetensors file ", path, " not found"));
    return absl::PermissionDeniedError(absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return Corrupt(path, absl::StrCat("file is ", size, " bytes, too short for the 8-byte header length"));
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (mapping == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("cannot mmap ", path, ": ", std::strerror(map_err)));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = mapping;
  file->size_ = size;
  const uint8_t* bytes = static_cast<const uint8_t*>(mapping);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes) {
    return Corrupt(path, absl::StrCat("header length ", header_len, " is absurd (limit ", kMaxHeaderBytes, ")"));
  }
  if (header_len > size - 8) {
    return Corrupt(path, absl::StrCat("header length ", header_len, " runs past the end of the file (", size,
                                      " bytes)"));
  }
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  Json json = Json::parse(header, header + header_len, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return Corrupt(path, "header is not valid JSON");
  if (!json.is_object()) return Corrupt(path, "header is not a JSON object");

  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<Entry> entries;
  try {
    for (auto it = json.begin(); it != json.end(); ++it) {
      if (it.key() == "__metadata__") {
        if (!it->is_object()) return Corrupt(path, "__metadata__ is not an object");
        for (auto m = it->begin(); m != it->end(); ++m) {
          if (m->is_string()) file->metadata_[m.key()] = m->get<std::string>();
        }
        continue;
      }
      absl::StatusOr<Entry> entry = ParseEntry(path, it.key(), *it, data_size);
      if (!entry.ok()) return entry.status();
      entries.push_back(std::move(*entry));
    }
  } catch (const std::exception& e) {
    return Corrupt(path, e.what());
  }

  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) {
    if (e.end > e.begin) by_offset.push_back(&e);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      return Corrupt(path, absl::StrCat("tensors '", by_offset[i - 1]->name, "' [", by_offset[i - 1]->begin, ", ",
                                        by_offset[i - 1]->end, ") and '", by_offset[i]->name, "' [",
                                        by_offset[i]->begin, ", ", by_offset[i]->end, ") overlap"));
    }
  }

  for (Entry& e : entries) {
    std::optional<DType> dtype = ParseDType(e.dtype);
    if (!dtype) {
      file->unsupported_.push_back({std::move(e.name), std::move(e.dtype), std::move(e.shape)});
      continue;
    }
    TensorView view;
    view.name = std::move(e.name);
    view.dtype = *dtype;
    view.shape = std::move(e.shape);
    view.data = data + e.begin;
    file->tensors_.push_back(std::move(view));
  }
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    size_ = std::exchange(other.size_, 0);
    tensors_ = std::move(other.tensors_);
    unsupported_ = std::move(other.unsupported_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { Unmap(); }

void SafetensorsFile::Unmap() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
  mapping_ = nullptr;
  size_ = 0;
}

const TensorView* SafetensorsFile::Find(const std::string& name) const {
  for (const TensorView& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const SafetensorsFile::UnsupportedTensor* SafetensorsFile::FindUnsupported(const std::string& name) const {
  for (const UnsupportedTensor& t : unsupported_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace kvtier
