// A fresh directory under $TMPDIR (or /tmp) removed with its files at scope exit. Test-only.
#ifndef KVTIER_TESTS_STORAGE_TEMP_DIR_H_
#define KVTIER_TESTS_STORAGE_TEMP_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace kvtier::testing {

class StorageTempDir {
 public:
  StorageTempDir() {
    const char* env = std::getenv("TMPDIR");
    std::string pattern = std::string(env != nullptr && *env != '\0' ? env : "/tmp") +
                          "/kvtier_storage_XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
    EXPECT_FALSE(path_.empty()) << "mkdtemp failed";
  }
  ~StorageTempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  StorageTempDir(const StorageTempDir&) = delete;
  StorageTempDir& operator=(const StorageTempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_STORAGE_TEMP_DIR_H_
