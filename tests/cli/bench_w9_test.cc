// W9's shapes and its limit (tools/kvtier/bench_w9.h): which regime binds, computed by hand.
#include "bench_w9.h"

#include "gtest/gtest.h"

namespace kvtier::cli::bench {
namespace {

TEST(BenchW9Test, ShapesAreTheThreeServingRegimes) {
  W9Shape w{};
  ASSERT_TRUE(W9ShapeOf("W9", &w));
  EXPECT_EQ(w.prompt, 1000);
  EXPECT_EQ(w.gen, 1000);
  EXPECT_EQ(w.trtllm_tok_s, 17744);
  ASSERT_TRUE(W9ShapeOf("W9a", &w));
  EXPECT_EQ(w.prompt, 128);
  ASSERT_TRUE(W9ShapeOf("W9b", &w));
  EXPECT_EQ(w.gen, 2048);
  EXPECT_FALSE(W9ShapeOf("W2", &w));
}

TEST(BenchW9Test, LimitIsPrefillComputePlusTheBindingDecodeTerm) {
  const W9Shape shape{100, 1000, 1000, 0};
  const double weights = 16e9, kv = 131072;
  // Prefill: 100 x 1000 x 2 x 8.03e9 FLOPs; a decode step reads 16 GB + 100 x 1500 x 131072 B
  // (bytes bind: 100 rows' FLOPs take 2 ms, the bytes 8.9 ms).
  const double prefill = 100 * 1000 * 2 * 8.03e9 / 800e12;
  const double step = (16e9 + 100 * 1500.0 * 131072) / 4e12;
  EXPECT_NEAR(W9Limit(shape, weights, kv, 4e12, 800e12, 2 * 8.03e9), 100.0 * 1000 / (prefill + 1000 * step), 1e-6);
  // With a tiny KV and many rows the FLOPs bind instead.
  const W9Shape wide{4096, 16, 16, 0};
  const double flops_step = 4096 * 2 * 8.03e9 / 800e12;
  const double wide_prefill = 4096 * 16 * 2 * 8.03e9 / 800e12;
  EXPECT_NEAR(W9Limit(wide, 1e9, 1.0, 4e12, 800e12, 2 * 8.03e9), 4096.0 * 16 / (wide_prefill + 16 * flops_step), 1e-6);
}

}  // namespace
}  // namespace kvtier::cli::bench
