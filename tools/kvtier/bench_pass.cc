// ParseBenchPass, PassJsonPath (bench_pass.h).
#include "bench_pass.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvtier::cli::bench {
namespace {

bool KnownDtype(const std::string& d) { return d == "auto" || d == "bf16" || d == "fp16" || d == "fp8"; }

}  // namespace

absl::StatusOr<BenchPass> ParseBenchPass(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() < 2 || parts[0].empty() || parts[1].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pass '", text, "': expected NAME:WORKLOADS[:weight=DTYPE][:kv=DTYPE][:model=DIR]"));
  }
  BenchPass pass;
  pass.name = parts[0];
  if (!std::all_of(pass.name.begin(), pass.name.end(),
                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; })) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pass '", text, "': the name may hold letters, digits, '-' and '_' only"));
  }
  for (absl::string_view piece : absl::StrSplit(parts[1], ',')) {
    const std::string id(piece);
    const bool ok = id.size() == 2 && id[0] == 'W' && id[1] >= '1' && id[1] <= '9' && id != "W7";
    if (!ok && id != "W6c" && id != "W9a" && id != "W9b") {
      return absl::InvalidArgumentError(absl::StrCat("--pass '", text, "': workload '", id,
                                                     "' cannot run in a further pass (W1..W6, W6c, W8, W9, W9a, W9b)"));
    }
    pass.workloads.push_back(id);
  }
  for (size_t i = 2; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    const std::string key = parts[i].substr(0, eq), value = eq == std::string::npos ? "" : parts[i].substr(eq + 1);
    if ((key == "weight" || key == "kv") && KnownDtype(value)) {
      (key == "weight" ? pass.weight_dtype : pass.kv_dtype) = value;
    } else if (key == "model" && !value.empty()) {
      pass.model_dir = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--pass '", text, "': '", parts[i],
                                                     "' is not weight=auto|bf16|fp16|fp8, kv=... or model=DIR"));
    }
  }
  return pass;
}

std::string PassJsonPath(const std::string& main_json, const std::string& name) {
  if (main_json.empty()) return "";
  const size_t slash = main_json.rfind('/');
  const size_t dot = main_json.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return absl::StrCat(main_json, "-", name);
  return absl::StrCat(main_json.substr(0, dot), "-", name, main_json.substr(dot));
}

}  // namespace kvtier::cli::bench
