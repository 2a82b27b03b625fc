// Why a CUDA backend reads no host-resident KV (HostKvStreamer::WhyNotRead), the reason the
// engine gives when it refuses a sequence longer than the device tier: it names the options
// that would stream the sequence, and only those that would. Runs without a GPU.
#include <string>

#include "backend/cuda/host_kv_streamer.h"
#include "gtest/gtest.h"

namespace kvtier::cuda {
namespace {

bool Names(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(HostKvRefusalTest, NamesTheOptionsThatWouldStream) {
  HostKvStreamer::Options options;
  options.fast_attention = true;
  options.stream_tokens = 4096;
  // Grouped, with staging slots: one group streams.
  std::string why = HostKvStreamer::WhyNotRead(options, /*streams=*/true, /*grouped=*/true);
  EXPECT_TRUE(Names(why, "layer groups")) << why;
  EXPECT_TRUE(Names(why, "with kv_layer_groups 0 it streams")) << why;
  EXPECT_FALSE(Names(why, "cuda_host_kv_stream_tokens")) << why;
  // Grouped, no staging asked for: both options.
  options.stream_tokens = 0;
  why = HostKvStreamer::WhyNotRead(options, /*streams=*/false, /*grouped=*/true);
  EXPECT_TRUE(Names(why, "with kv_layer_groups 0 and cuda_host_kv_stream_tokens above 0 it streams")) << why;
  // One group, no staging asked for.
  why = HostKvStreamer::WhyNotRead(options, /*streams=*/false, /*grouped=*/false);
  EXPECT_TRUE(Names(why, "cuda_host_kv_stream_tokens is 0")) << why;
  EXPECT_FALSE(Names(why, "kv_layer_groups")) << why;
  // Without the fast kernels no option streams, grouped or not.
  options.fast_attention = false;
  for (bool grouped : {true, false}) {
    why = HostKvStreamer::WhyNotRead(options, /*streams=*/false, grouped);
    EXPECT_TRUE(Names(why, "the fast attention kernels do not run this model")) << why;
    EXPECT_FALSE(Names(why, "kv_layer_groups")) << why;
  }
  // Staging asked for on the fast kernels but none (the device cannot read host memory).
  options.fast_attention = true;
  options.stream_tokens = 4096;
  why = HostKvStreamer::WhyNotRead(options, /*streams=*/false, /*grouped=*/true);
  EXPECT_TRUE(Names(why, "mapped host memory")) << why;
  EXPECT_FALSE(Names(why, "kv_layer_groups")) << why;
}

}  // namespace
}  // namespace kvtier::cuda
