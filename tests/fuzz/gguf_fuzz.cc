// Fuzzes the GGUF reader and everything built on a GGUF file's contents: the input is a
// whole .gguf file, parsed in memory (GgufFile::FromBytes) and, when it parses, read as a
// model config, a tokenizer (then used to encode and decode a line), and a checkpoint
// (Checkpoint::Open on the same bytes written to disk: names, Q/K reordering, shapes,
// fingerprint). Every outcome must be a value or an error, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "model/checkpoint.h"
#include "model/gguf_file.h"
#include "model/gguf_model.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = kvtier::GgufFile::FromBytes(data, size, "input.gguf");
  if (!file.ok()) return 0;
  // Every tensor the reader hands out must lie inside the input.
  volatile uint8_t sink = 0;
  for (const kvtier::GgufTensorInfo& t : (*file)->tensors()) {
    if (t.nbytes > 0) sink = sink + t.data[0] + t.data[t.nbytes - 1];
  }
  (void)sink;
  for (const auto& [key, value] : (*file)->metadata()) (void)value.Describe();
  (void)kvtier::ModelConfigFromGguf(**file);
  (void)kvtier::GenerationConfigFromGguf(**file);
  auto tokenizer = kvtier::tokenizer::Tokenizer::FromGguf(**file);
  if (tokenizer.ok()) {
    auto ids = (*tokenizer)->Encode("Hello <s> wörld\n\t 123 \xEF\xBB\xBF!");
    if (ids.ok()) (void)(*tokenizer)->Decode(*ids);
  }
  const std::string path = kvtier::fuzz::TempDir() + "/input.gguf";
  kvtier::fuzz::WriteFile(path, data, size);
  auto checkpoint = kvtier::Checkpoint::Open(path);
  if (checkpoint.ok()) {
    std::vector<float> values;
    for (const std::string& name : (*checkpoint)->TensorNames()) (void)(*checkpoint)->TensorAsFloat32(name, &values);
  }
  return 0;
}
