// The device tier's budget: given, what gpu_mem_limit leaves, or sized from the model.
#include "engine/kv_pool_size.h"

#include "backend/backend.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "testing/engine_runs.h"

namespace kvtier {
namespace {

using testing::CpuOptions;
using testing::MakeEngine;

TEST(KvPoolSizeTest, TheContextPlusABlockPerOtherRunningSequence) {
  KvPoolSizing s;
  s.context_tokens = 500;  // 32 blocks of 16, the last one partly used
  s.block_tokens = 16;
  s.block_bytes = 1000;
  s.max_running = 256;
  EXPECT_EQ(ModelSizedKvBytes(s), (32 + 255) * 1000);  // memory unknown: not capped
  s.max_running = 1;
  EXPECT_EQ(ModelSizedKvBytes(s), 32 * 1000);
}

TEST(KvPoolSizeTest, WithinAShareOfMemoryInWholeBlocks) {
  KvPoolSizing s;
  s.context_tokens = 1 << 20;
  s.block_tokens = 16;
  s.block_bytes = 1000;
  s.max_running = 256;
  s.memory_bytes = 101'000;
  EXPECT_EQ(ModelSizedKvBytes(s), 25'000);  // a quarter of host memory, 25.25 blocks
  s.device = true;
  EXPECT_EQ(ModelSizedKvBytes(s), 90'000);  // 90% of the device's free memory
  s.memory_bytes = 2'000;
  s.device = false;
  EXPECT_EQ(ModelSizedKvBytes(s), 0);  // no block: Engine::Create refuses, naming why
}

// With no budget the tiny model's CPU pool is what its context and max_running need; a
// budget given, or a gpu_mem_limit with gpu_kv_bytes 0, is taken as it is.
TEST(KvPoolSizeTest, EnginesSizeTheirDevicePool) {
  EngineOptions options = CpuOptions();
  options.gpu_kv_bytes.reset();
  options.max_running = 8;
  auto engine = MakeEngine(options);
  ASSERT_NE(engine, nullptr);
  const int64_t block_bytes = static_cast<int64_t>(engine->backend().kv_layout().BlockBytes());
  const int64_t context = testing::SharedCheckpoint(testing::TinyLlamaDir())->config().max_position_embeddings;
  const int64_t want = ((context + 3) / 4 + 7) * block_bytes;
  EXPECT_EQ(engine->Stats()["tiers"]["gpu"]["capacity_bytes"], want);

  options.gpu_kv_bytes = 10 * block_bytes;
  engine = MakeEngine(options);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->Stats()["tiers"]["gpu"]["capacity_bytes"], 10 * block_bytes);

  // 0: what gpu_mem_limit leaves after the weights and workspace (here 20 blocks).
  const int64_t weights_and_workspace = engine->backend().device_bytes_in_use() - 10 * block_bytes;
  options.gpu_kv_bytes = 0;
  options.gpu_mem_limit = weights_and_workspace + 20 * block_bytes;
  engine = MakeEngine(options);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->Stats()["tiers"]["gpu"]["capacity_bytes"], 20 * block_bytes);
}

// A model-sized pool stays within what gpu_mem_limit leaves after weights and workspace.
TEST(KvPoolSizeTest, AModelSizedPoolStaysUnderTheCap) {
  std::shared_ptr<const Checkpoint> checkpoint = testing::SharedCheckpoint(testing::TinyLlamaDir());
  BackendOptions backend_options;
  backend_options.num_threads = 1;
  backend_options.block_tokens = 4;
  auto backend = CreateBackend("cpu", *checkpoint, backend_options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const int64_t block_bytes = static_cast<int64_t>((*backend)->kv_layout().BlockBytes());
  EngineOptions options = CpuOptions();
  options.gpu_kv_bytes.reset();
  options.gpu_mem_limit = (*backend)->device_bytes_in_use() + 3 * block_bytes;
  auto bytes = DeviceKvBytes(options, **backend, 1 << 20);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, 3 * block_bytes);
  options.gpu_mem_limit = (*backend)->device_bytes_in_use() + block_bytes / 2;
  bytes = DeviceKvBytes(options, **backend, 1 << 20);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(bytes.status().message().find("gpu_mem_limit"), std::string::npos) << bytes.status();
}

}  // namespace
}  // namespace kvtier
