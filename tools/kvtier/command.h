// Subcommand registry of the kvtier CLI: each cmd_*.cc registers one command at static
// initialisation; main() dispatches on argv[1]. Not thread-safe (startup only).
#ifndef KVTIER_TOOLS_KVTIER_COMMAND_H_
#define KVTIER_TOOLS_KVTIER_COMMAND_H_

#include <map>
#include <string>

namespace kvtier::cli {

// argv[0] is the subcommand name; returns the process exit code.
using CommandFn = int (*)(int argc, char** argv);

struct Command {
  std::string summary;
  CommandFn run = nullptr;
};

std::map<std::string, Command>& Commands();

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* summary, CommandFn run) {
    Commands()[name] = Command{summary, run};
  }
};

}  // namespace kvtier::cli

#define KVTIER_REGISTER_COMMAND(name, summary, fn) \
  static ::kvtier::cli::CommandRegistrar kvtier_registrar_##fn(name, summary, fn)

#endif  // KVTIER_TOOLS_KVTIER_COMMAND_H_
