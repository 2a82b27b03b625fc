// ForwardingBackend: a Backend that hands every call to the one it wraps, for tests that
// change one behaviour of a real backend (override that method, keep the rest).
#ifndef KVTIER_TESTS_TESTING_FORWARDING_BACKEND_H_
#define KVTIER_TESTS_TESTING_FORWARDING_BACKEND_H_

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace kvtier::testing {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  Backend& inner() { return *inner_; }
  const Backend& inner() const { return *inner_; }

  std::string_view name() const override { return inner_->name(); }
  std::string compute_path() const override { return inner_->compute_path(); }
  const KvLayout& kv_layout() const override { return inner_->kv_layout(); }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  std::optional<PositionLimit> position_limit() const override { return inner_->position_limit(); }
  absl::Status AllocateKvPool(int64_t num_blocks) override { return inner_->AllocateKvPool(num_blocks); }
  int64_t num_kv_blocks() const override { return inner_->num_kv_blocks(); }
  absl::Status WarmUp() override { return inner_->WarmUp(); }
  absl::Status Forward(const ForwardBatch& batch, std::vector<float>* logits) override {
    return inner_->Forward(batch, logits);
  }
  absl::Status ForwardGreedy(const ForwardBatch& batch, std::vector<int32_t>* token_ids) override {
    return inner_->ForwardGreedy(batch, token_ids);
  }
  absl::Status ForwardSampled(const ForwardBatch& batch, std::span<const RowSampling> rows,
                              std::vector<int32_t>* token_ids) override {
    return inner_->ForwardSampled(batch, rows, token_ids);
  }
  absl::Status ForwardAndSample(const ForwardBatch& batch, const SamplingBatch& sampling,
                                SamplingResult* result) override {
    return inner_->ForwardAndSample(batch, sampling, result);
  }
  absl::StatusOr<void*> AllocateHostMemory(size_t bytes) override { return inner_->AllocateHostMemory(bytes); }
  void FreeHostMemory(void* ptr) override { inner_->FreeHostMemory(ptr); }
  bool PinsHostMemory() const override { return inner_->PinsHostMemory(); }
  absl::StatusOr<void*> ReserveHostMemory(size_t bytes) override { return inner_->ReserveHostMemory(bytes); }
  absl::Status PinHostMemory(void* ptr, size_t bytes) override { return inner_->PinHostMemory(ptr, bytes); }
  void UnpinHostMemory(void* ptr, size_t bytes) override { inner_->UnpinHostMemory(ptr, bytes); }
  void ReleaseHostMemory(void* ptr, size_t bytes) override { inner_->ReleaseHostMemory(ptr, bytes); }
  bool ReadsHostResidentKv() const override { return inner_->ReadsHostResidentKv(); }
  std::string WhyNoHostResidentKv() const override { return inner_->WhyNoHostResidentKv(); }
  int64_t MaxHostResidentBlocks() const override { return inner_->MaxHostResidentBlocks(); }
  absl::Status CopyBlocksToHost(std::span<const BlockCopy> copies) override { return inner_->CopyBlocksToHost(copies); }
  absl::Status CopyBlocksFromHost(std::span<const BlockCopy> copies) override {
    return inner_->CopyBlocksFromHost(copies);
  }
  absl::Status PrefetchBlocksFromHost(std::span<const BlockCopy> copies) override {
    return inner_->PrefetchBlocksFromHost(copies);
  }
  absl::Status WaitForPrefetches() override { return inner_->WaitForPrefetches(); }
  absl::StatusOr<int64_t> StartCopiesToHost(std::span<const BlockCopy> copies) override {
    return inner_->StartCopiesToHost(copies);
  }
  absl::StatusOr<bool> CopiesDone(int64_t ticket) override { return inner_->CopiesDone(ticket); }
  absl::Status WaitForCopies(int64_t ticket) override { return inner_->WaitForCopies(ticket); }
  BackendCopyStats copy_stats() const override { return inner_->copy_stats(); }
  absl::Status CopyBlock(int32_t src_block, int32_t dst_block) override { return inner_->CopyBlock(src_block, dst_block); }
  int64_t device_bytes_in_use() const override { return inner_->device_bytes_in_use(); }
  DeviceMemoryStats device_memory() const override { return inner_->device_memory(); }
  int64_t MemoryForKvPool() const override { return inner_->MemoryForKvPool(); }
  int64_t allocations_after_init() const override { return inner_->allocations_after_init(); }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_FORWARDING_BACKEND_H_
