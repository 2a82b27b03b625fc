// The GGUF tests' model files (gguf_models.h).
#include "gguf_models.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "llama_oracle.h"

namespace kvtier::testing {
namespace {

namespace fs = std::filesystem;

// Runs make() once per key; its result ("" = failed) is remembered.
std::string Once(const std::string& key, std::string (*make)(const std::string&, const std::string&),
                 const std::string& a, const std::string& b) {
  static auto* made = new std::map<std::string, std::string>();
  auto it = made->find(key);
  if (it != made->end()) return it->second;
  return (*made)[key] = make(a, b);
}

}  // namespace

std::string& KvtierCli() {
  static auto* path = new std::string();
  return *path;
}

std::string GgufScratch() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / absl::StrCat("kvtier-gguf-test-", getpid());
    fs::create_directories(d);
    return d.string();
  }();
  return dir;
}

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void RemoveGgufScratch() {
  std::error_code ec;
  fs::remove_all(GgufScratch(), ec);
}

bool RunKvtier(const std::string& args) {
  const std::string log = GgufScratch() + "/kvtier.log";
  const std::string command = absl::StrCat("\"", KvtierCli(), "\" ", args, " > \"", log, "\" 2>&1");
  if (std::system(command.c_str()) == 0) return true;
  std::cerr << "failed: " << command << "\n" << ReadFileText(log);
  return false;
}

std::string RandomCheckpoint(const std::string& preset) {
  return Once("dir:" + preset, [](const std::string& p, const std::string&) -> std::string {
    const std::string dir = absl::StrCat(GgufScratch(), "/", p);
    if (!RunKvtier(absl::StrCat("mkmodel --preset ", p, " --vocab 512 --tokenizer bytes --seed 11 --out ", dir))) return "";
    return dir;
  }, preset, "");
}

std::string MkmodelGguf(const std::string& preset) {
  return Once("mkmodel:" + preset, [](const std::string& p, const std::string&) -> std::string {
    const std::string out = absl::StrCat(GgufScratch(), "/", p, "-mkmodel.gguf");
    if (!RunKvtier(absl::StrCat("mkmodel --format gguf --dtype fp32 --preset ", p,
                                " --vocab 512 --tokenizer bytes --seed 11 --out ", out))) {
      return "";
    }
    return out;
  }, preset, "");
}

std::string RandomGguf(const std::string& preset, const std::string& type) {
  return Once(absl::StrCat("gguf:", preset, ":", type), [](const std::string& p, const std::string& t) -> std::string {
    const std::string dir = RandomCheckpoint(p);
    const std::string out = absl::StrCat(GgufScratch(), "/", p, "-", t, ".gguf");
    if (dir.empty() || !RunKvtier(absl::StrCat("convert --model ", dir, " --to gguf --type ", t, " --out ", out))) return "";
    return out;
  }, preset, type);
}

std::string DemoGguf(const std::string& type) {
  return Once("demo:" + type, [](const std::string& t, const std::string&) -> std::string {
    const std::string out = absl::StrCat(GgufScratch(), "/demo-", t, ".gguf");
    static const std::map<std::string, int> kLlamaFtypes = {{"q4_0", 2}, {"q4_k_m", 15}, {"q5_k_m", 17}, {"q6_k", 18}};
    if (auto it = kLlamaFtypes.find(t); it != kLlamaFtypes.end()) {
      const std::string f32 = DemoGguf("f32");
      if (f32.empty()) return "";
      const absl::Status quantized = LlamaQuantize(f32, out, it->second);
      if (!quantized.ok()) {
        std::cerr << quantized << "\n";
        return "";
      }
      return out;
    }
    if (!RunKvtier(absl::StrCat("convert --model demo --to gguf --type ", t, " --out ", out))) return "";
    return out;
  }, type, "");
}

}  // namespace kvtier::testing
