// Writing a GGUF file (version 3, little-endian, the layout gguf_file.h describes):
// metadata, then the tensor directory, then each tensor's bytes at its aligned offset in
// file order, which is what llama.cpp's loader requires. Tensors are produced one at a
// time, so memory holds one tensor. Functions are thread-compatible.
#ifndef KVTIER_MODEL_GGUF_WRITER_H_
#define KVTIER_MODEL_GGUF_WRITER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/progress.h"
#include "model/gguf_types.h"
#include "model/safetensors_writer.h"

namespace kvtier {

struct GgufWriteOptions {
  uint32_t alignment = 32;  // written as general.alignment when not 32
  // Hears the stage "weights" (tensor bytes written); Cancelled when it asks to stop (the
  // partial file is removed).
  ProgressFn progress;
};

// Writes `path` (via path + ".tmp", renamed when complete). Each tensor's `shape` is
// row-major (written innermost first, as GGUF stores it), its dtype one GGUF has (not
// F8_E4M3), and its `produce` is called once with the whole tensor. InvalidArgument for a
// duplicate key or tensor name, a name of 64 bytes or more (llama.cpp's limit), a dtype
// GGUF lacks, or a row that is not a whole number of blocks; an I/O error naming the path.
absl::Status WriteGgufFile(const std::string& path, const GgufMetadata& metadata,
                           const std::vector<TensorToWrite>& tensors, const GgufWriteOptions& options = {});

}  // namespace kvtier

#endif  // KVTIER_MODEL_GGUF_WRITER_H_
