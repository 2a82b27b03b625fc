// The bench's ceilings read from the anchors' output (tools/kvtier/bench_ceilings.h): which
// lines count, what each figure becomes, and the fp8 GEMM rate derived by hand.
#include "bench_ceilings.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace kvtier::cli::bench {
namespace {

// Llama-3-8B's projection parameters in one layer (lib_kernels.py's shapes), times 32 layers.
constexpr double kParams32 = 32.0 * (4096.0 * 6144 + 4096.0 * 4096 + 4096.0 * 28672 + 14336.0 * 4096);

TEST(BenchCeilingsTest, ResultLinesSkipTheRestOfTheOutput) {
  const std::string path = ::testing::TempDir() + "/bench_ceilings_lines.txt";
  {
    std::ofstream out(path);
    out << "warming up\n{\"M\": 1, \"shape\": \"qkv\"}\nnot json {\nRESULT {\"a\": 2}\nRESULT {broken\n"
        << "RESULT {\"t\": NaN, \"u\": [1, -Infinity], \"note\": \"a, NaN \\\" [NaN\", \"v\": 3}\n";
  }
  const std::vector<nlohmann::json> lines = ReadResultLines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["M"], 1);
  EXPECT_EQ(lines[1]["a"], 2);
  // Python's non-finite floats read as null; the rest of the line, strings included, as written.
  EXPECT_TRUE(lines[2]["t"].is_null());
  EXPECT_TRUE(lines[2]["u"][1].is_null());
  EXPECT_EQ(lines[2]["note"], "a, NaN \" [NaN");
  EXPECT_EQ(lines[2]["v"], 3);
  std::remove(path.c_str());
  EXPECT_TRUE(ReadResultLines(path).empty());  // a missing file reads as no lines
}

TEST(BenchCeilingsTest, CeilingsPyGivesTheCopyRateAndTheBf16Gemm) {
  Ceilings c;
  ApplyCeilingsResult(nlohmann::json::parse(R"json({"hbm_copy_TBps(read+write)": 4.4, "bf16_gemm_TFLOPs": 750.5})json"),
                      "ceilings.txt", &c);
  EXPECT_DOUBLE_EQ(c.hbm_Bps, 4.4e12);
  EXPECT_DOUBLE_EQ(c.gemm_flops, 750.5e12);
  EXPECT_NE(c.source.find("ceilings.txt"), std::string::npos);
  // Without the fp8 figure both weight formats are bounded by the bf16 GEMM.
  EXPECT_DOUBLE_EQ(c.ProjectionFlops(true), 750.5e12);
  EXPECT_DOUBLE_EQ(c.ProjectionFlops(false), 750.5e12);
}

TEST(BenchCeilingsTest, Fp8CeilingIsTheFastestLargeBatchThroughTheProjections) {
  // M = 2048 in 25 ms and M = 4096 in 45 ms: 4096 is faster per FLOP; M = 128's rate is
  // higher still but below the minimum rows (the weight stream binds there), and M = 512's
  // fp8 call failed (no number).
  const nlohmann::json result = nlohmann::json::parse(R"json({
    "layer_gemms_M128": {"bf16_ms_32_layers": 1.0, "fp8_ms_32_layers": 0.5},
    "layer_gemms_M512": {"bf16_ms_32_layers": 9.0, "fp8_ms_32_layers": null},
    "layer_gemms_M2048": {"bf16_ms_32_layers": 38.4, "fp8_ms_32_layers": 25.0},
    "layer_gemms_M4096": {"bf16_ms_32_layers": 75.0, "fp8_ms_32_layers": 45.0},
    "attn_32768_CUDNN_ATTENTION_ms_32_layers": 476.0})json");
  Ceilings c;
  c.gemm_flops = 700e12;
  ASSERT_TRUE(ApplyLibKernelsResult(result, "lib_kernels.txt", &c));
  EXPECT_NEAR(c.fp8_gemm_flops, 2.0 * 4096 * kParams32 / 45e-3, 1e3);
  EXPECT_NE(c.fp8_source.find("M = 4096"), std::string::npos);
  EXPECT_DOUBLE_EQ(c.ProjectionFlops(true), c.fp8_gemm_flops);
  EXPECT_DOUBLE_EQ(c.ProjectionFlops(false), 700e12);
  EXPECT_DOUBLE_EQ(c.cudnn_attention_32k_s, 0.476);
}

TEST(BenchCeilingsTest, NoUsableFp8FigureLeavesTheCeilingUnset) {
  Ceilings c;
  EXPECT_FALSE(ApplyLibKernelsResult(nlohmann::json::parse(R"json({"layer_gemms_M64": {"fp8_ms_32_layers": 4.5}})json"),
                                     "x", &c));
  EXPECT_FALSE(ApplyLibKernelsResult(nlohmann::json::parse(R"json({"layer_gemms_Mx": {"fp8_ms_32_layers": 4.5}})json"),
                                     "x", &c));
  EXPECT_FALSE(ApplyLibKernelsResult(nlohmann::json::parse(R"json([1, 2])json"), "x", &c));
  EXPECT_TRUE(std::isnan(c.fp8_gemm_flops));
  EXPECT_DOUBLE_EQ(c.ProjectionFlops(true), c.gemm_flops);
}

}  // namespace
}  // namespace kvtier::cli::bench
