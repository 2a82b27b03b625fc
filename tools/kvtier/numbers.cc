// Implementation of the CLI's number parsing (numbers.h).
#include "numbers.h"

#include <charconv>
#include <cmath>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvtier::cli {
namespace {

bool AllDigits(absl::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

absl::Status OutOfRange(absl::string_view text, const std::string& range) {
  return absl::OutOfRangeError(absl::StrCat(text, " is out of range ", range));
}

}  // namespace

std::string RangeText(int64_t min, int64_t max) { return absl::StrCat("[", min, ", ", max, "]"); }

std::string RangeText(double min, double max, bool min_exclusive) {
  return absl::StrCat(min_exclusive ? "(" : "[", min, ", ", max, "]");
}

absl::StatusOr<int64_t> ParseInteger(absl::string_view text, int64_t min, int64_t max) {
  const absl::string_view digits = text.substr(!text.empty() && text[0] == '-' ? 1 : 0);
  if (!AllDigits(digits)) return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not an integer"));
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range || value < min || value > max) {
    return OutOfRange(text, RangeText(min, max));
  }
  if (ec != std::errc() || end != text.data() + text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not an integer"));
  }
  return value;
}

absl::StatusOr<double> ParseReal(absl::string_view text, double min, double max, bool min_exclusive) {
  double value = 0;
  // from_chars takes no leading '+', no spaces, no hex without a 0x prefix it never reads.
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec == std::errc::invalid_argument || end != text.data() + text.size() ||
      std::isnan(value)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a number"));
  }
  const bool below = min_exclusive ? !(value > min) : !(value >= min);
  if (ec == std::errc::result_out_of_range || std::isinf(value) || below || value > max) {
    return OutOfRange(text, RangeText(min, max, min_exclusive));
  }
  return value;
}

absl::StatusOr<int64_t> ParseBytes(absl::string_view text, int64_t min, int64_t max) {
  struct Unit {
    absl::string_view suffix;
    uint64_t scale;
  };
  static constexpr uint64_t kKi = 1024;
  static constexpr Unit kUnits[] = {
      {"KiB", kKi}, {"MiB", kKi * kKi}, {"GiB", kKi * kKi * kKi}, {"TiB", kKi * kKi * kKi * kKi},
      {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000}, {"TB", 1000000000000},
      {"K", kKi}, {"M", kKi * kKi}, {"G", kKi * kKi * kKi}, {"T", kKi * kKi * kKi * kKi}, {"B", 1}};
  absl::string_view number = text;
  uint64_t scale = 1;
  for (const Unit& unit : kUnits) {
    if (number.size() > unit.suffix.size() && absl::EndsWith(number, unit.suffix)) {
      number.remove_suffix(unit.suffix.size());
      scale = unit.scale;
      break;
    }
  }
  const size_t dot = number.find('.');
  const absl::string_view whole = number.substr(0, dot);
  const absl::string_view fraction = dot == absl::string_view::npos ? absl::string_view() : number.substr(dot + 1);
  if (!AllDigits(whole) || (dot != absl::string_view::npos && !AllDigits(fraction))) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a byte size (e.g. 4096, 64MiB, 1.5GiB)"));
  }
  uint64_t whole_value = 0;
  uint64_t bytes = 0;
  const auto [end, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), whole_value);
  if (ec != std::errc() || __builtin_mul_overflow(whole_value, scale, &bytes)) {
    return OutOfRange(text, RangeText(min, max));
  }
  if (!fraction.empty()) {
    // Only the first 19 fraction digits are read: the rest change the count by less than
    // 10^-19 of a TiB, well under one byte.
    const absl::string_view digits = fraction.substr(0, 19);
    uint64_t numerator = 0;
    std::from_chars(digits.data(), digits.data() + digits.size(), numerator);
    const long double part = static_cast<long double>(numerator) / std::pow(10.0L, digits.size()) * scale;
    if (__builtin_add_overflow(bytes, static_cast<uint64_t>(std::llround(part)), &bytes)) {
      return OutOfRange(text, RangeText(min, max));
    }
  }
  if (bytes > static_cast<uint64_t>(INT64_MAX) || static_cast<int64_t>(bytes) < min ||
      static_cast<int64_t>(bytes) > max) {
    return OutOfRange(text, RangeText(min, max));
  }
  return static_cast<int64_t>(bytes);
}

absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view text) {
  std::vector<int32_t> ids;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) return absl::InvalidArgumentError(absl::StrCat("'", text, "' has an empty item"));
    auto id = ParseInteger(item, 0, INT32_MAX);
    if (!id.ok()) return id.status();
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

}  // namespace kvtier::cli
