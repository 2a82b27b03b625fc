// Implementation of the CLI flag parser (args.h).
#include "args.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"

namespace kvtier::cli {

absl::StatusOr<Args> Args::Parse(int argc, char** argv, const std::set<std::string>& value_flags,
                                 const std::set<std::string>& bool_flags) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      args.positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (bool_flags.count(name)) {
      if (value && *value != "true" && *value != "false" && *value != "1" && *value != "0") {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value (got '", *value, "')"));
      }
      args.values_[name].push_back(value.value_or("true"));
      continue;
    }
    if (!value_flags.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (!value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    args.values_[name].push_back(*value);
  }
  return args;
}

std::optional<std::string> Args::Get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Args::GetAll(const std::string& flag) const {
  auto it = values_.find(flag);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::string Args::GetOr(const std::string& flag, const std::string& fallback) const {
  return Get(flag).value_or(fallback);
}

absl::StatusOr<int64_t> Args::GetInt(const std::string& flag, int64_t fallback) const {
  auto text = Get(flag);
  if (!text) return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", *text, "' is not an integer"));
  }
  return value;
}

absl::StatusOr<double> Args::GetDouble(const std::string& flag, double fallback) const {
  auto text = Get(flag);
  if (!text) return fallback;
  double value = 0;
  if (!absl::SimpleAtod(*text, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", *text, "' is not a number"));
  }
  return value;
}

absl::StatusOr<int64_t> Args::GetBytes(const std::string& flag, int64_t fallback) const {
  auto text = Get(flag);
  if (!text) return fallback;
  auto bytes = kvtier::ParseByteSize(*text);
  if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", bytes.status().message()));
  return bytes;
}

}  // namespace kvtier::cli
