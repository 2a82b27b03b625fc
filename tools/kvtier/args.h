// Args: a small `--flag value` / `--flag=value` parser for the CLI subcommands, with
// repeatable flags, booleans and byte sizes. Unknown flags are errors. Not thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_ARGS_H_
#define KVTIER_TOOLS_KVTIER_ARGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::cli {

class Args {
 public:
  // value_flags take a value; bool_flags take none. Parses argv[1..argc).
  static absl::StatusOr<Args> Parse(int argc, char** argv, const std::set<std::string>& value_flags,
                                    const std::set<std::string>& bool_flags);

  bool Has(const std::string& flag) const { return values_.count(flag) > 0; }
  // Last value given for the flag.
  std::optional<std::string> Get(const std::string& flag) const;
  std::vector<std::string> GetAll(const std::string& flag) const;
  std::string GetOr(const std::string& flag, const std::string& fallback) const;
  absl::StatusOr<int64_t> GetInt(const std::string& flag, int64_t fallback) const;
  absl::StatusOr<double> GetDouble(const std::string& flag, double fallback) const;
  // Accepts plain bytes or KiB/MiB/GiB/KB/MB/GB suffixes.
  absl::StatusOr<int64_t> GetBytes(const std::string& flag, int64_t fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_ARGS_H_
