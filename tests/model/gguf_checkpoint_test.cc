// Tests of GGUF files as checkpoints: a checkpoint exported to GGUF and opened again has the
// same config and the same tensors under the same names (F32 bit for bit; Q/K rows back
// in HF order), the file holds llama.cpp's names and row order, other export types stay
// within their rounding, and what kvtier cannot run is refused naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/gguf_export.h"
#include "model/gguf_file.h"
#include "model/gguf_model.h"
#include "model/random_checkpoint.h"
#include "test_util.h"

namespace kvtier {
namespace {

using ::kvtier::testing::ReadBytes;
using ::kvtier::testing::TempDir;
using ::kvtier::testing::WriteBytes;
using ::testing::HasSubstr;

struct Case {
  std::string name;
  RandomCheckpointSpec spec;
};

std::vector<Case> Cases() {
  RandomCheckpointSpec base;
  base.num_threads = 2;
  std::vector<Case> cases;
  cases.push_back({"llama", base});
  RandomCheckpointSpec bias = base;
  bias.attention_bias = true;
  bias.tie_embeddings = true;
  cases.push_back({"llama-bias-tied", bias});
  RandomCheckpointSpec llama3 = base;
  llama3.rope_scaling = Llama3RopeScaling{8.0, 1.0, 4.0, 8192};
  llama3.rope_theta = 500000.0;
  cases.push_back({"llama3-scaling", llama3});
  RandomCheckpointSpec mistral = base;
  mistral.arch = Architecture::kMistral;
  mistral.kv_heads = 1;
  cases.push_back({"mistral", mistral});
  RandomCheckpointSpec qwen2 = base;
  qwen2.arch = Architecture::kQwen2;
  qwen2.tie_embeddings = true;
  cases.push_back({"qwen2", qwen2});
  RandomCheckpointSpec qwen3 = base;
  qwen3.arch = Architecture::kQwen3;
  qwen3.head_dim = 32;  // heads * head_dim != hidden
  cases.push_back({"qwen3", qwen3});
  return cases;
}

std::unique_ptr<Checkpoint> MustOpenGguf(const std::string& path) {
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  return ckpt.ok() ? std::move(*ckpt) : nullptr;
}

// The checkpoint of `spec` written as safetensors, then exported to `gguf` as `type`.
std::unique_ptr<Checkpoint> Export(const RandomCheckpointSpec& spec, const TempDir& dir, const std::string& gguf,
                                   std::optional<DType> type = std::nullopt) {
  EXPECT_TRUE(WriteRandomCheckpoint(spec, dir / "st").ok());
  auto source = MustOpenGguf(dir / "st");
  if (source == nullptr) return nullptr;
  GgufExportOptions options;
  options.type = type;
  options.name = "test";
  const absl::Status written = WriteGgufModel(source->config(), CheckpointTensorsToWrite(*source), gguf, options);
  EXPECT_TRUE(written.ok()) << written;
  return source;
}

TEST(GgufCheckpointTest, F32ExportOpensAsTheSameCheckpoint) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    auto source = Export(c.spec, dir, dir / "m.gguf");
    ASSERT_NE(source, nullptr);
    auto gguf = MustOpenGguf(dir / "m.gguf");
    ASSERT_NE(gguf, nullptr);
    ASSERT_NE(gguf->gguf(), nullptr);
    EXPECT_EQ(source->gguf(), nullptr);
    ModelConfig want = source->config();
    if (want.architecture == Architecture::kMistral) want.architecture = Architecture::kLlama;  // GGUF's "llama"
    want.bos_token_id.reset();  // no tokenizer in this file
    want.eos_token_ids.clear();
    EXPECT_EQ(ModelConfigToJson(gguf->config()), ModelConfigToJson(want));
    EXPECT_EQ(gguf->TensorNames(), source->TensorNames());
    for (const std::string& name : source->TensorNames()) {
      std::vector<float> a, b;
      ASSERT_TRUE(source->TensorAsFloat32(name, &a).ok());
      ASSERT_TRUE(gguf->TensorAsFloat32(name, &b).ok());
      EXPECT_EQ(gguf->Tensor(name)->shape, source->Tensor(name)->shape) << name;
      ASSERT_EQ(a, b) << name;
    }
  }
}

TEST(GgufCheckpointTest, FileHoldsLlamaCppNamesAndInterleavedQkRows) {
  TempDir dir;
  RandomCheckpointSpec spec;
  spec.num_threads = 2;
  auto source = Export(spec, dir, dir / "m.gguf");
  auto file = GgufFile::Open(dir / "m.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->Find("general.architecture")->AsString(), "llama");
  EXPECT_EQ((*file)->Find("llama.attention.head_count_kv")->AsInt(), spec.kv_heads);
  const ModelConfig& c = source->config();
  for (const auto& [hf, gguf_name, heads] :
       {std::tuple<std::string, std::string, int64_t>{"model.layers.1.self_attn.q_proj.weight", "blk.1.attn_q.weight", c.num_heads},
        {"model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight", c.num_kv_heads}}) {
    const GgufTensorInfo* t = (*file)->FindTensor(gguf_name);
    ASSERT_NE(t, nullptr) << gguf_name;
    std::vector<float> hf_values;
    ASSERT_TRUE(source->TensorAsFloat32(hf, &hf_values).ok());
    // llama.cpp's converter: reshape(heads, 2, half, cols).swapaxes(1, 2): file row
    // (h, i, s) is HF row (h, s, i).
    const int64_t cols = c.hidden_size, per_head = c.head_dim, half = per_head / 2;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        for (int64_t s = 0; s < 2; ++s) {
          const float* file_row = reinterpret_cast<const float*>(t->data) + (h * per_head + 2 * i + s) * cols;
          const float* hf_row = hf_values.data() + (h * per_head + s * half + i) * cols;
          ASSERT_EQ(std::memcmp(file_row, hf_row, cols * sizeof(float)), 0) << gguf_name << " " << h << " " << i;
        }
      }
    }
  }
  EXPECT_NE((*file)->FindTensor("output.weight"), nullptr);
  EXPECT_NE((*file)->FindTensor("blk.0.ffn_gate.weight"), nullptr);
  EXPECT_EQ((*file)->FindTensor("rope_freqs.weight"), nullptr);
}

TEST(GgufCheckpointTest, Llama3ScalingIsStoredAsRopeFactors) {
  TempDir dir;
  RandomCheckpointSpec spec;
  spec.num_threads = 2;
  spec.rope_scaling = Llama3RopeScaling{32.0, 1.0, 4.0, 8192};
  spec.rope_theta = 500000.0;
  spec.head_dim = 64;
  spec.heads = 2;
  spec.kv_heads = 1;
  Export(spec, dir, dir / "m.gguf");
  auto file = GgufFile::Open(dir / "m.gguf");
  ASSERT_TRUE(file.ok());
  const GgufTensorInfo* factors = (*file)->FindTensor("rope_freqs.weight");
  ASSERT_NE(factors, nullptr);
  EXPECT_EQ(factors->Shape(), (std::vector<int64_t>{32}));
  const float* f = reinterpret_cast<const float*>(factors->data);
  EXPECT_EQ(f[0], 1.0f);    // the highest frequency is not scaled
  EXPECT_EQ(f[31], 32.0f);  // the lowest by the factor
  auto gguf = MustOpenGguf(dir / "m.gguf");
  ASSERT_NE(gguf, nullptr);
  ASSERT_TRUE(gguf->config().rope_scaling.has_value());
  EXPECT_EQ(gguf->config().rope_scaling->factor, 32.0);
  EXPECT_EQ(gguf->config().rope_scaling->original_max_position_embeddings, 8192);
}

TEST(GgufCheckpointTest, OtherExportTypesStayWithinTheirRounding) {
  for (const auto& [type, tolerance] :
       {std::pair<DType, double>{DType::kF16, 1e-3}, {DType::kBF16, 8e-3}, {DType::kQ8_0, 1.5e-2}}) {
    SCOPED_TRACE(DTypeName(type));
    TempDir dir;
    RandomCheckpointSpec spec;
    spec.num_threads = 2;
    auto source = Export(spec, dir, dir / "m.gguf", type);
    auto gguf = MustOpenGguf(dir / "m.gguf");
    ASSERT_NE(gguf, nullptr);
    EXPECT_EQ(gguf->Tensor("model.layers.0.mlp.up_proj.weight")->dtype, type);
    EXPECT_EQ(gguf->Tensor("model.layers.0.input_layernorm.weight")->dtype, DType::kF32);  // vectors stay F32
    for (const std::string& name : source->TensorNames()) {
      std::vector<float> a, b;
      ASSERT_TRUE(source->TensorAsFloat32(name, &a).ok());
      ASSERT_TRUE(gguf->TensorAsFloat32(name, &b).ok());
      double amax = 0, err = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        amax = std::max(amax, std::fabs(double{a[i]}));
        err = std::max(err, std::fabs(double{a[i]} - b[i]));
      }
      EXPECT_LE(err, tolerance * amax) << name;
    }
  }
}

// Rewrites the file with one metadata key changed (nullopt: removed).
void EditKey(const std::string& path, const std::string& key, std::optional<GgufValue> value) {
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  GgufMetadata metadata;
  for (const auto& [k, v] : (*file)->metadata()) {
    if (k != key) metadata.emplace_back(k, v);
  }
  if (value.has_value()) metadata.emplace_back(key, *value);
  std::vector<TensorToWrite> tensors;
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    TensorToWrite w;
    w.name = t.name;
    w.dtype = *t.type->dtype;
    w.shape = t.Shape();
    w.produce = [&t](int64_t, int64_t, uint8_t* out) { std::memcpy(out, t.data, t.nbytes); };
    tensors.push_back(std::move(w));
  }
  ASSERT_TRUE(WriteGgufFile(path + ".edited", metadata, tensors).ok());
  std::filesystem::rename(path + ".edited", path);
}

// Sets the type code of tensor `name` in the file's bytes.
void PatchTensorType(const std::string& path, const std::string& name, uint32_t type) {
  std::string bytes = ReadBytes(path);
  size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  at += name.size();
  uint32_t dims;
  std::memcpy(&dims, bytes.data() + at, 4);
  at += 4 + 8 * dims;
  std::memcpy(bytes.data() + at, &type, 4);
  WriteBytes(path, bytes);
}

void ExpectOpenError(const std::string& path, absl::StatusCode code, const std::vector<std::string>& words) {
  auto ckpt = Checkpoint::Open(path);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), code) << ckpt.status();
  for (const std::string& w : words) EXPECT_THAT(ckpt.status().message(), HasSubstr(w));
}

TEST(GgufCheckpointTest, RefusesWhatItCannotRunNamingIt) {
  TempDir dir;
  RandomCheckpointSpec spec;
  spec.num_threads = 2;
  Export(spec, dir, dir / "good.gguf");
  const std::string good = ReadBytes(dir / "good.gguf");
  const std::string path = dir / "m.gguf";
  auto fresh = [&] { WriteBytes(path, good); };

  fresh();
  EditKey(path, "general.architecture", GgufValue::String("gemma2"));
  ExpectOpenError(path, absl::StatusCode::kUnimplemented, {"gemma2", "llama, qwen2 and qwen3"});
  fresh();
  EditKey(path, "general.architecture", GgufValue::String("qwen3moe"));
  ExpectOpenError(path, absl::StatusCode::kUnimplemented, {"qwen3moe", "mixture of experts", "safetensors"});
  fresh();
  EditKey(path, "llama.expert_count", GgufValue::Uint32(8));  // llama.cpp's Mixtral
  ExpectOpenError(path, absl::StatusCode::kUnimplemented, {"llama.expert_count is 8", "Mixtral", "safetensors"});
  fresh();
  EditKey(path, "llama.block_count", std::nullopt);
  ExpectOpenError(path, absl::StatusCode::kInvalidArgument, {"llama.block_count", "missing"});
  fresh();
  EditKey(path, "llama.embedding_length", GgufValue::String("64"));
  ExpectOpenError(path, absl::StatusCode::kInvalidArgument, {"llama.embedding_length", "not an integer"});
  fresh();
  EditKey(path, "llama.rope.dimension_count", GgufValue::Uint32(8));
  ExpectOpenError(path, absl::StatusCode::kUnimplemented, {"partial rotary"});
  fresh();
  EditKey(path, "llama.rope.scaling.type", GgufValue::String("linear"));
  ExpectOpenError(path, absl::StatusCode::kUnimplemented, {"RoPE scaling", "linear"});
  fresh();
  EditKey(path, "llama.attention.head_count", GgufValue::IntArray(GgufValueType::kUint32, {4, 4}));
  ExpectOpenError(path, absl::StatusCode::kUnimplemented, {"per layer"});

  fresh();
  PatchTensorType(path, "blk.1.attn_v.weight", 6);  // Q5_0: smaller, so still in bounds
  ExpectOpenError(path, absl::StatusCode::kUnimplemented,
                  {"model.layers.1.self_attn.v_proj.weight", "Q5_0", "blk.1.attn_v.weight", "Q4_K"});
  fresh();
  PatchTensorType(path, "blk.0.ffn_up.weight", 77);
  ExpectOpenError(path, absl::StatusCode::kUnimplemented, {"blk.0.ffn_up.weight", "type 77"});
  fresh();
  std::string renamed = good;
  renamed.replace(renamed.find("blk.1.ffn_down.weight"), 21, "blk.1.ffn_dowX.weight");
  WriteBytes(path, renamed);
  ExpectOpenError(path, absl::StatusCode::kNotFound, {"model.layers.1.mlp.down_proj.weight", "missing"});
  WriteBytes(path, good.substr(0, good.size() / 2));
  ExpectOpenError(path, absl::StatusCode::kDataLoss, {"past the end"});
  ExpectOpenError(dir / "absent.gguf", absl::StatusCode::kNotFound, {"absent.gguf"});
}

TEST(GgufModelTest, NamesMapBothWays) {
  for (const ExpectedTensor& t : ExpectedTensors(*RandomCheckpointConfig(RandomCheckpointSpec{}))) {
    const std::optional<std::string> gguf = GgufTensorName(t.name);
    ASSERT_TRUE(gguf.has_value()) << t.name;
    EXPECT_EQ(HfTensorName(*gguf), t.name);
  }
  EXPECT_EQ(GgufTensorName("model.layers.12.self_attn.k_norm.weight"), "blk.12.attn_k_norm.weight");
  EXPECT_EQ(HfTensorName("blk.3.attn_output.bias"), "model.layers.3.self_attn.o_proj.bias");
  EXPECT_EQ(HfTensorName("rope_freqs.weight"), std::nullopt);
  EXPECT_EQ(HfTensorName("blk.x.attn_q.weight"), std::nullopt);
}

TEST(GgufModelTest, RopePermutationInvertsItself) {
  const int64_t rows = 24, cols = 3, heads = 3;
  std::vector<float> in(rows * cols), there(in.size()), back(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  auto bytes = [](std::vector<float>& v) { return reinterpret_cast<uint8_t*>(v.data()); };
  PermuteRopeRows(bytes(in), bytes(there), rows, cols * 4, heads, /*to_gguf=*/true);
  PermuteRopeRows(bytes(there), bytes(back), rows, cols * 4, heads, /*to_gguf=*/false);
  EXPECT_EQ(back, in);
  EXPECT_NE(there, in);
  // Head 1 (rows 8..15): HF rows 8, 12, 9, 13, ... become file rows 8, 9, 10, 11, ...
  EXPECT_EQ(there[9 * cols], in[12 * cols]);
  EXPECT_EQ(there[10 * cols], in[9 * cols]);
}

}  // namespace
}  // namespace kvtier
