// `kvtier bench --pass` specs (tools/kvtier/bench_pass.h): what parses, what is refused and
// why, and where a pass's JSON goes.
#include "bench_pass.h"

#include "gtest/gtest.h"

namespace kvtier::cli::bench {
namespace {

TEST(BenchPassTest, ParsesNameWorkloadsFormatsAndModel) {
  auto pass = ParseBenchPass("fp8-kv8:W1,W2,W8:weight=fp8:kv=fp8");
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->name, "fp8-kv8");
  EXPECT_EQ(pass->workloads, (std::vector<std::string>{"W1", "W2", "W8"}));
  EXPECT_EQ(pass->weight_dtype, "fp8");
  EXPECT_EQ(pass->kv_dtype, "fp8");
  EXPECT_EQ(pass->model_dir, "");
  auto f16 = ParseBenchPass("f16:W1:model=/tmp/llama3-8b-f16");
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_EQ(f16->model_dir, "/tmp/llama3-8b-f16");
  EXPECT_EQ(f16->weight_dtype, "auto");
}

TEST(BenchPassTest, RefusesWhatCannotRunAsAPass) {
  for (const char* bad : {"", "fp8", ":W1", "fp8:", "fp 8:W1", "fp8:W6b", "fp8:W7", "fp8:W10", "fp8:W1:weight=int4",
                          "fp8:W1:speed=fast", "fp8:W1:model="}) {
    auto pass = ParseBenchPass(bad);
    EXPECT_FALSE(pass.ok()) << bad;
    EXPECT_NE(pass.status().message().find("--pass"), std::string::npos) << pass.status();
  }
}

TEST(BenchPassTest, JsonGoesBesideTheMainOneWithTheName) {
  EXPECT_EQ(PassJsonPath("out/bench.json", "fp8"), "out/bench-fp8.json");
  EXPECT_EQ(PassJsonPath("out.d/results", "long"), "out.d/results-long");
  EXPECT_EQ(PassJsonPath("", "fp8"), "");
}

}  // namespace
}  // namespace kvtier::cli::bench
