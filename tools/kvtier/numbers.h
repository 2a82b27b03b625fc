// Strict parsing of the numbers the CLI takes on its command line: decimal integers, finite
// reals and byte sizes, each checked against a range. Anything else (hex, exponents in an
// integer, trailing characters, overflow) is refused with a message that states the
// accepted range, in the form every command prints: "<text> is out of range [min, max]".
// Pure functions; thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_NUMBERS_H_
#define KVTIER_TOOLS_KVTIER_NUMBERS_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::cli {

// [-]digits only. InvalidArgument "'x' is not an integer" or "<text> is out of range [min, max]"
// (also for numbers beyond int64).
absl::StatusOr<int64_t> ParseInteger(absl::string_view text, int64_t min, int64_t max);

// A finite decimal real ("0.7", "1e-3"). The range is [min, max], or (min, max] when
// min_exclusive.
absl::StatusOr<double> ParseReal(absl::string_view text, double min, double max, bool min_exclusive = false);

// Digits with an optional fraction, then an optional unit: KiB MiB GiB TiB or K M G T
// (binary), KB MB GB TB (decimal), B. The result rounds to whole bytes; computed without
// floating-point overflow, so "9999999999TiB" is out of range, never a wrapped value.
absl::StatusOr<int64_t> ParseBytes(absl::string_view text, int64_t min, int64_t max);

// A comma-separated list of token ids, each in [0, 2^31-1]; spaces around items are
// ignored; empty items are refused.
absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view text);

// "[min, max]" / "(min, max]" as the messages print ranges.
std::string RangeText(int64_t min, int64_t max);
std::string RangeText(double min, double max, bool min_exclusive = false);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_NUMBERS_H_
