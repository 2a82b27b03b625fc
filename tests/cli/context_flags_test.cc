// Tests of ContextFlags (tools/kvtier/context_flags.h): the library's messages rewritten to
// name the CLI's flags, and nothing else rewritten.
#include "context_flags.h"

#include <gtest/gtest.h>

namespace kvtier::cli {
namespace {

TEST(ContextFlagsTest, FlagOfAKey) {
  EXPECT_EQ(ContextFlags::FlagOf("gpu_mem_limit"), "--gpu-mem-limit");
  EXPECT_EQ(ContextFlags::FlagOf("backend"), "--backend");
}

TEST(ContextFlagsTest, MessagesNameTheFlags) {
  EXPECT_EQ(ContextFlags::InFlagTerms("gpu_kv_bytes 0 (use what the limit leaves) needs gpu_mem_limit > 0"),
            "--gpu-kv-bytes 0 (use what the limit leaves) needs --gpu-mem-limit > 0");
  EXPECT_EQ(ContextFlags::InFlagTerms("disk_kv_bytes > 0 needs a disk_path"),
            "--disk-kv-bytes > 0 needs a --disk-path");
  EXPECT_EQ(ContextFlags::InFlagTerms("option 'backend' must be auto, cpu or cuda"),
            "option '--backend' must be auto, cpu or cuda");
  EXPECT_EQ(ContextFlags::InFlagTerms("raise max_running."), "raise --max-running.");
  EXPECT_EQ(ContextFlags::InFlagTerms("cuda_gemv_prefetch"), "--cuda-gemv-prefetch");
}

TEST(ContextFlagsTest, LeavesEverythingElseAlone) {
  for (const char* text : {"the CUDA backend module could not be loaded", "threads are busy",
                           "exceed gpu_mem_limit_bytes 5", "cannot open /tmp/disk_path/x",
                           "my_gpu_kv_bytes", "max_running.json", "", "plain"}) {
    EXPECT_EQ(ContextFlags::InFlagTerms(text), text) << text;
  }
}

}  // namespace
}  // namespace kvtier::cli
