// Writing a model as a GGUF file that llama.cpp loads: HF-named tensors renamed to
// llama.cpp's names, the Q/K rows of `llama` models interleaved as llama.cpp's converter
// interleaves them, Llama 3 RoPE scaling stored as rope_freqs.weight, the matrices stored
// in the type asked for (vectors stay F32, as llama.cpp keeps them), the hyperparameters
// as metadata, plus metadata the caller adds (the tokenizer's). Functions are
// thread-compatible.
#ifndef KVTIER_MODEL_GGUF_EXPORT_H_
#define KVTIER_MODEL_GGUF_EXPORT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/progress.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/gguf_writer.h"
#include "model/safetensors_writer.h"

namespace kvtier {

struct GgufExportOptions {
  // The type of the matrices: F32, F16, BF16, Q8_0 or Q4_K (a matrix whose rows are not
  // whole blocks falls back to F16, as llama.cpp's converter does for Q8_0). nullopt: each tensor
  // keeps the type it comes in.
  std::optional<DType> type;
  std::string name;     // general.name
  GgufMetadata extra;   // appended after the model's own metadata (tokenizer.*, ...)
  ProgressFn progress;  // the stage "weights", as WriteGgufFile reports it
};

// Writes `tensors` (named as ExpectedTensors names them, in F32, F16 or BF16; every one
// the config needs) as a GGUF file at `path`. InvalidArgument naming a tensor ExpectedTensors
// does not know, or a type GGUF export does not write; errors of WriteGgufFile.
absl::Status WriteGgufModel(const ModelConfig& config, const std::vector<TensorToWrite>& tensors,
                            const std::string& path, const GgufExportOptions& options);

// The tensors of `checkpoint` its config needs, ready for WriteGgufModel: F32/F16/BF16 as
// stored, any other dtype (F8_E4M3 with its scales, GGUF blocks) as its F32 values. The
// checkpoint must outlive them.
std::vector<TensorToWrite> CheckpointTensorsToWrite(const Checkpoint& checkpoint);

// llama.cpp's LLAMA_FTYPE for a file whose matrices are `dtype` (general.file_type).
uint32_t GgufFileType(DType dtype);

}  // namespace kvtier

#endif  // KVTIER_MODEL_GGUF_EXPORT_H_
