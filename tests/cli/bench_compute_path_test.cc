// The bench JSON's prefill_attention, read from compute_path (tools/kvtier/bench_compute_path.h).
#include "bench_compute_path.h"

#include "gtest/gtest.h"

namespace kvtier::cli::bench {
namespace {

TEST(BenchComputePathTest, NamesWhatRanThePrefillAttention) {
  EXPECT_EQ(PrefillAttentionOf("cuda, prefill attention wgmma"), "wgmma");
  EXPECT_EQ(PrefillAttentionOf("cuda, prefill attention cudnn 9.10.2 (16 plans built in 2.10 s)"), "cudnn 9.10.2");
  EXPECT_EQ(PrefillAttentionOf("cuda, prefill attention cudnn 9.10.2 and wgmma (cuDNN refused 2 steps: a (b))"),
            "cudnn 9.10.2 and wgmma");
  EXPECT_EQ(PrefillAttentionOf("cuda, prefill attention mma (cudnn not used: cuDNN (x) cannot be loaded)"),
            "mma");
  EXPECT_EQ(PrefillAttentionOf("cpu: BF16 weights, 16-bit dot products"), "");
  EXPECT_EQ(PrefillAttentionOf(""), "");
}

}  // namespace
}  // namespace kvtier::cli::bench
