// Where the CLI finds the demo model that ships with kvtier, so `--model demo` works without
// a path: $KVTIER_DEMO_MODEL, then the source tree's models/demo (a binary run from its build
// tree), then the installed copy (this build's install prefix, then /usr, where package
// kvtier-demo-model puts it).
#ifndef KVTIER_TOOLS_KVTIER_DEMO_MODEL_PATH_H_
#define KVTIER_TOOLS_KVTIER_DEMO_MODEL_PATH_H_

#include <string>
#include <vector>

namespace kvtier::cli {

// The directories searched for the demo model, in order.
std::vector<std::string> DemoModelSearchPath();

// The first directory of DemoModelSearchPath() that holds a config.json, or "" when none does.
std::string FindDemoModel();

// Replaces the value of `--model demo` (or `--model=demo`) in argv with the demo model's
// directory. Returns "" when done or not asked for, else a message naming the directories
// searched. The replacement strings live in *storage.
std::string ResolveDemoModelFlag(int argc, char** argv, std::vector<std::string>* storage);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_DEMO_MODEL_PATH_H_
