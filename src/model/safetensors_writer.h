// Streaming safetensors writer: tensors are produced chunk by chunk (in parallel) and
// pwritten straight to disk, so a 16 GB checkpoint never sits in memory; optional sharding
// into model-0000i-of-0000N.safetensors + model.safetensors.index.json.
// Functions are thread-safe; producers are called concurrently on disjoint chunks.
#ifndef KVTIER_MODEL_SAFETENSORS_WRITER_H_
#define KVTIER_MODEL_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/progress.h"
#include "model/tensor.h"

namespace kvtier {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  // Writes elements [first, first + count) of the tensor, in `dtype` encoding
  // (little-endian), to `out`. Called from several threads at once on disjoint ranges
  // (the GGUF writer asks for the whole tensor at once).
  std::function<void(int64_t first, int64_t count, uint8_t* out)> produce;

  int64_t num_elements() const;
  int64_t nbytes() const { return static_cast<int64_t>(DTypeBytes(dtype, num_elements())); }
};

struct SafetensorsWriteOptions {
  // 0: one model.safetensors. Otherwise tensors are packed in order into shards of at
  // most this many data bytes (a larger tensor gets a shard of its own).
  int64_t max_shard_bytes = 0;
  // 0: std::thread::hardware_concurrency().
  int num_threads = 0;
  // __metadata__; {"format": "pt"} is always written (transformers requires it).
  std::map<std::string, std::string> metadata;
  // Hears the stage "weights" (tensor bytes written, over every shard), from the calling
  // thread; when it asks to stop, the write returns Cancelled (the file being written is
  // removed; shards already complete stay, without an index).
  ProgressFn progress;
};

// Writes one safetensors file at `path` (via path + ".tmp", renamed when complete).
absl::Status WriteSafetensorsFile(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                  const SafetensorsWriteOptions& options);

// The names of the files WriteSafetensorsCheckpoint writes for these tensors and options
// (model.safetensors, or the shards then model.safetensors.index.json).
std::vector<std::string> SafetensorsCheckpointFiles(const std::vector<TensorToWrite>& tensors,
                                                    const SafetensorsWriteOptions& options);

// Writes the tensors into `directory` (which must exist) as model.safetensors, or as
// shards + model.safetensors.index.json when options.max_shard_bytes > 0 and the tensors
// do not fit in one shard. Returns InvalidArgument for duplicate names or a bad shape.
absl::Status WriteSafetensorsCheckpoint(const std::string& directory, const std::vector<TensorToWrite>& tensors,
                                        const SafetensorsWriteOptions& options);

}  // namespace kvtier

#endif  // KVTIER_MODEL_SAFETENSORS_WRITER_H_
