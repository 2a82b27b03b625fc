// Fuzzes the safetensors reader and the sharded-checkpoint index.
// First byte even: the rest is a whole .safetensors file, opened with SafetensorsFile::Open.
// First byte odd: the rest is model.safetensors.index.json of an otherwise valid sharded
// tiny checkpoint (written once per process), opened with Checkpoint::Open.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz_util.h"
#include "model/checkpoint.h"
#include "model/random_checkpoint.h"
#include "model/safetensors.h"

namespace {

const std::string& ShardedModelDir() {
  static const std::string dir = [] {
    std::string d = kvtier::fuzz::TempDir() + "/sharded";
    auto spec = kvtier::RandomCheckpointPreset("tiny-llama");
    if (!spec.ok()) std::abort();
    spec->max_shard_bytes = 64 << 10;  // several shards and an index
    spec->num_threads = 1;
    if (!kvtier::WriteRandomCheckpoint(*spec, d).ok()) std::abort();
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 1) == 0) {
    const std::string path = kvtier::fuzz::TempDir() + "/input.safetensors";
    kvtier::fuzz::WriteFile(path, data + 1, size - 1);
    auto file = kvtier::SafetensorsFile::Open(path);
    if (file.ok()) {
      // Touch every view the reader hands out: each must lie inside the mapping.
      volatile uint8_t sink = 0;
      for (const auto& t : (*file)->tensors()) {
        (void)(*file)->Find(t.name);
        const size_t n = t.nbytes();
        if (n > 0) {
          sink = sink + t.data[0];
          sink = sink + t.data[n - 1];
        }
      }
      (void)sink;
    }
    return 0;
  }
  const std::string& dir = ShardedModelDir();
  kvtier::fuzz::WriteFile(dir + "/model.safetensors.index.json", data + 1, size - 1);
  auto checkpoint = kvtier::Checkpoint::Open(dir);
  (void)checkpoint;
  return 0;
}
