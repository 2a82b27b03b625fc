// CommandLine: one command's flags, on CLI11, with the conventions every kvtier command
// shares. -h/--help prints the usage on stdout (exit 0). Refused with exit status 2 and one
// message form, "kvtier <command>: <what>" on stderr: unknown options, stray arguments,
// missing or repeated values, a value given to a switch, and numbers that are malformed or
// out of range (parsed strictly, numbers.h). Not thread-safe (startup only).
#ifndef KVTIER_TOOLS_KVTIER_COMMAND_LINE_H_
#define KVTIER_TOOLS_KVTIER_COMMAND_LINE_H_

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::cli {

// Exit statuses of every command (kvtier(1), EXIT STATUS). A command ended by SIGINT or
// SIGTERM exits with 128 + the signal number (interrupt.h).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command could not do its work
inline constexpr int kExitUsage = 2;    // the command line is wrong

// Turns a flag's text into the text CLI11 converts (e.g. "64MiB" -> "67108864"), or the
// reason it is refused ("64XB is not a byte size ...").
using Normalizer = std::function<absl::StatusOr<std::string>(absl::string_view)>;

class CommandLine {
 public:
  // `command` is the subcommand ("run"); `description` opens its --help.
  CommandLine(std::string command, std::string description);

  CLI::App& app() { return app_; }
  const std::string& command() const { return command_; }

  // Decimal integers in [min, max], stored into an integer of any width that holds the range.
  template <typename T>
  CLI::Option* AddInt(const std::string& flag, T* value, int64_t min, int64_t max, const std::string& help,
                      const std::string& type_name = "N") {
    return Checked(app_.add_option(flag, *value, help), IntNormalizer(min, max), type_name);
  }
  // Repeatable: every occurrence adds one value.
  template <typename T>
  CLI::Option* AddInts(const std::string& flag, std::vector<T>* values, int64_t min, int64_t max,
                       const std::string& help, const std::string& type_name = "N") {
    return Repeatable(Checked(app_.add_option(flag, *values, help), IntNormalizer(min, max), type_name));
  }
  // Finite reals in [min, max] ((min, max] when min_exclusive).
  template <typename T>
  CLI::Option* AddReal(const std::string& flag, T* value, double min, double max, const std::string& help,
                       bool min_exclusive = false, const std::string& type_name = "X") {
    return Checked(app_.add_option(flag, *value, help), RealNormalizer(min, max, min_exclusive), type_name);
  }
  // Byte sizes ("4096", "64MiB", "1.5GiB") in [min, max] bytes.
  CLI::Option* AddBytes(const std::string& flag, int64_t* value, int64_t min, int64_t max, const std::string& help);
  CLI::Option* AddString(const std::string& flag, std::string* value, const std::string& help,
                         const std::string& type_name);
  CLI::Option* AddStrings(const std::string& flag, std::vector<std::string>* values, const std::string& help,
                          const std::string& type_name);
  // One of `choices`; the help lists them.
  CLI::Option* AddChoice(const std::string& flag, std::string* value, const std::vector<std::string>& choices,
                         const std::string& help);
  // A flag without a value; "--flag=value" is refused.
  CLI::Option* AddSwitch(const std::string& flag, bool* value, const std::string& help);
  // An option whose (normalized) text goes to `store` when given.
  CLI::Option* AddCustom(const std::string& flag, const std::string& type_name, const std::string& help,
                         Normalizer normalize, std::function<void(const std::string&)> store);

  // Parses argv[1..argc) (argv[0] is the command). nullopt: go on. Otherwise the exit status,
  // after printing the help (kExitOk) or the usage error (kExitUsage).
  std::optional<int> Parse(int argc, char** argv);

  // Prints "kvtier <command>: <message>" on stderr and returns `status`.
  int Fail(int status, absl::string_view message) const;
  // The same for a usage error, plus a pointer to --help; returns kExitUsage.
  int UsageError(absl::string_view message) const;

  // Runs `normalize` on each value of `option` before CLI11 converts it; its error, prefixed
  // with the flag, is the usage error.
  static CLI::Option* Normalized(CLI::Option* option, Normalizer normalize);

  static Normalizer IntNormalizer(int64_t min, int64_t max);
  static Normalizer RealNormalizer(double min, double max, bool min_exclusive);
  static Normalizer BytesNormalizer(int64_t min, int64_t max);

 private:
  static CLI::Option* Checked(CLI::Option* option, Normalizer normalize, const std::string& type_name) {
    return Normalized(option, std::move(normalize))->type_name(type_name);
  }
  static CLI::Option* Repeatable(CLI::Option* option);
  std::string Translate(const CLI::ParseError& error) const;

  std::string command_;
  CLI::App app_;
  std::set<std::string> switches_;
};

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_COMMAND_LINE_H_
