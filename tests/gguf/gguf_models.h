// The GGUF files the GGUF tests share, made once per process the way a user makes them:
// `kvtier mkmodel` writes a random checkpoint, `kvtier convert --to gguf` converts it (or
// the demo model), and llama.cpp's quantizer makes the K-quant files. Test-only; not
// thread-safe.
#ifndef KVTIER_TESTS_GGUF_GGUF_MODELS_H_
#define KVTIER_TESTS_GGUF_GGUF_MODELS_H_

#include <string>

namespace kvtier::testing {

// The kvtier CLI binary (the test's argument).
std::string& KvtierCli();
// Runs `kvtier <args>` (output to a log file); false (with the log on stderr) on failure.
bool RunKvtier(const std::string& args);
// The bytes of a file ("" when it cannot be read).
std::string ReadFileText(const std::string& path);

// A per-process scratch directory (RemoveGgufScratch deletes it, at the end of the run).
std::string GgufScratch();
void RemoveGgufScratch();

// A random checkpoint directory of `preset` ("tiny-llama", "tiny-mistral", "tiny-qwen2",
// "tiny-qwen3") with a byte-level tokenizer and a 512-token vocabulary, and its GGUF of
// `type` (as --type spells it). "" on failure.
std::string RandomCheckpoint(const std::string& preset);
std::string RandomGguf(const std::string& preset, const std::string& type);
// The same model (F32, the byte-level tokenizer) written directly by `kvtier mkmodel
// --format gguf`. "" on failure.
std::string MkmodelGguf(const std::string& preset);
// The demo model as GGUF: `type` as kvtier convert's --type spells it, or "q4_0",
// "q4_k_m", "q5_k_m", "q6_k" (llama.cpp's quantizer on the F32 file).
std::string DemoGguf(const std::string& type);

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_GGUF_GGUF_MODELS_H_
