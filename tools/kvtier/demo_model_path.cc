// The demo model's search path (demo_model_path.h).
#include "demo_model_path.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace kvtier::cli {

std::vector<std::string> DemoModelSearchPath() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("KVTIER_DEMO_MODEL"); env != nullptr && env[0] != '\0') dirs.push_back(env);
  dirs.push_back(KVTIER_SOURCE_DEMO_MODEL_DIR);
  dirs.push_back(KVTIER_INSTALLED_DEMO_MODEL_DIR);
  // The Debian package's place, also for a kvtier built with another install prefix.
  constexpr char kDebianDir[] = "/usr/share/kvtier/models/demo";
  if (dirs.back() != kDebianDir) dirs.push_back(kDebianDir);
  return dirs;
}

std::string FindDemoModel() {
  for (const std::string& dir : DemoModelSearchPath()) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(std::filesystem::path(dir) / "config.json", ec)) return dir;
  }
  return "";
}

std::string ResolveDemoModelFlag(int argc, char** argv, std::vector<std::string>* storage) {
  storage->reserve(static_cast<size_t>(argc));  // the pointers handed out stay valid
  for (int i = 1; i < argc; ++i) {
    const bool separate = std::strcmp(argv[i], "--model") == 0 && i + 1 < argc && std::strcmp(argv[i + 1], "demo") == 0;
    const bool joined = std::strcmp(argv[i], "--model=demo") == 0;
    if (!separate && !joined) continue;
    const std::string dir = FindDemoModel();
    if (dir.empty()) {
      std::string message = "--model demo: the demo model is not installed (package kvtier-demo-model); looked in";
      for (const std::string& d : DemoModelSearchPath()) message += " " + d;
      return message;
    }
    storage->push_back(joined ? "--model=" + dir : dir);
    argv[separate ? i + 1 : i] = storage->back().data();
  }
  return "";
}

}  // namespace kvtier::cli
