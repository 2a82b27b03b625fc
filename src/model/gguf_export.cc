// GGUF export of a model (gguf_export.h).
#include "model/gguf_export.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/block_quants.h"
#include "model/gguf_model.h"

namespace kvtier {
namespace {

// The stored type of one tensor: vectors F32; matrices as asked, or as they come.
DType StoredType(const TensorToWrite& t, const std::optional<DType>& asked) {
  if (t.shape.size() < 2) return DType::kF32;
  const DType type = asked.value_or(t.dtype);
  if (CanQuantizeBlocks(type) && t.shape.back() % DTypeBlockElements(type) != 0) return DType::kF16;
  return type;
}

void Encode(const std::vector<float>& values, DType type, uint8_t* out) {
  switch (type) {
    case DType::kF32:
      std::memcpy(out, values.data(), values.size() * sizeof(float));
      return;
    case DType::kQ8_0:
    case DType::kQ4_K:
      QuantizeBlocks(type, values.data(), static_cast<int64_t>(values.size()), out);
      return;
    default:
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t bits = type == DType::kF16 ? FloatToFp16(values[i]) : FloatToBf16(values[i]);
        out[2 * i] = static_cast<uint8_t>(bits & 0xFF);
        out[2 * i + 1] = static_cast<uint8_t>(bits >> 8);
      }
      return;
  }
}

}  // namespace

uint32_t GgufFileType(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return 1;
    case DType::kQ8_0:
      return 7;
    case DType::kQ4_K:
      return 14;  // LLAMA_FTYPE_MOSTLY_Q4_K_S
    case DType::kBF16:
      return 32;
    default:
      return 0;
  }
}

absl::Status WriteGgufModel(const ModelConfig& config, const std::vector<TensorToWrite>& tensors,
                            const std::string& path, const GgufExportOptions& options) {
  if (options.type.has_value() && *options.type != DType::kF32 && *options.type != DType::kF16 &&
      *options.type != DType::kBF16 && *options.type != DType::kQ8_0 && *options.type != DType::kQ4_K) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF export writes F32, F16, BF16, Q8_0 or Q4_K, not ",
                                                   std::string(DTypeName(*options.type))));
  }
  if (config.architecture == Architecture::kGemma2 || config.architecture == Architecture::kGemma3 ||
      config.architecture == Architecture::kPhi3 || config.moe.num_experts > 0) {
    return absl::UnimplementedError(absl::StrCat("GGUF export of ", std::string(ArchitectureName(config.architecture)),
                                                 " is not supported (llama, mistral, qwen2 and qwen3 are)"));
  }
  std::vector<TensorToWrite> out;
  std::optional<DType> matrix_type;
  if (config.rope_scaling.has_value()) {
    auto factors = std::make_shared<std::vector<float>>(
        Llama3RopeFactors(*config.rope_scaling, config.rope_theta, config.head_dim));
    TensorToWrite t;
    t.name = "rope_freqs.weight";
    t.dtype = DType::kF32;
    t.shape = {static_cast<int64_t>(factors->size())};
    t.produce = [factors](int64_t, int64_t, uint8_t* bytes) {
      std::memcpy(bytes, factors->data(), factors->size() * sizeof(float));
    };
    out.push_back(std::move(t));
  }
  for (const TensorToWrite& source : tensors) {
    const std::optional<std::string> name = GgufTensorName(source.name);
    if (!name.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", source.name, "' has no GGUF name"));
    }
    if (source.dtype != DType::kF32 && source.dtype != DType::kF16 && source.dtype != DType::kBF16) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", source.name, "' comes as ", std::string(DTypeName(source.dtype)), ", not F32/F16/BF16"));
    }
    const DType type = StoredType(source, options.type);
    if (source.shape.size() >= 2 && !matrix_type.has_value()) matrix_type = type;
    const std::optional<int64_t> heads = RopePermutedHeads(config, source.name);
    TensorToWrite t;
    t.name = *name;
    t.dtype = type;
    t.shape = source.shape;
    t.produce = [&source, type, heads](int64_t, int64_t, uint8_t* bytes) {
      const int64_t n = source.num_elements();
      std::vector<uint8_t> raw(static_cast<size_t>(source.nbytes()));
      source.produce(0, n, raw.data());
      TensorView view;
      view.dtype = source.dtype;
      view.shape = source.shape;
      view.data = raw.data();
      std::vector<float> values;
      ToFloat32(view, &values);
      const int64_t rows = source.shape.empty() ? 1 : source.shape[0];
      if (heads.has_value() && rows > 0 && rows % (2 * *heads) == 0) {
        std::vector<float> interleaved(values.size());
        PermuteRopeRows(reinterpret_cast<const uint8_t*>(values.data()), reinterpret_cast<uint8_t*>(interleaved.data()),
                        rows, values.size() / static_cast<size_t>(rows) * sizeof(float), *heads, /*to_gguf=*/true);
        values.swap(interleaved);
      }
      Encode(values, type, bytes);
    };
    out.push_back(std::move(t));
  }
  GgufMetadata metadata = GgufModelMetadata(config, options.name, GgufFileType(matrix_type.value_or(DType::kF32)));
  metadata.insert(metadata.end(), options.extra.begin(), options.extra.end());
  GgufWriteOptions write;
  write.progress = options.progress;
  return WriteGgufFile(path, metadata, out, write);
}

std::vector<TensorToWrite> CheckpointTensorsToWrite(const Checkpoint& checkpoint) {
  std::vector<TensorToWrite> tensors;
  for (ExpectedTensor& expected : ExpectedTensors(checkpoint.config())) {
    absl::StatusOr<TensorView> view = checkpoint.Tensor(expected.name);
    if (!view.ok()) continue;  // Open checked every one is there
    TensorToWrite t;
    t.name = std::move(expected.name);
    t.shape = view->shape;
    if (view->dtype == DType::kF32 || view->dtype == DType::kF16 || view->dtype == DType::kBF16) {
      t.dtype = view->dtype;
      const TensorView v = *view;
      t.produce = [v](int64_t first, int64_t count, uint8_t* out) {
        const size_t size = DTypeSize(v.dtype);
        std::memcpy(out, v.data + static_cast<size_t>(first) * size, static_cast<size_t>(count) * size);
      };
    } else {
      t.dtype = DType::kF32;
      const std::string name = t.name;
      t.produce = [&checkpoint, name](int64_t first, int64_t count, uint8_t* out) {
        std::vector<float> values;
        if (!checkpoint.TensorAsFloat32(name, &values).ok()) values.assign(static_cast<size_t>(first + count), 0.0f);
        std::memcpy(out, values.data() + first, static_cast<size_t>(count) * sizeof(float));
      };
    }
    tensors.push_back(std::move(t));
  }
  return tensors;
}

}  // namespace kvtier
