// Implementation of CommandLine (command_line.h).
#include "command_line.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "numbers.h"

namespace kvtier::cli {

CommandLine::CommandLine(std::string command, std::string description)
    : command_(std::move(command)), app_(std::move(description) + "\n", "kvtier " + command_) {
  app_.set_help_flag("-h,--help", "print this help and exit");
  // Leftovers are reported by Parse in this file's own words (unknown option / unexpected
  // argument) rather than as CLI11's ExtrasError.
  app_.allow_extras(true);
  app_.get_formatter()->column_width(30);
  app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::Throw);
}

Normalizer CommandLine::IntNormalizer(int64_t min, int64_t max) {
  return [min, max](absl::string_view text) -> absl::StatusOr<std::string> {
    auto value = ParseInteger(text, min, max);
    if (!value.ok()) return value.status();
    return absl::StrCat(*value);
  };
}

Normalizer CommandLine::RealNormalizer(double min, double max, bool min_exclusive) {
  return [min, max, min_exclusive](absl::string_view text) -> absl::StatusOr<std::string> {
    auto value = ParseReal(text, min, max, min_exclusive);
    if (!value.ok()) return value.status();
    return std::string(text);
  };
}

Normalizer CommandLine::BytesNormalizer(int64_t min, int64_t max) {
  return [min, max](absl::string_view text) -> absl::StatusOr<std::string> {
    auto value = ParseBytes(text, min, max);
    if (!value.ok()) return value.status();
    return absl::StrCat(*value);
  };
}

CLI::Option* CommandLine::Normalized(CLI::Option* option, Normalizer normalize) {
  CLI::Validator validator(
      [normalize = std::move(normalize)](std::string& text) -> std::string {
        auto normalized = normalize(text);
        if (!normalized.ok()) return std::string(normalized.status().message());
        text = *normalized;
        return "";
      },
      "", "");
  return option->transform(validator);
}

CLI::Option* CommandLine::Repeatable(CLI::Option* option) {
  // One value per occurrence: "--flag a b" leaves b as a stray argument.
  return option->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

CLI::Option* CommandLine::AddBytes(const std::string& flag, int64_t* value, int64_t min, int64_t max,
                                   const std::string& help) {
  return Checked(app_.add_option(flag, *value, help), BytesNormalizer(min, max), "SIZE");
}

CLI::Option* CommandLine::AddString(const std::string& flag, std::string* value, const std::string& help,
                                    const std::string& type_name) {
  return app_.add_option(flag, *value, help)->type_name(type_name);
}

CLI::Option* CommandLine::AddStrings(const std::string& flag, std::vector<std::string>* values,
                                     const std::string& help, const std::string& type_name) {
  return Repeatable(app_.add_option(flag, *values, help)->type_name(type_name));
}

CLI::Option* CommandLine::AddChoice(const std::string& flag, std::string* value,
                                    const std::vector<std::string>& choices, const std::string& help) {
  const std::string list = absl::StrJoin(choices, "|");
  Normalizer one_of = [choices, list](absl::string_view text) -> absl::StatusOr<std::string> {
    for (const std::string& choice : choices) {
      if (text == choice) return choice;
    }
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not one of ", list));
  };
  return Checked(app_.add_option(flag, *value, help), std::move(one_of), list);
}

CLI::Option* CommandLine::AddSwitch(const std::string& flag, bool* value, const std::string& help) {
  switches_.insert(flag);
  return app_.add_flag(flag, *value, help);
}

CLI::Option* CommandLine::AddCustom(const std::string& flag, const std::string& type_name, const std::string& help,
                                    Normalizer normalize, std::function<void(const std::string&)> store) {
  CLI::Option* option = app_.add_option_function<std::string>(flag, std::move(store), help);
  return Checked(option, std::move(normalize), type_name);
}

std::optional<int> CommandLine::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    const size_t eq = arg.find('=');
    if (absl::StartsWith(arg, "--") && eq != absl::string_view::npos && switches_.count(std::string(arg.substr(0, eq)))) {
      return UsageError(absl::StrCat(arg.substr(0, eq), " takes no value"));
    }
  }
  try {
    app_.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app_.help().c_str(), stdout);
    return kExitOk;
  } catch (const CLI::ParseError& error) {
    return UsageError(Translate(error));
  }
  bool after_dashes = false;
  for (const std::string& arg : app_.remaining()) {
    if (arg == "--" && !after_dashes) {
      after_dashes = true;
      continue;
    }
    if (!after_dashes && arg.size() > 1 && arg[0] == '-') {
      return UsageError(absl::StrCat("unknown option ", arg.substr(0, arg.find('='))));
    }
    return UsageError(absl::StrCat("unexpected argument '", arg, "'"));
  }
  return std::nullopt;
}

std::string CommandLine::Translate(const CLI::ParseError& error) const {
  const std::string what = error.what();
  if (error.get_name() == "ArgumentMismatch") {
    // CLI11: "--flag: At Most 1 required but received 2" or "--flag: 1 required N missing".
    const std::string flag = what.substr(0, what.find(':'));
    if (const CLI::Option* option = app_.get_option_no_throw(flag); option != nullptr) {
      if (option->count() > 1) return absl::StrCat(flag, ": given more than once");
      return absl::StrCat(flag, ": needs a value (", option->get_type_name(), ")");
    }
  }
  return what;
}

int CommandLine::Fail(int status, absl::string_view message) const {
  std::fprintf(stderr, "kvtier %s: %.*s\n", command_.c_str(), static_cast<int>(message.size()), message.data());
  return status;
}

int CommandLine::UsageError(absl::string_view message) const {
  Fail(kExitUsage, message);
  std::fprintf(stderr, "Try 'kvtier %s --help'.\n", command_.c_str());
  return kExitUsage;
}

}  // namespace kvtier::cli
