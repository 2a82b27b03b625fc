// The sampling parameter ranges (backend/sampling_ranges.h) at their boundaries, NaN and
// infinities included, and ValidateRowSampling naming the row it refuses.
#include "backend/sampling_ranges.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend/row_sampling.h"
#include "gtest/gtest.h"

namespace kvtier {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SamplingRangesTest, Temperature) {
  for (float ok : {0.0f, 1e-6f, 0.7f, 100.0f}) EXPECT_TRUE(ValidateTemperature(ok).ok()) << ok;
  for (float bad : {-1e-6f, -1.0f, kNaN, kInf, -kInf}) {
    const absl::Status s = ValidateTemperature(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("temperature"), std::string::npos);
  }
}

TEST(SamplingRangesTest, TopK) {
  for (int32_t ok : {0, 1, 50, std::numeric_limits<int32_t>::max()}) EXPECT_TRUE(ValidateTopK(ok).ok());
  for (int32_t bad : {-1, std::numeric_limits<int32_t>::min()}) {
    const absl::Status s = ValidateTopK(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("top_k"), std::string::npos);
  }
}

TEST(SamplingRangesTest, TopP) {
  for (float ok : {1e-6f, 0.5f, 1.0f}) EXPECT_TRUE(ValidateTopP(ok).ok()) << ok;
  for (float bad : {0.0f, -0.5f, 1.0001f, kNaN, kInf}) {
    const absl::Status s = ValidateTopP(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("top_p"), std::string::npos);
  }
}

TEST(SamplingRangesTest, RowSamplingNamesTheRow) {
  std::vector<RowSampling> rows(3);
  rows[1].temperature = 0.8f;
  rows[1].u = 0.5;
  EXPECT_TRUE(ValidateRowSampling(rows, 3).ok());
  rows[2].top_p = 0.0f;
  const absl::Status s = ValidateRowSampling(rows, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sampling row 2: top_p"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvtier
