// What the parity tests share: the goldens (tests/parity/goldens.json, written by
// scripts/make_goldens.py on the GPU machine), the kvtier CLI given on the command line,
// and the golden checkpoints rewritten with its mkmodel. Not thread-safe.
#ifndef KVTIER_TESTS_PARITY_PARITY_GOLDENS_H_
#define KVTIER_TESTS_PARITY_PARITY_GOLDENS_H_

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/test_model.h"

namespace kvtier::parity {

// argv[1] of the test binary: the kvtier CLI that writes the checkpoints.
inline std::string& KvtierCli() {
  static std::string cli;
  return cli;
}

inline const nlohmann::json& Goldens() {
  static const nlohmann::json goldens = [] {
    std::ifstream in(std::string(KVTIER_SOURCE_DIR) + "/tests/parity/goldens.json");
    return in ? nlohmann::json::parse(in) : nlohmann::json();
  }();
  return goldens;
}

// The golden checkpoint `name`, written once per process with our mkmodel.
inline std::string WriteModel(const std::string& name, const std::vector<std::string>& args) {
  std::string dir = testing::TestTempDir() + "/parity-" + name;
  if (std::ifstream(dir + "/config.json")) return dir;
  std::string command = "'" + KvtierCli() + "' mkmodel --force --out '" + dir + "'";
  for (const auto& a : args) command += " '" + a + "'";
  EXPECT_EQ(std::system((command + " > /dev/null").c_str()), 0) << command;
  return dir;
}

// The goldens of model `name` and its checkpoint (written once, opened). Fatal test
// failures when either is missing: callers use ASSERT_NO_FATAL_FAILURE.
inline void OpenGoldenModel(const std::string& name, const nlohmann::json** model,
                            std::shared_ptr<const Checkpoint>* checkpoint) {
  const nlohmann::json& goldens = Goldens();
  ASSERT_FALSE(goldens.is_null()) << "tests/parity/goldens.json is missing: run scripts/make_goldens.py";
  *model = &goldens["models"][name];
  *checkpoint = testing::OpenCheckpoint(WriteModel(name, (**model)["mkmodel_args"].get<std::vector<std::string>>()));
  ASSERT_NE(*checkpoint, nullptr);
}

inline const std::vector<std::string>& GoldenModelNames() {
  static const std::vector<std::string> names = {"llama-gqa-rope3", "mistral-sharded-bf16", "qwen2-bias-tied",
                                                 "qwen3-qknorm", "llama-fp16"};
  return names;
}

}  // namespace kvtier::parity

#endif  // KVTIER_TESTS_PARITY_PARITY_GOLDENS_H_
