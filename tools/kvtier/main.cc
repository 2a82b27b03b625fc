// kvtier CLI entry point: dispatches to the registered subcommands (see command.h).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli_log.h"
#include "command.h"
#include "demo_model_path.h"
#include "kvtier/kvtier.h"

namespace kvtier::cli {

std::map<std::string, Command>& Commands() {
  static auto* commands = new std::map<std::string, Command>();
  return *commands;
}

namespace {

void PrintUsage(FILE* out) {
  std::fprintf(out, "kvtier %s — LLM generation with a three-tier KV cache\n\n", KVT_VERSION_STRING);
  std::fprintf(out, "usage: kvtier <command> [flags]\n\ncommands:\n");
  for (const auto& [name, command] : Commands()) {
    std::fprintf(out, "  %-12s %s\n", name.c_str(), command.summary.c_str());
  }
  std::fprintf(out,
               "\n'kvtier <command> --help' (or -h) describes a command's flags.\n\n"
               "exit status:\n"
               "  0    success\n"
               "  1    the command failed (the reason on standard error)\n"
               "  2    usage error: unknown option, stray argument, missing or bad value\n"
               "  130  interrupted by SIGINT (143: SIGTERM); the context was freed first\n");
}

}  // namespace
}  // namespace kvtier::cli

int main(int argc, char** argv) {
  using kvtier::cli::Commands;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    kvtier::cli::PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0 || std::strcmp(argv[1], "version") == 0) {
    std::printf("kvtier %s\n", kvt_version_string());
    return 0;
  }
  kvtier::cli::InstallStderrLog();
  auto it = Commands().find(argv[1]);
  if (it == Commands().end()) {
    std::fprintf(stderr, "kvtier: unknown command '%s'\n\n", argv[1]);
    kvtier::cli::PrintUsage(stderr);
    return 2;
  }
  std::vector<std::string> resolved;  // `--model demo` -> the demo model's directory
  if (std::string error = kvtier::cli::ResolveDemoModelFlag(argc, argv, &resolved); !error.empty()) {
    std::fprintf(stderr, "kvtier %s: %s\n", argv[1], error.c_str());
    return 1;
  }
  return it->second.run(argc - 1, argv + 1);
}
