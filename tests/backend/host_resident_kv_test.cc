// Tests of host-resident KV blocks (backend/host_resident_kv.h) on the CPU backend: a
// sequence whose older blocks are read from host memory in place computes bit for bit
// what it computes with every block on the device — prefill chunks and decodes, with and
// without device-resident first blocks (attention sinks), in both KV formats (f32, and fp8
// codes with per-row scales), on the plain forward and on the tensor-parallel plan at TP = 2
// (each rank reading its KV heads of the host blocks) — and malformed host ranges are refused before anything is
// written.
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/random_checkpoint.h"

namespace kvtier {
namespace {

constexpr int64_t kBlockTokens = 4;
constexpr int64_t kNumBlocks = 64;

const Checkpoint& TestCheckpoint() {
  static const Checkpoint* checkpoint = [] {
    RandomCheckpointSpec spec;
    spec.arch = Architecture::kLlama;
    spec.hidden = 64;
    spec.layers = 2;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.head_dim = 16;
    spec.intermediate = 96;
    spec.vocab = 300;
    spec.max_positions = 256;
    spec.seed = 11;
    const std::string dir = absl::StrCat(testing::TempDir(), "/kvtier_host_resident_kv_", getpid());
    const absl::Status written = WriteRandomCheckpoint(spec, dir);
    EXPECT_TRUE(written.ok()) << written;
    absl::StatusOr<std::unique_ptr<Checkpoint>> opened = Checkpoint::Open(dir);
    EXPECT_TRUE(opened.ok()) << opened.status();
    return opened->release();
  }();
  return *checkpoint;
}

std::unique_ptr<CpuBackend> MakeBackend(StorageDType kv_dtype = StorageDType::kAuto, int32_t tensor_parallel = 1) {
  BackendOptions options;
  options.tensor_parallel = tensor_parallel;
  options.num_threads = 2;
  options.block_tokens = kBlockTokens;
  options.kv_dtype = kv_dtype;
  absl::StatusOr<std::unique_ptr<CpuBackend>> backend = CpuBackend::Create(TestCheckpoint(), options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  EXPECT_TRUE((*backend)->AllocateKvPool(kNumBlocks).ok());
  return std::move(*backend);
}

// One sequence fed chunk by chunk on one backend, every block on the device; a twin on
// another backend moves each of its full blocks in [first_host, ...) to host memory as soon
// as no chunk writes it any more, keeping `recent` full blocks on the device.
class TwinSequences {
 public:
  TwinSequences(int64_t sinks, int64_t recent, StorageDType kv_dtype, int32_t tensor_parallel)
      : sinks_(sinks),
        recent_(recent),
        all_device_(MakeBackend(kv_dtype, tensor_parallel)),
        streamed_(MakeBackend(kv_dtype, tensor_parallel)) {}

  // Feeds `tokens` to both; returns whether their logits were bit-identical.
  void Feed(const std::vector<int32_t>& tokens) {
    const int64_t end = position_ + static_cast<int64_t>(tokens.size());
    while (static_cast<int64_t>(device_table_.size()) * kBlockTokens < end) {
      device_table_.push_back(static_cast<int32_t>(device_table_.size()));
      twin_table_.push_back(static_cast<int32_t>(next_twin_block_++));
    }
    std::vector<float> want, got;
    ForwardBatch batch;
    batch.chunks.push_back({.tokens = tokens, .start_position = position_, .block_table = device_table_,
                            .need_logits = true});
    ASSERT_TRUE(all_device_->Forward(batch, &want).ok());
    batch.chunks[0].block_table = twin_table_;
    batch.chunks[0].host_kv = HostResidentKv{sinks_, host_pointers_};
    const absl::Status status = streamed_->Forward(batch, &got);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(want.size(), got.size());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
        << "logits differ at position " << end - 1 << " with " << host_pointers_.size() << " host blocks";
    position_ = end;
    MoveOldBlocksToHost();
  }
  int64_t num_host_blocks() const { return static_cast<int64_t>(host_pointers_.size()); }
  int64_t position() const { return position_; }
  const KvLayout& layout() const { return streamed_->kv_layout(); }

 private:
  // Full blocks past the sinks and before the `recent` newest go to host memory, their
  // device blocks returned (so the twin's device blocks are reused, as under a small tier).
  void MoveOldBlocksToHost() {
    const int64_t full = position_ / kBlockTokens;
    while (sinks_ + num_host_blocks() + recent_ < full) {
      const size_t index = static_cast<size_t>(sinks_);  // first device block after the sinks
      const int32_t block = twin_table_[index];
      // A block is BlockBytes() bytes in either format (fp8: codes, then the row scales).
      host_blocks_.emplace_back(streamed_->kv_layout().BlockBytes());
      BlockCopy copy{block, host_blocks_.back().data()};
      ASSERT_TRUE(streamed_->CopyBlocksToHost(std::span<const BlockCopy>(&copy, 1)).ok());
      // Poisoned: a read of the stale device block would change the logits (0x7e: a large
      // f32 element and a large fp8 code and scale).
      std::vector<uint8_t> poison(streamed_->kv_layout().BlockBytes(), 0x7e);
      copy.host = poison.data();
      ASSERT_TRUE(streamed_->CopyBlocksFromHost(std::span<const BlockCopy>(&copy, 1)).ok());
      host_pointers_.push_back(host_blocks_.back().data());
      twin_table_.erase(twin_table_.begin() + static_cast<std::ptrdiff_t>(index));
    }
  }

  const int64_t sinks_;
  const int64_t recent_;
  std::unique_ptr<CpuBackend> all_device_;
  std::unique_ptr<CpuBackend> streamed_;
  int64_t position_ = 0;
  std::vector<int32_t> device_table_;
  std::vector<int32_t> twin_table_;
  int64_t next_twin_block_ = 0;
  // std::vector's buffer: new[]-aligned, enough for the f32 rows read in place.
  std::vector<std::vector<uint8_t>> host_blocks_;
  std::vector<const void*> host_pointers_;
};

std::vector<int32_t> RandomTokens(int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(0, 299);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t& t : tokens) t = dist(rng);
  return tokens;
}

// (sink blocks, KV format, tensor_parallel).
class HostResidentKvTest : public testing::TestWithParam<std::tuple<int64_t, StorageDType, int32_t>> {};

TEST_P(HostResidentKvTest, ChunkedPrefillAndDecodeAreBitIdentical) {
  const auto [sinks, kv_dtype, tensor_parallel] = GetParam();
  std::mt19937 rng(5);
  TwinSequences twins(sinks, /*recent=*/2, kv_dtype, tensor_parallel);
  ASSERT_EQ(twins.layout().dtype, kv_dtype == StorageDType::kFp8 ? DType::kF8E4M3 : DType::kF32);
  for (int64_t chunk : {7, 5, 9, 3, 6}) twins.Feed(RandomTokens(chunk, rng));
  for (int i = 0; i < 40; ++i) twins.Feed(RandomTokens(1, rng));
  // Most of the sequence was read from the host: 70 positions, 2 recent blocks + sinks kept.
  EXPECT_GE(twins.num_host_blocks(), twins.position() / kBlockTokens - 3 - sinks);
}

INSTANTIATE_TEST_SUITE_P(SinksAndFormats, HostResidentKvTest,
                         testing::Combine(testing::Values(int64_t{0}, int64_t{1}, int64_t{2}),
                                          testing::Values(StorageDType::kAuto, StorageDType::kFp8),
                                          testing::Values(1, 2)),
                         [](const testing::TestParamInfo<HostResidentKvTest::ParamType>& info) {
                           return absl::StrCat("sinks", std::get<0>(info.param), "_",
                                               std::get<1>(info.param) == StorageDType::kFp8 ? "fp8" : "f32", "_tp",
                                               std::get<2>(info.param));
                         });

TEST(HostResidentKvValidation, RefusesHostBlocksTheChunkWouldWrite) {
  std::unique_ptr<CpuBackend> backend = MakeBackend();
  std::vector<float> host(static_cast<size_t>(backend->kv_layout().ElementsPerBlock()), 0.0f);
  const std::vector<const void*> one_host = {host.data()};
  const std::vector<int32_t> tokens = {1, 2, 3};
  const std::vector<int32_t> table = {5, 6};
  std::vector<float> logits;
  ForwardBatch batch;
  // Positions 6..8 are in logical block 1 and 2; block 1 on the host would be written.
  batch.chunks.push_back({.tokens = tokens, .start_position = 6, .block_table = table, .need_logits = true,
                          .host_kv = HostResidentKv{1, one_host}});
  absl::Status status = backend->Forward(batch, &logits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("host-resident"), std::string::npos) << status;
  // A null host block.
  const std::vector<const void*> null_host = {nullptr};
  batch.chunks[0].start_position = 8;
  batch.chunks[0].host_kv = HostResidentKv{0, null_host};
  status = backend->Forward(batch, &logits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  // The device table must still cover what the host range does not: 11 positions = 3 blocks.
  const std::vector<int32_t> short_table = {5};
  batch.chunks[0].host_kv = HostResidentKv{0, one_host};
  batch.chunks[0].block_table = short_table;
  status = backend->Forward(batch, &logits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  // Well formed: host block 0, device blocks for logical 1 and 2.
  batch.chunks[0].block_table = table;
  status = backend->Forward(batch, &logits);
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace kvtier
