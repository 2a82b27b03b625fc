// Helpers for the model tests: a self-deleting temporary directory, raw file crafting (so
// corrupt safetensors can be built byte by byte), and the parameter count of a config's
// tensors. Not thread-safe; test-only.
#ifndef KVTIER_TESTS_MODEL_TEST_UTIL_H_
#define KVTIER_TESTS_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "model/checkpoint.h"

namespace kvtier::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/kvtier_model_test_XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    path_ = made ? made : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A safetensors file: 8-byte little-endian length (the header's, unless overridden), the
// header text verbatim, then the data bytes.
inline std::string SafetensorsBytes(const std::string& header, const std::string& data,
                                    std::optional<uint64_t> length = std::nullopt) {
  uint64_t n = length.value_or(header.size());
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return bytes + header + data;
}

// The elements of every tensor ExpectedTensors lists: what NumParameters must count.
inline int64_t ExpectedTensorParameters(const ModelConfig& c) {
  int64_t sum = 0;
  for (const ExpectedTensor& t : ExpectedTensors(c)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    sum += n;
  }
  return sum;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_MODEL_TEST_UTIL_H_
