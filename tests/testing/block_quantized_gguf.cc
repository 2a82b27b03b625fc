// WriteBlockQuantizedGguf (block_quantized_gguf.h).
#include "testing/block_quantized_gguf.h"

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "model/gguf_model.h"
#include "model/gguf_writer.h"

namespace kvtier::testing {
namespace {

constexpr DType kCycle[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

void PutHalf(float value, uint8_t* at) {
  const uint16_t bits = FloatToFp16(value);
  at[0] = static_cast<uint8_t>(bits & 0xFF);
  at[1] = static_cast<uint8_t>(bits >> 8);
}

// Overwrites the scale fields of one random block (block_quants.h lays them out) so that its
// values stay near +-0.02..0.1; the K types' mins about cancel their mean.
void SetScales(DType type, uint8_t* block) {
  switch (type) {
    case DType::kQ8_0:  // d * q, q in [-128, 127]
      PutHalf(3e-4f, block);
      break;
    case DType::kQ4_0:  // d * (q - 8)
      PutHalf(4e-3f, block);
      break;
    case DType::kQ4_K:  // d * s * q - dmin * m, s and m 6 bits, q 4 bits
      PutHalf(1e-4f, block);
      PutHalf(7.5e-4f, block + 2);
      break;
    case DType::kQ5_K:  // q 5 bits
      PutHalf(5e-5f, block);
      PutHalf(7.75e-4f, block + 2);
      break;
    case DType::kQ6_K:  // d * scale * (q - 32), scale int8
      PutHalf(1.5e-5f, block + 208);
      break;
    default:
      break;
  }
}

// The type of matrix number `index` whose rows hold `cols` values.
DType MatrixType(size_t index, int64_t cols) {
  const DType type = kCycle[index % std::size(kCycle)];
  if (cols % DTypeBlockElements(type) == 0) return type;
  if (cols % 32 == 0) return index % 2 == 0 ? DType::kQ8_0 : DType::kQ4_0;
  return DType::kF16;
}

uint64_t NameSeed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

absl::Status WriteBlockQuantizedGguf(const RandomCheckpointSpec& spec, const std::string& path) {
  absl::StatusOr<ModelConfig> config = RandomCheckpointConfig(spec);
  if (!config.ok()) return config.status();
  std::vector<TensorToWrite> tensors;
  if (config->rope_scaling.has_value()) {
    const std::vector<float> factors = Llama3RopeFactors(*config->rope_scaling, config->rope_theta, config->head_dim);
    TensorToWrite t;
    t.name = "rope_freqs.weight";
    t.shape = {static_cast<int64_t>(factors.size())};
    t.produce = [factors](int64_t, int64_t, uint8_t* out) {
      std::memcpy(out, factors.data(), factors.size() * sizeof(float));
    };
    tensors.push_back(std::move(t));
  }
  size_t matrices = 0;
  for (const ExpectedTensor& expected : ExpectedTensors(*config)) {
    const std::optional<std::string> name = GgufTensorName(expected.name);
    if (!name.has_value()) return absl::InternalError(absl::StrCat(expected.name, " has no GGUF name"));
    TensorToWrite t;
    t.name = *name;
    t.shape = expected.shape;
    const uint64_t seed = spec.seed;
    const std::string hf_name = expected.name;
    const std::vector<int64_t> shape = expected.shape;
    if (shape.size() < 2) {
      t.dtype = DType::kF32;
      t.produce = [seed, hf_name, shape](int64_t, int64_t, uint8_t* out) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        for (int64_t i = 0; i < n; ++i) {
          const float v = RandomWeight(seed, hf_name, shape, i);
          std::memcpy(out + i * 4, &v, 4);
        }
      };
    } else {
      t.dtype = MatrixType(matrices++, shape.back());
      const DType type = t.dtype;
      const size_t bytes = static_cast<size_t>(t.nbytes());
      t.produce = [seed, hf_name, shape, type, bytes](int64_t, int64_t, uint8_t* out) {
        if (type == DType::kF16) {
          for (size_t i = 0; i < bytes / 2; ++i) {
            PutHalf(RandomWeight(seed, hf_name, shape, static_cast<int64_t>(i)), out + 2 * i);
          }
          return;
        }
        std::mt19937_64 rng(NameSeed(seed, hf_name));
        for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(rng());
        const size_t block = DTypeBlockBytes(type);
        for (size_t at = 0; at < bytes; at += block) SetScales(type, out + at);
      };
    }
    tensors.push_back(std::move(t));
  }
  GgufMetadata metadata = GgufModelMetadata(*config, "block-quantized", /*LLAMA_FTYPE_MOSTLY_Q4_K_M=*/15);
  return WriteGgufFile(path, metadata, tensors);
}

}  // namespace kvtier::testing
