// The GGUF files W7 measures (docs/WORKLOADS.md): each source model written once as F16 and
// as Q8_0 into a cache directory and reused by later runs, so that kvtier and llama.cpp
// read the same bytes. A source is a checkpoint directory or GGUF file, or a random-weight
// preset (kvtier mkmodel's) written straight to GGUF with a byte tokenizer. Files are
// written under a temporary name and renamed when complete: a file present is whole. Not
// thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_W7_FILES_H_
#define KVTIER_TOOLS_KVTIER_BENCH_W7_FILES_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::cli::bench {

// W7's models when --w7-model gives none: the demo model and this preset.
inline constexpr char kW7Preset[] = "llama3.2-1b";
// The GGUF types W7 measures, as `kvtier convert --type` spells them.
inline const std::vector<std::string> kW7Types = {"f16", "q8_0"};

struct W7Source {
  std::string name;    // file names in the cache start with it: NAME-f16.gguf, NAME-q8_0.gguf
  std::string path;    // checkpoint directory or GGUF file; "" for a preset
  std::string preset;  // RandomCheckpointPreset name; "" for a path
};

// The sources: each --w7-model path, or (none given) the demo model and kW7Preset.
// InvalidArgument when the demo model is not found or a path is neither a checkpoint
// directory nor a GGUF file.
absl::StatusOr<std::vector<W7Source>> W7Sources(const std::vector<std::string>& given);

// cache_dir/NAME-TYPE.gguf.
std::string W7GgufPath(const std::string& cache_dir, const W7Source& source, const std::string& type);

// Bytes of the GGUF file of `source` in `type` (an estimate from the parameter count).
absl::StatusOr<int64_t> W7GgufBytes(const W7Source& source, const std::string& type);

// Writes the files of `sources` missing from `cache_dir` (created), saying each on `log`.
absl::Status WriteW7Files(const std::vector<W7Source>& sources, const std::string& cache_dir, FILE* log);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_W7_FILES_H_
