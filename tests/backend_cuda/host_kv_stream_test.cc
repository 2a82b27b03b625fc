// CudaBackend reading host-resident KV (docs/LONG_CONTEXT.md, "The CUDA part"): a sequence
// whose older blocks live in pinned host memory, streamed layer by layer into the staging
// buffers, computes exactly what the same sequence computes with every block on the device
// (same kernels, same splits, same bytes: logits equal bit for bit), and matches the CPU
// backend reading the same blocks from host memory within the 16-bit tolerance. Prefill
// chunks and decode steps, several host/device splits (with and without device blocks in
// front of the host range), bf16 and fp16 KV, and fp8 KV (the stream carries the codes and
// each layer's row scales). Skips without a GPU.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/random_checkpoint.h"

namespace kvtier {
namespace {

using cuda_test::RelativeError;

constexpr double kLogitTolerance = 3e-2;  // 16-bit GPU vs fp32 CPU (cuda_backend_test.cc)
// kv_dtype fp8 on both: each quantizes its own K/V (cuda_backend_test.cc, kFp8KvTolerance).
constexpr double kFp8KvTolerance = 8e-2;
constexpr int64_t kPoolBlocks = 64;

struct StreamCase {
  const char* preset;
  int64_t head_dim, heads, kv_heads;
  DType dtype;
  int64_t host_first;  // logical blocks kept on the device in front of the host range
  int64_t host_blocks;
  // Host blocks at irregular addresses (gaps of 0-7 blocks in one pinned buffer), as a host
  // tier's slots are after a while.
  bool scattered = false;
  bool fp8_kv = false;  // kv_dtype fp8 (E4M3 codes + row scales) on every backend
};

// A gtest parameter name: letters, digits and '_' only.
std::string Name(const StreamCase& c) {
  std::string preset(c.preset);
  std::replace(preset.begin(), preset.end(), '-', '_');
  return preset + "_d" + std::to_string(c.head_dim) + "_" + std::string(DTypeName(c.dtype)) +
         "_first" + std::to_string(c.host_first) + "_n" + std::to_string(c.host_blocks) +
         (c.scattered ? "_scattered" : "") + (c.fp8_kv ? "_kvfp8" : "");
}

// The CUDA backend as the engine gets it: from the module (libkvtier_cuda.so next to the
// library or on LD_LIBRARY_PATH), so this binary holds no kernels of its own.
absl::StatusOr<std::unique_ptr<Backend>> CudaBackendOf(const Checkpoint& checkpoint, const BackendOptions& options) {
  return CreateBackend("cuda", checkpoint, options);
}

class HostKvStreamTest : public ::testing::TestWithParam<StreamCase> {
 protected:
  void SetUp() override { KVT_SKIP_WITHOUT_CUDA(); }
};

// The host copies of a backend's blocks [first, first + n) of `table`.
std::vector<const void*> MoveToHost(Backend& b, const std::vector<int32_t>& table, int64_t first, int64_t n,
                              std::vector<std::unique_ptr<uint8_t[]>>* plain, std::vector<void*>* pinned,
                              std::mt19937* scatter = nullptr) {
  std::vector<const void*> out;
  const size_t bytes = b.kv_layout().BlockBytes();
  uint8_t* region = nullptr;  // scattered: every block in one buffer, at irregular gaps
  size_t cursor = 0;
  if (pinned != nullptr && scatter != nullptr) {
    auto p = b.AllocateHostMemory(bytes * static_cast<size_t>(8 * n + 8));
    EXPECT_TRUE(p.ok()) << p.status();
    region = static_cast<uint8_t*>(*p);
    pinned->push_back(region);
  }
  for (int64_t j = first; j < first + n; ++j) {
    void* host = nullptr;
    if (region != nullptr) {
      host = region + cursor;
      cursor += bytes * (1 + (*scatter)() % 8);
    } else if (pinned != nullptr) {
      auto p = b.AllocateHostMemory(bytes);
      EXPECT_TRUE(p.ok()) << p.status();
      host = *p;
      pinned->push_back(host);
    } else {
      plain->push_back(std::make_unique<uint8_t[]>(bytes + 64));
      host = plain->back().get();
    }
    BlockCopy copy{table[j], host};
    EXPECT_TRUE(b.CopyBlocksToHost({&copy, 1}).ok());
    out.push_back(host);
  }
  return out;
}

TEST_P(HostKvStreamTest, StreamedSequenceMatchesAllOnDevice) {
  const StreamCase c = GetParam();
  std::mt19937 rng(1234);
  auto spec = RandomCheckpointPreset(c.preset);
  ASSERT_TRUE(spec.ok());
  spec->seed = 77;
  spec->head_dim = c.head_dim;
  spec->heads = c.heads;
  spec->kv_heads = c.kv_heads;
  spec->dtype = c.dtype;
  // The whole sequence (prompt front, 70 more tokens, the decode steps) within the model's context.
  spec->max_positions = std::max<int64_t>(spec->max_positions, (c.host_first + c.host_blocks + 8) * 16 + 128);
  const std::string dir = ::testing::TempDir() + "/kvtier_hostkv_" + Name(c) + "_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteRandomCheckpoint(*spec, dir).ok());
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();

  BackendOptions plain_options;
  if (c.fp8_kv) plain_options.kv_dtype = StorageDType::kFp8;
  BackendOptions stream_options = plain_options;
  const int64_t slots = std::max<int64_t>(16, c.host_blocks + 4);
  const int64_t pool_blocks = std::max<int64_t>(kPoolBlocks, c.host_first + c.host_blocks + 16);
  stream_options.cuda.host_kv_stream_tokens = 16 * slots;
  BackendOptions ref_options = plain_options;
  ref_options.cuda.decode_graphs = false;  // both run every step eagerly: the same launches
  auto ref = CudaBackendOf(**checkpoint, ref_options);
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto gpu = CudaBackendOf(**checkpoint, stream_options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = CpuBackend::Create(**checkpoint, plain_options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE((*gpu)->ReadsHostResidentKv()) << "streaming needs the fast attention kernels and mapped host memory";
  EXPECT_FALSE((*ref)->ReadsHostResidentKv());
  EXPECT_EQ((*gpu)->MaxHostResidentBlocks(), slots);
  for (Backend* b : {static_cast<Backend*>(ref->get()), static_cast<Backend*>(gpu->get()),
                     static_cast<Backend*>(cpu->get())}) {
    ASSERT_TRUE(b->AllocateKvPool(pool_blocks).ok());
  }
  const int64_t bt = (*gpu)->kv_layout().block_tokens;
  const int64_t vocab = (*gpu)->vocab_size();

  std::vector<int32_t> table(pool_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> tokens;
  const int64_t front = (c.host_first + c.host_blocks) * bt + 5;  // computed before the move
  for (int64_t i = 0; i < front + 70; ++i) tokens.push_back(tok(rng));

  // 1. The front of the prompt, all on the device everywhere.
  {
    ForwardBatch batch;
    batch.chunks.push_back({std::span<const int32_t>(tokens).first(front), 0, table, false});
    std::vector<float> unused;
    for (Backend* b : {static_cast<Backend*>(ref->get()), static_cast<Backend*>(gpu->get()),
                       static_cast<Backend*>(cpu->get())}) {
      ASSERT_TRUE(b->Forward(batch, &unused).ok());
    }
  }
  // 2. Blocks [host_first, host_first + n) move to host memory for the streamed GPU and the
  //    CPU; their device copies there are overwritten with NaNs, so reading them would show.
  std::vector<void*> pinned;
  std::vector<std::unique_ptr<uint8_t[]>> plain;
  std::mt19937 scatter(99);
  const std::vector<const void*> gpu_host =
      MoveToHost(**gpu, table, c.host_first, c.host_blocks, nullptr, &pinned, c.scattered ? &scatter : nullptr);
  const std::vector<const void*> cpu_host = MoveToHost(**cpu, table, c.host_first, c.host_blocks, &plain, nullptr);
  {
    std::vector<uint8_t> nan((*gpu)->kv_layout().BlockBytes(), 0xff);
    for (int64_t j = c.host_first; j < c.host_first + c.host_blocks; ++j) {
      BlockCopy copy{table[j], nan.data()};
      ASSERT_TRUE((*gpu)->CopyBlocksFromHost({&copy, 1}).ok());
    }
  }
  std::vector<int32_t> device_table(table.begin(), table.begin() + c.host_first);
  device_table.insert(device_table.end(), table.begin() + c.host_first + c.host_blocks, table.end());
  HostResidentKv gpu_kv{c.host_first, gpu_host};
  HostResidentKv cpu_kv{c.host_first, cpu_host};

  // 3. The rest of the prompt in one chunk, then decode steps: the GPU streams its host
  //    blocks (prefill chunk, then decode rows).
  int64_t cached = front;
  int steps = 0;
  double max_err = 0;
  auto step = [&](int64_t count) {
    SequenceChunk full{std::span<const int32_t>(tokens).subspan(cached, count), cached, table, true};
    SequenceChunk streamed = full;
    streamed.block_table = device_table;
    streamed.host_kv = gpu_kv;
    SequenceChunk on_cpu = streamed;
    on_cpu.host_kv = cpu_kv;
    ForwardBatch a, b, h;
    a.chunks.push_back(full);
    b.chunks.push_back(streamed);
    h.chunks.push_back(on_cpu);
    std::vector<float> want, got, cpu_logits;
    ASSERT_TRUE((*ref)->Forward(a, &want).ok());
    const absl::Status st = (*gpu)->Forward(b, &got);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE((*cpu)->Forward(h, &cpu_logits).ok());
    ASSERT_EQ(got.size(), static_cast<size_t>(vocab));
    ASSERT_EQ(want.size(), got.size());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * sizeof(float)), 0)
        << "streamed logits differ from all-on-device at position " << cached;
    const double err = RelativeError(got, cpu_logits);
    max_err = std::max(max_err, err);
    EXPECT_LT(err, c.fp8_kv ? kFp8KvTolerance : kLogitTolerance) << "vs the CPU at position " << cached;
    cached += count;
    tokens.resize(cached);
    tokens.push_back(static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin()));
    ++steps;
  };
  step(70);
  for (int i = 0; i < 6; ++i) step(1);
  std::printf("[%s] %d steps, %lld host blocks, max relative error vs CPU %.3g\n", Name(c).c_str(), steps,
              static_cast<long long>(c.host_blocks), max_err);

  // A chunk with more host blocks than the staging holds, or a host block after a written
  // position, is refused by name.
  std::vector<const void*> too_many(slots + 1, gpu_host[0]);
  SequenceChunk bad{std::span<const int32_t>(tokens).subspan(cached, 1), cached, device_table, true};
  bad.host_kv = HostResidentKv{0, too_many};
  ForwardBatch refused;
  refused.chunks.push_back(bad);
  std::vector<float> unused;
  EXPECT_EQ((*gpu)->Forward(refused, &unused).code(), absl::StatusCode::kInvalidArgument);
  bad.host_kv = gpu_kv;
  bad.start_position = (c.host_first + c.host_blocks) * bt - 1;
  refused.chunks[0] = bad;
  EXPECT_EQ((*gpu)->Forward(refused, &unused).code(), absl::StatusCode::kInvalidArgument);
  // The backend without staging refuses host blocks as unimplemented.
  refused.chunks[0].host_kv = gpu_kv;
  refused.chunks[0].start_position = cached;
  EXPECT_EQ((*ref)->Forward(refused, &unused).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ((*gpu)->allocations_after_init(), 0);
  for (void* p : pinned) (*gpu)->FreeHostMemory(p);
}

INSTANTIATE_TEST_SUITE_P(
    Splits, HostKvStreamTest,
    ::testing::Values(StreamCase{"small-llama", 64, 4, 1, DType::kBF16, 0, 3},
                      StreamCase{"small-llama", 64, 4, 1, DType::kBF16, 1, 5},
                      StreamCase{"small-llama", 64, 4, 1, DType::kF16, 0, 12},
                      StreamCase{"tiny-qwen3", 128, 4, 2, DType::kBF16, 2, 9},
                      StreamCase{"tiny-qwen3", 128, 4, 2, DType::kF16, 0, 1},
                      StreamCase{"small-llama", 64, 4, 1, DType::kBF16, 2, 640, true},
                      StreamCase{"small-llama", 64, 4, 1, DType::kBF16, 0, 3, false, true},
                      StreamCase{"tiny-qwen3", 128, 4, 2, DType::kBF16, 2, 9, false, true},
                      StreamCase{"tiny-qwen3", 128, 4, 2, DType::kF16, 1, 40, true, true}),
    [](const ::testing::TestParamInfo<StreamCase>& info) { return Name(info.param); });

}  // namespace
}  // namespace kvtier
