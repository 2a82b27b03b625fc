// Implementation of the bench write plan (bench_plan.h).
#include "bench_plan.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "bench_context.h"
#include "bench_tiers.h"
#include "bench_w6c.h"
#include "disk_space.h"
#include "model/gguf_file.h"
#include "model/random_checkpoint.h"
#include "progress_bar.h"

namespace kvtier::cli::bench {
namespace {

namespace fs = std::filesystem;

constexpr char kModelPreset[] = "llama3-8b";
constexpr char kSmallModelPreset[] = "small-llama";

// Bytes of the checkpoint `preset` writes (weights; the JSON files and headers are noise).
absl::StatusOr<int64_t> CheckpointBytes(const std::string& preset) {
  absl::StatusOr<RandomCheckpointSpec> spec = RandomCheckpointPreset(preset);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<ModelConfig> config = RandomCheckpointConfig(*spec);
  if (!config.ok()) return config.status();
  return config->NumParameters() * static_cast<int64_t>(DTypeSize(spec->dtype)) + (int64_t{1} << 20);
}

// Whether `dir` (under --make-model) must be written: false when it already holds every file
// of the preset's checkpoint, true when it is missing or empty. FailedPrecondition otherwise:
// bench writes only into an empty directory and deletes nothing.
absl::StatusOr<bool> NeedsWriting(const std::string& preset, const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec) || (fs::is_directory(dir, ec) && fs::is_empty(dir, ec))) return true;
  absl::StatusOr<RandomCheckpointSpec> spec = RandomCheckpointPreset(preset);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::vector<std::string>> files = RandomCheckpointFiles(*spec);
  if (!files.ok()) return files.status();
  for (const std::string& name : *files) {
    if (!fs::is_regular_file(fs::path(dir) / name, ec)) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, " is not empty and holds no complete ", preset, " checkpoint (", name,
          " is missing); bench writes a checkpoint only into an empty directory: remove it or pass another "
          "--make-model DIR"));
    }
  }
  return false;
}

bool Has(const BenchPlanInput& input, const char* id) { return input.workloads.count(id) > 0; }

// A checkpoint given on the command line, a directory or a GGUF file: checked now rather
// than when its workload comes, possibly after a long run.
absl::Status CheckGiven(const char* flag, const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(fs::path(path) / "config.json", ec)) return absl::OkStatus();
  if (fs::is_regular_file(path, ec)) {
    absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Open(path);
    if (gguf.ok()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(flag, ": ", gguf.status().message()));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(flag, ": ", path, " is neither a checkpoint directory (it holds no config.json) nor a GGUF file"));
}

}  // namespace

absl::StatusOr<BenchPlan> PlanBench(const BenchPlanInput& input) {
  BenchPlan plan;
  const bool context_create = std::any_of(input.workloads.begin(), input.workloads.end(),
                                          [](const std::string& id) { return ContextCreateHostGib(id).has_value(); });
  // C<N> runs W7's model on the cpu backend.
  const bool small_context_create = context_create && input.backend == "cpu";
  const bool needs_model = std::any_of(input.workloads.begin(), input.workloads.end(), [&](const std::string& id) {
    return id != "W7" && !(small_context_create && ContextCreateHostGib(id).has_value());
  });
  if (needs_model) {
    if (!input.model.empty()) {
      if (absl::Status s = CheckGiven("--model", input.model); !s.ok()) return s;
      plan.model_dir = input.model;
    } else if (!input.make_model_dir.empty()) {
      plan.model_dir = (fs::path(input.make_model_dir) / kModelPreset).string();
      absl::StatusOr<bool> write = NeedsWriting(kModelPreset, plan.model_dir);
      if (!write.ok()) return write.status();
      plan.write_model = *write;
    } else {
      return absl::InvalidArgumentError(
          "W1-W6 need --model DIR (a Llama-3-8B-shape checkpoint) or --make-model DIR (writes a random one, "
          "about 15 GiB, into DIR/llama3-8b)");
    }
  }
  if (Has(input, "W7")) {
    plan.w7_cache_dir = !input.w7_cache.empty()           ? input.w7_cache
                        : !input.make_model_dir.empty() ? (fs::path(input.make_model_dir) / "w7").string()
                                                        : "";
    if (plan.w7_cache_dir.empty()) {
      return absl::InvalidArgumentError("W7 needs --w7-cache DIR or --make-model DIR (for its GGUF files)");
    }
    absl::StatusOr<std::vector<W7Source>> sources = W7Sources(input.w7_models);
    if (!sources.ok()) return sources.status();
    plan.w7_sources = *std::move(sources);
    for (const W7Source& source : plan.w7_sources) {
      for (const std::string& type : kW7Types) {
        const std::string path = W7GgufPath(plan.w7_cache_dir, source, type);
        std::error_code ec;
        if (fs::is_regular_file(path, ec)) continue;
        absl::StatusOr<int64_t> bytes = W7GgufBytes(source, type);
        if (!bytes.ok()) return bytes.status();
        plan.writes.push_back({absl::StrCat("W7 ", source.name, " GGUF ", type), path, *bytes, false});
      }
    }
  }
  if (small_context_create) {
    if (!input.small_model.empty()) {
      if (absl::Status s = CheckGiven("--small-model", input.small_model); !s.ok()) return s;
      plan.small_model_dir = input.small_model;
    } else if (!input.make_model_dir.empty()) {
      plan.small_model_dir = (fs::path(input.make_model_dir) / kSmallModelPreset).string();
      absl::StatusOr<bool> write = NeedsWriting(kSmallModelPreset, plan.small_model_dir);
      if (!write.ok()) return write.status();
      plan.write_small_model = *write;
    } else {
      return absl::InvalidArgumentError("C<N> on the cpu backend needs --small-model DIR or --make-model DIR");
    }
  }
  for (const auto& [write, preset, dir] : {std::tuple{plan.write_model, kModelPreset, plan.model_dir},
                                           std::tuple{plan.write_small_model, kSmallModelPreset, plan.small_model_dir}}) {
    if (!write) continue;
    absl::StatusOr<int64_t> bytes = CheckpointBytes(preset);
    if (!bytes.ok()) return bytes.status();
    plan.writes.push_back({absl::StrCat(preset, " checkpoint"), dir, *bytes, false});
  }
  const bool tiers = Has(input, "W5") || Has(input, "W6") || Has(input, "W6b") || Has(input, "W6c");
  if (tiers && input.tier_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("W5, W6, W6b and W6c need --tier-dir DIR for their disk-tier files (",
                                                   GiB(kW5DiskBytes), " for W5, ", GiB(kW6DiskBytes), " for W6, ",
                                                   GiB(kW6cDiskBytes), " for W6c)"));
  }
  if (Has(input, "W6c")) {
    plan.writes.push_back({"W6c disk tier (deleted after W6c)", (fs::path(input.tier_dir) / kW6cDiskFile).string(),
                           kW6cDiskBytes, true});
  }
  if (context_create && input.tier_dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("C<N> needs --tier-dir DIR for its disk-tier file (", GiB(kContextCreateDiskBytes), ")"));
  }
  if (context_create) {
    plan.writes.push_back({"C<N> disk tier (deleted after each)",
                           (fs::path(input.tier_dir) / kContextCreateDiskFile).string(), kContextCreateDiskBytes,
                           true});
  }
  const std::string w6_file = (fs::path(input.tier_dir) / kW6DiskFile).string();
  if (Has(input, "W5")) {
    plan.writes.push_back({"W5 disk tier (deleted after W5)", (fs::path(input.tier_dir) / kW5DiskFile).string(),
                           kW5DiskBytes, true});
  }
  std::error_code ec;
  if (Has(input, "W6") || (Has(input, "W6b") && !fs::exists(w6_file, ec))) {
    plan.writes.push_back({"W6 disk tier (kept for W6b)", w6_file, kW6DiskBytes, true});
  }
  return plan;
}

absl::Status CheckFreeSpace(const BenchPlan& plan, FILE* log) {
  if (plan.writes.empty()) {
    std::fprintf(log, "bench: writes no checkpoint and no disk tier (only --json, if given)\n");
    return absl::OkStatus();
  }
  struct Need {
    FileSystemSpace space;
    int64_t kept = 0, largest_transient = 0;
  };
  std::map<uint64_t, Need> needs;  // by file system
  std::fprintf(log, "bench: will write:\n");
  for (const PlannedWrite& w : plan.writes) {
    std::fprintf(log, "bench:   %10s  %s: %s\n", GiB(w.bytes).c_str(), w.what.c_str(), w.path.c_str());
    absl::StatusOr<FileSystemSpace> space = SpaceFor(w.path);
    if (!space.ok()) return space.status();
    Need& need = needs[space->device];
    need.space = *space;
    if (w.transient) {
      need.largest_transient = std::max(need.largest_transient, w.bytes);
    } else {
      need.kept += w.bytes;
    }
  }
  for (const auto& [device, need] : needs) {
    const int64_t peak = need.kept + need.largest_transient;
    std::fprintf(log, "bench: file system of %s: %s free, up to %s needed\n", need.space.probed.c_str(),
                 GiB(need.space.free_bytes).c_str(), GiB(peak).c_str());
    if (peak > need.space.free_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "not enough free space on the file system of ", need.space.probed, ": ", GiB(need.space.free_bytes),
          " free, up to ", GiB(peak), " needed (checkpoints + the largest disk-tier file); nothing was written"));
    }
  }
  return absl::OkStatus();
}

absl::Status WritePlannedCheckpoints(const BenchPlan& plan, FILE* log) {
  for (const auto& [write, preset, dir] : {std::tuple{plan.write_model, kModelPreset, plan.model_dir},
                                           std::tuple{plan.write_small_model, kSmallModelPreset, plan.small_model_dir}}) {
    if (!write) continue;
    absl::StatusOr<RandomCheckpointSpec> spec = RandomCheckpointPreset(preset);
    if (!spec.ok()) return spec.status();
    const auto t0 = std::chrono::steady_clock::now();
    std::fprintf(log, "bench: writing a random %s checkpoint to %s ...\n", preset, dir.c_str());
    ProgressBar progress(std::string("bench: writing ") + preset);
    absl::Status written =
        WriteRandomCheckpoint(*spec, dir, [&progress](std::string_view stage, int64_t done, int64_t total) {
          progress.Update(std::string(stage), done, total);
          return true;
        });
    progress.Finish();
    if (!written.ok()) return written;
    std::fprintf(log, "bench: wrote %s in %.1f s\n", dir.c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (plan.w7_sources.empty()) return absl::OkStatus();
  return WriteW7Files(plan.w7_sources, plan.w7_cache_dir, log);
}

}  // namespace kvtier::cli::bench
