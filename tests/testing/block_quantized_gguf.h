// A random model as a GGUF file whose matrices are blocks of every block type kvtier reads
// (Q8_0, Q4_0, Q4_K, Q5_K and Q6_K in turn, as downloaded files mix them), for tests of
// backends on block-quantized weights. kvtier writes no such file itself (it quantizes only
// to Q8_0); llama.cpp's quantizer is not at hand in every test, and the backends need valid
// blocks, not llama.cpp's choice of them. Test-only; thread-compatible.
#ifndef KVTIER_TESTS_TESTING_BLOCK_QUANTIZED_GGUF_H_
#define KVTIER_TESTS_TESTING_BLOCK_QUANTIZED_GGUF_H_

#include <string>

#include "absl/status/status.h"
#include "model/random_checkpoint.h"

namespace kvtier::testing {

// Writes the model `spec` describes to `path`: the matrices' blocks random (seeded by
// spec.seed and the tensor's name) with scales that give weights of magnitude ~0.02, each
// matrix of the next type in the cycle above whose block its rows hold (256 values for the
// K types, else Q8_0/Q4_0, else F16); norms and biases F32 as RandomWeight gives them. No
// tokenizer. Errors of RandomCheckpointConfig and WriteGgufFile.
absl::Status WriteBlockQuantizedGguf(const RandomCheckpointSpec& spec, const std::string& path);

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_BLOCK_QUANTIZED_GGUF_H_
