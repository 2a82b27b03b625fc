// FakeBackend: a Backend with real block storage but no model — Forward writes nothing and
// returns zero logits — for testing the scheduler and KV manager without compute.
// Not thread-safe.
#ifndef KVTIER_TESTS_TESTING_FAKE_BACKEND_H_
#define KVTIER_TESTS_TESTING_FAKE_BACKEND_H_

#include <cstring>
#include <vector>

#include "backend/backend.h"

namespace kvtier::testing {

class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(int64_t block_tokens, int64_t vocab = 8) : vocab_(vocab) {
    layout_.num_layers = 1;
    layout_.num_kv_heads = 1;
    layout_.head_dim = 2;
    layout_.block_tokens = block_tokens;
    layout_.dtype = DType::kF32;
  }
  std::string_view name() const override { return "fake"; }
  const KvLayout& kv_layout() const override { return layout_; }
  int64_t vocab_size() const override { return vocab_; }
  absl::Status AllocateKvPool(int64_t num_blocks) override {
    num_blocks_ = num_blocks;
    pool_.assign(static_cast<size_t>(num_blocks) * layout_.BlockBytes(), 0);
    return absl::OkStatus();
  }
  int64_t num_kv_blocks() const override { return num_blocks_; }
  absl::Status Forward(const ForwardBatch& batch, std::vector<float>* logits) override {
    logits->assign(batch.num_logit_rows() * static_cast<size_t>(vocab_), 0.0f);
    return absl::OkStatus();
  }
  absl::Status CopyBlocksToHost(std::span<const BlockCopy> copies) override {
    for (const auto& c : copies) std::memcpy(c.host, Block(c.device_block), layout_.BlockBytes());
    return absl::OkStatus();
  }
  absl::Status CopyBlocksFromHost(std::span<const BlockCopy> copies) override {
    for (const auto& c : copies) std::memcpy(Block(c.device_block), c.host, layout_.BlockBytes());
    return absl::OkStatus();
  }
  absl::Status CopyBlock(int32_t src, int32_t dst) override {
    std::memcpy(Block(dst), Block(src), layout_.BlockBytes());
    return absl::OkStatus();
  }
  int64_t device_bytes_in_use() const override { return static_cast<int64_t>(pool_.size()); }
  int64_t allocations_after_init() const override { return 0; }
  uint8_t* Block(int32_t id) { return pool_.data() + static_cast<size_t>(id) * layout_.BlockBytes(); }

 private:
  KvLayout layout_;
  int64_t vocab_;
  int64_t num_blocks_ = 0;
  std::vector<uint8_t> pool_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_FAKE_BACKEND_H_
