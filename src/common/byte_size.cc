// Implementation of ParseByteSize and FormatByteSize (byte_size.h).
#include "common/byte_size.h"

#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvtier {

absl::StatusOr<int64_t> ParseByteSize(const std::string& text) {
  static const std::pair<const char*, double> kSuffixes[] = {
      {"KiB", 1024.0}, {"MiB", 1024.0 * 1024}, {"GiB", 1024.0 * 1024 * 1024},
      {"TiB", 1024.0 * 1024 * 1024 * 1024}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"K", 1024.0}, {"M", 1024.0 * 1024}, {"G", 1024.0 * 1024 * 1024}, {"B", 1.0}};
  std::string number = text;
  double scale = 1.0;
  for (const auto& [suffix, factor] : kSuffixes) {
    std::string s = suffix;
    if (number.size() > s.size() && number.compare(number.size() - s.size(), s.size(), s) == 0) {
      number = number.substr(0, number.size() - s.size());
      scale = factor;
      break;
    }
  }
  double value = 0;
  if (!absl::SimpleAtod(number, &value) || !std::isfinite(value) || value < 0 ||
      value * scale > 9.0e18) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a byte size (e.g. 512MiB)"));
  }
  return static_cast<int64_t>(std::llround(value * scale));
}

std::string FormatByteSize(int64_t bytes) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (unit + 1 < 6 && value >= 1024.0) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " bytes");
  char number[32];
  std::snprintf(number, sizeof number, "%.1f", value);
  return absl::StrCat(number, " ", kUnits[unit], " (", bytes, " bytes)");
}

}  // namespace kvtier
