// Tests of the safetensors reader and writer: round trip, alignment, and every corrupt-file
// case (crafted byte by byte) reported as DataLoss naming the file and tensor.
#include "model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "model/safetensors_writer.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace kvtier {
namespace {

using ::kvtier::testing::SafetensorsBytes;
using ::kvtier::testing::TempDir;
using ::kvtier::testing::WriteBytes;
using ::testing::HasSubstr;

TensorToWrite Iota(const std::string& name, DType dtype, std::vector<int64_t> shape, float offset) {
  TensorToWrite t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.produce = [dtype, offset](int64_t first, int64_t count, uint8_t* out) {
    for (int64_t i = 0; i < count; ++i) {
      const float v = offset + static_cast<float>(first + i);
      if (dtype == DType::kF32) {
        std::memcpy(out + 4 * i, &v, 4);
      } else {
        uint16_t b = dtype == DType::kBF16 ? FloatToBf16(v) : FloatToFp16(v);
        std::memcpy(out + 2 * i, &b, 2);
      }
    }
  };
  return t;
}

TEST(SafetensorsTest, WriteThenReadRoundTrip) {
  TempDir dir;
  const std::string path = dir / "a.safetensors";
  SafetensorsWriteOptions options;
  options.metadata["note"] = "hi";
  options.num_threads = 3;
  std::vector<TensorToWrite> tensors = {Iota("w.f32", DType::kF32, {3, 5}, 0.0f),
                                        Iota("w.bf16", DType::kBF16, {7}, 10.0f),
                                        Iota("w.f16", DType::kF16, {2, 2, 2}, -4.0f),
                                        Iota("empty", DType::kF32, {0, 3}, 0.0f)};
  ASSERT_TRUE(WriteSafetensorsFile(path, tensors, options).ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  EXPECT_EQ((*file)->metadata().at("note"), "hi");
  ASSERT_EQ((*file)->tensors().size(), 4u);
  const TensorView* f32 = (*file)->Find("w.f32");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->shape, (std::vector<int64_t>{3, 5}));
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(f32->ElementAsFloat(i), static_cast<float>(i));
  const TensorView* bf16 = (*file)->Find("w.bf16");
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->dtype, DType::kBF16);
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(bf16->ElementAsFloat(i), 10.0f + i);
  const TensorView* f16 = (*file)->Find("w.f16");
  ASSERT_NE(f16, nullptr);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(f16->ElementAsFloat(i), -4.0f + i);
  EXPECT_EQ((*file)->Find("nope"), nullptr);

  // Header length is a multiple of 8 so the data section starts aligned.
  std::string bytes = ::kvtier::testing::ReadBytes(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_len + 15 * 4 + 7 * 2 + 8 * 2);
}

TEST(SafetensorsTest, MoveKeepsViewsValid) {
  TempDir dir;
  const std::string path = dir / "a.safetensors";
  ASSERT_TRUE(WriteSafetensorsFile(path, {Iota("t", DType::kF32, {4}, 1.0f)}, {}).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  SafetensorsFile moved(std::move(**file));
  file->reset();
  ASSERT_NE(moved.Find("t"), nullptr);
  EXPECT_EQ(moved.Find("t")->ElementAsFloat(3), 4.0f);
}

TEST(SafetensorsTest, DuplicateNamesRejectedByWriter) {
  TempDir dir;
  auto status = WriteSafetensorsFile(dir / "a.safetensors",
                                     {Iota("t", DType::kF32, {1}, 0), Iota("t", DType::kF32, {1}, 0)}, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'t'"));
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  TempDir dir;
  auto file = SafetensorsFile::Open(dir / "none.safetensors");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr("none.safetensors"));
}

class CorruptTest : public ::testing::Test {
 protected:
  // Opens crafted bytes; returns the status.
  absl::Status OpenBytes(const std::string& bytes) {
    path_ = dir_ / "bad.safetensors";
    WriteBytes(path_, bytes);
    return SafetensorsFile::Open(path_).status();
  }
  void ExpectDataLoss(const std::string& bytes, const std::string& needle) {
    absl::Status status = OpenBytes(bytes);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_THAT(status.message(), HasSubstr(path_));
    EXPECT_THAT(status.message(), HasSubstr(needle));
  }
  TempDir dir_;
  std::string path_;
};

const std::string kEightBytes(8, '\x01');

TEST_F(CorruptTest, TooShortForHeaderLength) { ExpectDataLoss("abc", "too short"); }

TEST_F(CorruptTest, HeaderLengthPastEnd) {
  ExpectDataLoss(SafetensorsBytes("{}", "", 4096), "header length 4096 runs past the end");
}

TEST_F(CorruptTest, AbsurdHeaderLength) {
  ExpectDataLoss(SafetensorsBytes("{}", "", uint64_t{1} << 40), "absurd");
}

TEST_F(CorruptTest, BadJson) { ExpectDataLoss(SafetensorsBytes("{\"a\": [", ""), "not valid JSON"); }

TEST_F(CorruptTest, HeaderNotObject) { ExpectDataLoss(SafetensorsBytes("[1, 2]", ""), "not a JSON object"); }

TEST_F(CorruptTest, EntryMissingDtype) {
  ExpectDataLoss(SafetensorsBytes(R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", kEightBytes), "'w'");
}

TEST_F(CorruptTest, NegativeShape) {
  ExpectDataLoss(SafetensorsBytes(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", kEightBytes),
                 "tensor 'w' has a bad shape");
}

TEST_F(CorruptTest, MalformedOffsets) {
  ExpectDataLoss(SafetensorsBytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", kEightBytes),
                 "tensor 'w' needs 'data_offsets'");
}

TEST_F(CorruptTest, OffsetsOutOfRange) {
  ExpectDataLoss(SafetensorsBytes(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", kEightBytes),
                 "tensor 'w' data_offsets [0, 16) run past the 8 data bytes");
}

TEST_F(CorruptTest, BeginAfterEnd) {
  ExpectDataLoss(SafetensorsBytes(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", kEightBytes),
                 "tensor 'w' has data_offsets begin 8 > end 0");
}

TEST_F(CorruptTest, SizeNotMatchingShape) {
  ExpectDataLoss(SafetensorsBytes(R"({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]}})", kEightBytes),
                 "tensor 'w' holds 8 bytes but shape [3] x BF16 needs 6");
}

TEST_F(CorruptTest, ShapeOverflowDoesNotWrapToAMatch) {
  // 2^32 * 2^32 * 4 bytes wraps to 0 in 64 bits; the checked product must not.
  ExpectDataLoss(
      SafetensorsBytes(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", ""),
      "tensor 'w'");
}

TEST_F(CorruptTest, OverlappingTensors) {
  ExpectDataLoss(SafetensorsBytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                      "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                                  kEightBytes),
                 "overlap");
  EXPECT_THAT(OpenBytes(SafetensorsBytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                      "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                                         kEightBytes))
                  .message(),
              ::testing::AllOf(HasSubstr("'a'"), HasSubstr("'b'")));
}

TEST_F(CorruptTest, KnownButUnsupportedDtypeIsListedAndSizeChecked) {
  std::string bytes =
      SafetensorsBytes(R"({"__metadata__": {"format": "pt"},
                           "ids": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})",
                       kEightBytes);
  EXPECT_TRUE(OpenBytes(bytes).ok());
  auto file = SafetensorsFile::Open(path_);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->Find("ids"), nullptr);
  ASSERT_NE((*file)->FindUnsupported("ids"), nullptr);
  EXPECT_EQ((*file)->FindUnsupported("ids")->dtype, "I64");

  ExpectDataLoss(SafetensorsBytes(R"({"ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 8]}})", kEightBytes),
                 "shape [2] x I64 needs 16");
}

TEST_F(CorruptTest, UnknownDtypeIsListedAsUnsupported) {
  // A dtype newer than this reader: range-checked, kept aside; an error only if needed.
  std::string bytes = SafetensorsBytes(R"({"q": {"dtype": "Q4_K", "shape": [3], "data_offsets": [0, 8]}})", kEightBytes);
  ASSERT_TRUE(OpenBytes(bytes).ok());
  auto file = SafetensorsFile::Open(path_);
  ASSERT_TRUE(file.ok());
  ASSERT_NE((*file)->FindUnsupported("q"), nullptr);
  EXPECT_EQ((*file)->FindUnsupported("q")->dtype, "Q4_K");
}

TEST_F(CorruptTest, MetadataAllowedAndEmptyHeaderOk) {
  EXPECT_TRUE(OpenBytes(SafetensorsBytes(R"({"__metadata__": {"format": "pt", "n": 1}})", "")).ok());
  ExpectDataLoss(SafetensorsBytes(R"({"__metadata__": [1]})", ""), "__metadata__");
}

}  // namespace
}  // namespace kvtier
