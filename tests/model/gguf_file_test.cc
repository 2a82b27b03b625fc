// Tests of the GGUF container: the writer's files read back (every metadata type, tensor
// types, alignment; as version 2 too), and bad files refused with an error naming the problem: bad magic,
// unsupported versions, every truncation, tensors out of bounds, misaligned or
// overlapping, unknown types, malformed metadata.
#include "model/gguf_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "model/gguf_writer.h"
#include "test_util.h"

namespace kvtier {
namespace {

using ::kvtier::testing::ReadBytes;
using ::kvtier::testing::TempDir;
using ::kvtier::testing::WriteBytes;
using ::testing::HasSubstr;

TensorToWrite Filled(const std::string& name, DType dtype, std::vector<int64_t> shape, uint8_t byte) {
  TensorToWrite t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  const size_t bytes = DTypeBytes(dtype, t.num_elements());
  t.produce = [bytes, byte](int64_t, int64_t, uint8_t* out) { std::memset(out, byte, bytes); };
  return t;
}

GgufMetadata EveryType() {
  return {
      {"a.u8", GgufValue::Scalar(GgufValueType::kUint8, 200)},
      {"a.i8", GgufValue::Scalar(GgufValueType::kInt8, -100)},
      {"a.u16", GgufValue::Scalar(GgufValueType::kUint16, 60000)},
      {"a.i16", GgufValue::Scalar(GgufValueType::kInt16, -30000)},
      {"a.u32", GgufValue::Uint32(4000000000u)},
      {"a.i32", GgufValue::Int32(-2000000000)},
      {"a.u64", GgufValue::Scalar(GgufValueType::kUint64, int64_t{1} << 40)},
      {"a.i64", GgufValue::Scalar(GgufValueType::kInt64, -(int64_t{1} << 40))},
      {"a.f32", GgufValue::Float32(0.25f)},
      {"a.f64", GgufValue::Real(GgufValueType::kFloat64, 1e300)},
      {"a.bool", GgufValue::Bool(true)},
      {"a.str", GgufValue::String("héllo")},
      {"a.strs", GgufValue::StringArray({"x", "", "yz"})},
      {"a.i32s", GgufValue::IntArray(GgufValueType::kInt32, {1, -2, 3})},
      {"a.f32s", GgufValue::RealArray(GgufValueType::kFloat32, {0.5, -1.5})},
  };
}

// A small valid file: metadata of every type and three tensors.
std::string ValidFile(const TempDir& dir, uint32_t alignment = 32) {
  const std::string path = dir / "valid.gguf";
  GgufWriteOptions options;
  options.alignment = alignment;
  std::vector<TensorToWrite> tensors;
  tensors.push_back(Filled("w", DType::kF32, {3, 5}, 0x11));
  tensors.push_back(Filled("q", DType::kQ8_0, {2, 64}, 0x22));
  tensors.push_back(Filled("b", DType::kBF16, {7}, 0x33));
  EXPECT_TRUE(WriteGgufFile(path, EveryType(), tensors, options).ok());
  return path;
}

TEST(GgufFileTest, WrittenFileReadsBack) {
  TempDir dir;
  for (uint32_t alignment : {32u, 64u, 8u}) {
    auto file = GgufFile::Open(ValidFile(dir, alignment));
    ASSERT_TRUE(file.ok()) << file.status();
    const GgufFile& f = **file;
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.Find("a.u8")->AsInt(), 200);
    EXPECT_EQ(f.Find("a.i8")->AsInt(), -100);
    EXPECT_EQ(f.Find("a.u16")->AsInt(), 60000);
    EXPECT_EQ(f.Find("a.i16")->AsInt(), -30000);
    EXPECT_EQ(f.Find("a.u32")->AsInt(), 4000000000LL);
    EXPECT_EQ(f.Find("a.i32")->AsInt(), -2000000000);
    EXPECT_EQ(f.Find("a.u64")->AsInt(), int64_t{1} << 40);
    EXPECT_EQ(f.Find("a.i64")->AsInt(), -(int64_t{1} << 40));
    EXPECT_EQ(f.Find("a.f32")->AsReal(), 0.25);
    EXPECT_EQ(f.Find("a.f64")->AsReal(), 1e300);
    EXPECT_EQ(f.Find("a.bool")->AsBool(), true);
    EXPECT_EQ(*f.Find("a.str")->AsString(), "héllo");
    EXPECT_EQ(f.Find("a.strs")->strings(), (std::vector<std::string>{"x", "", "yz"}));
    EXPECT_EQ(f.Find("a.i32s")->ints(), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(f.Find("a.f32s")->reals(), (std::vector<double>{0.5, -1.5}));
    EXPECT_EQ(f.Find("a.i32s")->element_type(), GgufValueType::kInt32);
    EXPECT_EQ(f.Find("nope"), nullptr);
    ASSERT_EQ(f.tensors().size(), 3u);
    const GgufTensorInfo* w = f.FindTensor("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->dims, (std::vector<int64_t>{5, 3}));  // innermost first
    EXPECT_EQ(w->Shape(), (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(w->type->name, "F32");
    EXPECT_EQ(w->nbytes, 60u);
    EXPECT_EQ(w->data[0], 0x11);
    EXPECT_EQ(w->data[59], 0x11);
    const GgufTensorInfo* q = f.FindTensor("q");
    EXPECT_EQ(q->type->dtype, DType::kQ8_0);
    EXPECT_EQ(q->nbytes, 4u * 34u);
    EXPECT_EQ(q->data[0], 0x22);
    const GgufTensorInfo* b = f.FindTensor("b");
    EXPECT_EQ(b->nbytes, 14u);
    for (const GgufTensorInfo& t : f.tensors()) {
      EXPECT_EQ(t.offset % alignment, 0u) << t.name;
      EXPECT_EQ((t.data - f.tensors()[0].data) % alignment, 0) << t.name;
    }
  }
}

// Version 2 differs from 3 only in what 3 allows (big-endian files, which kvtier refuses):
// the same bytes with version 2 read the same.
TEST(GgufFileTest, Version2ReadsAsVersion3) {
  TempDir dir;
  const std::string v3 = ValidFile(dir, 64);
  std::string bytes = ReadBytes(v3);
  ASSERT_GT(bytes.size(), 8u);
  bytes[4] = 2;
  const std::string v2 = dir / "v2.gguf";
  WriteBytes(v2, bytes);
  auto a = GgufFile::Open(v3);
  auto b = GgufFile::Open(v2);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ((*b)->version(), 2u);
  EXPECT_EQ((*b)->alignment(), 64u);
  ASSERT_EQ((*b)->metadata().size(), (*a)->metadata().size());
  for (size_t i = 0; i < (*a)->metadata().size(); ++i) {
    EXPECT_EQ((*b)->metadata()[i].first, (*a)->metadata()[i].first);
    EXPECT_EQ((*b)->metadata()[i].second.Describe(), (*a)->metadata()[i].second.Describe());
  }
  ASSERT_EQ((*b)->tensors().size(), (*a)->tensors().size());
  for (size_t i = 0; i < (*a)->tensors().size(); ++i) {
    const GgufTensorInfo& x = (*a)->tensors()[i];
    const GgufTensorInfo& y = (*b)->tensors()[i];
    EXPECT_EQ(y.name, x.name);
    EXPECT_EQ(y.dims, x.dims);
    EXPECT_EQ(y.type, x.type);
    ASSERT_EQ(y.nbytes, x.nbytes);
    EXPECT_EQ(std::memcmp(y.data, x.data, x.nbytes), 0) << x.name;
  }
}

TEST(GgufFileTest, WriterRefusesWhatGgufCannotHold) {
  TempDir dir;
  EXPECT_EQ(WriteGgufFile(dir / "x.gguf", {}, {Filled("w", DType::kF8E4M3, {4}, 0)}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteGgufFile(dir / "x.gguf", {}, {Filled("w", DType::kQ8_0, {2, 33}, 0)}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteGgufFile(dir / "x.gguf", {}, {Filled(std::string(64, 'n'), DType::kF32, {1}, 0)}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteGgufFile(dir / "x.gguf", {}, {Filled("w", DType::kF32, {1}, 0), Filled("w", DType::kF32, {1}, 0)}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteGgufFile(dir / "x.gguf", {{"k", GgufValue::Bool(true)}, {"k", GgufValue::Bool(false)}}, {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf"));
}

TEST(GgufFileTest, EveryTruncationIsDataLossNamingTheFile) {
  TempDir dir;
  const std::string bytes = ReadBytes(ValidFile(dir));
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  auto whole = GgufFile::FromBytes(data, bytes.size(), "whole");
  ASSERT_TRUE(whole.ok()) << whole.status();
  size_t end = 0;  // the last tensor byte; the padding after it may go
  for (const GgufTensorInfo& t : (*whole)->tensors()) end = std::max(end, static_cast<size_t>(t.data - data) + t.nbytes);
  ASSERT_LT(end, bytes.size());
  for (size_t n = 0; n < end; ++n) {
    auto file = GgufFile::FromBytes(data, n, "cut.gguf");
    ASSERT_FALSE(file.ok()) << n;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << n << " " << file.status();
    EXPECT_THAT(file.status().message(), HasSubstr("cut.gguf")) << n;
  }
  EXPECT_TRUE(GgufFile::FromBytes(data, end, "unpadded").ok());
}

TEST(GgufFileTest, TruncatedTensorSaysItLiesPastTheEnd) {
  TempDir dir;
  std::string bytes = ReadBytes(ValidFile(dir));
  bytes.resize(bytes.size() - 40);
  auto file = GgufFile::FromBytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "short.gguf");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(file.status().message(), HasSubstr("tensor 'b'"));
  EXPECT_THAT(file.status().message(), HasSubstr("past the end"));
}

// Bytes of a GGUF header by hand: each test breaks one thing.
class Header {
 public:
  Header& U32(uint32_t v) { return Put(&v, 4); }
  Header& U64(uint64_t v) { return Put(&v, 8); }
  Header& Str(const std::string& s) {
    U64(s.size());
    bytes_ += s;
    return *this;
  }
  Header& Raw(const std::string& s) {
    bytes_ += s;
    return *this;
  }
  // A tensor info: name, dims innermost first, type code, offset.
  Header& Tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) U64(d);
    return U32(type).U64(offset);
  }
  Header& PadTo(size_t alignment) {
    bytes_.append((alignment - bytes_.size() % alignment) % alignment, '\0');
    return *this;
  }
  absl::Status Open() const {
    return GgufFile::FromBytes(reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size(), "h.gguf").status();
  }

 private:
  Header& Put(const void* p, size_t n) {
    bytes_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string bytes_;
};

Header Start(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
  Header h;
  h.Raw("GGUF").U32(version).U64(tensors).U64(kvs);
  return h;
}

void ExpectError(const absl::Status& status, absl::StatusCode code, const std::string& words) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(status.message(), HasSubstr(words));
}

TEST(GgufFileTest, BadMagicAndVersions) {
  ExpectError(Header().Raw("GGML").U32(3).U64(0).U64(0).Open(), absl::StatusCode::kDataLoss, "not a GGUF file");
  ExpectError(Header().Raw("GG").Open(), absl::StatusCode::kDataLoss, "not a GGUF file");
  ExpectError(Start(0, 0, 1).Open(), absl::StatusCode::kUnimplemented, "version 1");
  ExpectError(Start(0, 0, 4).Open(), absl::StatusCode::kUnimplemented, "version 4");
  ExpectError(Start(0, 0, 0x03000000).Open(), absl::StatusCode::kUnimplemented, "big-endian");
  EXPECT_TRUE(Start(0, 0, 2).Open().ok());
  EXPECT_TRUE(Start(0, 0, 3).Open().ok());
}

TEST(GgufFileTest, MalformedMetadata) {
  ExpectError(Start(0, 1).Str("k").U32(13).Open(), absl::StatusCode::kDataLoss, "type 13");
  ExpectError(Start(0, 1).Str("k").U32(9).U32(9).U64(1).Open(), absl::StatusCode::kDataLoss, "array of arrays");
  ExpectError(Start(0, 1).Str("k").U32(9).U32(4).U64(uint64_t{1} << 60).Open(), absl::StatusCode::kDataLoss,
              "elements");
  ExpectError(Start(0, 1).Str("").U32(4).U32(1).Open(), absl::StatusCode::kDataLoss, "empty");
  ExpectError(Start(0, 2).Str("k").U32(4).U32(1).Str("k").U32(4).U32(2).Open(), absl::StatusCode::kDataLoss,
              "appears twice");
  ExpectError(Start(0, 1).Str("k").U32(7).Raw("\x02").Open(), absl::StatusCode::kDataLoss, "bool");
  ExpectError(Start(0, 1).Str("general.alignment").U32(4).U32(48).Open(), absl::StatusCode::kDataLoss,
              "power of two");
  ExpectError(Start(0, 1).Str("general.alignment").U32(10).U64(64).Open(), absl::StatusCode::kDataLoss,
              "general.alignment");
  ExpectError(Start(uint64_t{1} << 50, 0).Open(), absl::StatusCode::kDataLoss, "1125899906842624 tensors");
  ExpectError(Start(0, uint64_t{1} << 50).Open(), absl::StatusCode::kDataLoss, "1125899906842624 metadata entries");
  ExpectError(Start(0, 1).Str("k").U32(8).U64(1000).Raw("abc").Open(), absl::StatusCode::kDataLoss, "truncated");
}

TEST(GgufFileTest, BadTensorInfos) {
  // One F32 tensor of 8 elements (32 bytes) at offset 0, with the data section present.
  auto one = [](std::vector<uint64_t> dims, uint32_t type, uint64_t offset, size_t data_bytes) {
    Header h = Start(1, 0).Tensor("t", std::move(dims), type, offset).PadTo(32);
    return h.Raw(std::string(data_bytes, '\0')).Open();
  };
  EXPECT_TRUE(one({8}, 0, 0, 32).ok());
  ExpectError(one({8}, 0, 0, 31), absl::StatusCode::kDataLoss, "past the end");
  ExpectError(one({8}, 0, 32, 63), absl::StatusCode::kDataLoss, "past the end");
  ExpectError(one({8}, 0, 16, 64), absl::StatusCode::kDataLoss, "not a multiple of the alignment");
  ExpectError(one({8}, 0, uint64_t{1} << 63, 32), absl::StatusCode::kDataLoss, "past the end");
  ExpectError(one({8}, 99, 0, 32), absl::StatusCode::kUnimplemented, "type 99");
  ExpectError(one({8}, 4, 0, 32), absl::StatusCode::kUnimplemented, "type 4");  // removed from ggml
  ExpectError(one({33}, 8, 0, 64), absl::StatusCode::kDataLoss, "not a whole number of 32-element blocks");
  ExpectError(one({1, 1, 1, 1, 1}, 0, 0, 32), absl::StatusCode::kDataLoss, "5 dimensions");
  ExpectError(one({uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0, 32), absl::StatusCode::kDataLoss, "too many elements");
  Header dup = Start(2, 0).Tensor("t", {8}, 0, 0).Tensor("t", {8}, 0, 32).PadTo(32).Raw(std::string(64, '\0'));
  ExpectError(dup.Open(), absl::StatusCode::kDataLoss, "appears twice");
  Header overlap = Start(2, 0).Tensor("a", {16}, 0, 0).Tensor("b", {8}, 0, 32).PadTo(32).Raw(std::string(96, '\0'));
  ExpectError(overlap.Open(), absl::StatusCode::kDataLoss, "overlap");
}

TEST(GgufFileTest, MissingFileIsNotFound) {
  TempDir dir;
  EXPECT_EQ(GgufFile::Open(dir / "absent.gguf").status().code(), absl::StatusCode::kNotFound);
  WriteBytes(dir / "empty.gguf", "");
  ExpectError(GgufFile::Open(dir / "empty.gguf").status(), absl::StatusCode::kDataLoss, "not a GGUF file");
}

}  // namespace
}  // namespace kvtier
