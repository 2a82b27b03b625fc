// Test helper: writes a small random-weight checkpoint into a per-process temp directory
// once per (preset, seed) and returns its path. Not thread-safe (call from test bodies).
#ifndef KVTIER_TESTS_TESTING_TEST_MODEL_H_
#define KVTIER_TESTS_TESTING_TEST_MODEL_H_

#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/random_checkpoint.h"

namespace kvtier::testing {

inline std::string TestTempDir() {
  static const std::string dir = [] {
    std::string base = std::filesystem::temp_directory_path() / ("kvtier-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(base);
    return base;
  }();
  return dir;
}

// Path of a checkpoint for the spec; `key` must identify the spec uniquely.
inline std::string WriteTestModel(const std::string& key, const RandomCheckpointSpec& spec) {
  static std::map<std::string, std::string> written;
  auto it = written.find(key);
  if (it != written.end()) return it->second;
  std::string dir = TestTempDir() + "/" + key;
  absl::Status s = WriteRandomCheckpoint(spec, dir);
  EXPECT_TRUE(s.ok()) << s;
  written[key] = dir;
  return dir;
}

inline std::string TinyLlamaDir(uint64_t seed = 7) {
  auto spec = RandomCheckpointPreset("tiny-llama");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->seed = seed;
  return WriteTestModel("tiny-llama-" + std::to_string(seed), *spec);
}

inline std::shared_ptr<const Checkpoint> OpenCheckpoint(const std::string& dir) {
  auto checkpoint = Checkpoint::Open(dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return std::shared_ptr<const Checkpoint>(std::move(*checkpoint));
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_TEST_MODEL_H_
