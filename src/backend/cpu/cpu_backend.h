// CpuBackend: the decoder forward (Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3) in fp32 over a
// ragged batch, with its "device" KV tier in ordinary memory; matrix products as
// options.cpu_kernels says (backend.h): from the checkpoint's quantized blocks, or from fp32
// (the reference). One thread drives it at a time (Backend).
#ifndef KVTIER_BACKEND_CPU_CPU_BACKEND_H_
#define KVTIER_BACKEND_CPU_CPU_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/sharded_forward.h"
#include "backend/kv_layout.h"
#include "common/thread_pool.h"
#include "model/config.h"

namespace kvtier {

class Checkpoint;

// Weights are loaded once at creation (cpu_weights.h). Activations live in scratch buffers sized
// for the largest batch seen so far (they grow, never shrink); the KV pool is allocated
// once by AllocateKvPool, so stepping never allocates KV memory.
class CpuBackend final : public Backend {
 public:
  // InvalidArgument when a tensor the config needs is missing or misshapen.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const Checkpoint& checkpoint,
                                                            const BackendOptions& options);

  std::string_view name() const override { return "cpu"; }
  // e.g. "cpu: Q8_0 weights, int8 dot products (avx512vnni)", "cpu-reference: fp32 weights";
  // with ", prefill through oneDNN bf16 matmul ..." once a step has run through oneDNN.
  std::string compute_path() const override;
  const KvLayout& kv_layout() const override { return layout_; }
  int64_t vocab_size() const override { return config_.vocab_size; }

  absl::Status AllocateKvPool(int64_t num_blocks) override;
  int64_t num_kv_blocks() const override { return num_blocks_; }

  absl::Status Forward(const ForwardBatch& batch, std::vector<float>* logits) override;
  // Host-resident blocks are read where they are (kv_block_view.h); with a grouped layout,
  // each group's through its own table (GroupKvTable::host).
  bool ReadsHostResidentKv() const override { return true; }

  absl::Status CopyBlocksToHost(std::span<const BlockCopy> copies) override;
  absl::Status CopyBlocksFromHost(std::span<const BlockCopy> copies) override;
  absl::Status CopyBlock(int32_t src_block, int32_t dst_block) override;

  int64_t device_bytes_in_use() const override;
  // Only the KV pool counts as "device" allocation; it is never reallocated, so always 0.
  int64_t allocations_after_init() const override { return 0; }

  // Times the activation scratch had to grow for a larger batch (informational).
  int64_t scratch_growths() const { return scratch_growths_; }
  const ModelConfig& config() const { return config_; }
  // For tests: block `block`'s layout_.BlockBytes() bytes (floats in the f32 layout; E4M3 codes then
  // fp32 scales for kv_dtype fp8, see kv_layout.h).
  const float* BlockData(int32_t block) const;

 private:
  // Activations of one forward, each (tokens, width) row-major.
  struct Scratch {
    int64_t capacity_tokens = 0;
    std::vector<float> hidden;     // (tokens, hidden): the residual stream
    std::vector<float> normed;     // (tokens, hidden): norm output, then o/down output
    std::vector<float> q;          // (tokens, q_dim)
    std::vector<float> k;          // (tokens, kv_dim)
    std::vector<float> v;          // (tokens, kv_dim)
    std::vector<float> attention;  // (tokens, q_dim)
    std::vector<float> gate;       // (tokens, intermediate)
    std::vector<float> up;         // (tokens, intermediate)
    std::vector<int32_t> tokens;   // (tokens)
    std::vector<int64_t> positions;  // (tokens)
    std::vector<uint8_t> activations;  // quantized rows of a product (cpu_matrix.h)
    int64_t Bytes() const;
  };

  // sharded: the tensor-parallel plan (options tensor_parallel > 1 or sharded_reduction),
  // holding the projections that `weights` then lacks; null for the plain forward.
  CpuBackend(const ModelConfig& config, CpuWeights weights, std::unique_ptr<ShardedForward> sharded,
             std::string compute_path, const BackendOptions& options);

  absl::Status ValidateBatch(const ForwardBatch& batch) const;
  absl::Status ValidateBlock(int32_t block, const std::string& what) const;
  void EnsureScratch(int64_t num_tokens);
  void RunLayer(int64_t layer, const ForwardBatch& batch, int64_t num_tokens);
  // RoPE of layer `layer` on x (rows, num_heads, head_dim) at the batch's positions.
  void ApplyLayerRope(int64_t layer, float* x, int64_t rows, int64_t num_heads) const;
  // q/k/v, attention and o_proj of the unsharded forward: scratch_.normed in, then out.
  void AttentionBlock(int64_t layer, const CpuLayerWeights& w, const ForwardBatch& batch, int64_t num_tokens);
  // The MLP of layer `layer`: dense (sharded or not), or its experts (cpu_moe.h).
  void Mlp(int64_t layer, const CpuLayerWeights& w, const ForwardBatch& batch, int64_t num_tokens);
  void DenseMlp(const CpuLayerWeights& w, int64_t num_tokens);
  // The sharded plan's view of the scratch: the norm's output in scratch_.normed, and out.
  ShardedLayerIo ShardedIo(const ForwardBatch& batch, int64_t num_tokens);
  void ComputeLogits(const ForwardBatch& batch, std::vector<float>* logits);

  const ModelConfig config_;
  const CpuWeights weights_;
  std::unique_ptr<ShardedForward> sharded_;  // the tensor-parallel plan, or null
  const KvGrouping grouping_;                 // layer groups (kv_grouping.h), or not enabled
  KvLayout layout_;                           // with grouping_, a block holds one group's layers
  std::vector<float> inv_freq_;  // (head_dim / 2); LongRoPE's short factors
  std::vector<float> local_inv_freq_;  // (head_dim / 2): Gemma 3's sliding layers, else empty
  std::vector<float> long_inv_freq_;   // (head_dim / 2): LongRoPE's long factors, else empty
  std::unique_ptr<ThreadPool> pool_;
  std::string compute_path_;
  // What compute_path() adds once a step has taken oneDNN (onednn_bf16.h); empty when no
  // matrix of this model ever would.
  std::string onednn_path_;
  std::atomic<bool> onednn_ran_{false};

  float* MutableBlockData(int32_t block);
  std::unique_ptr<float[]> kv_pool_;  // num_blocks_ x layout_.BlockBytes() bytes
  int64_t num_blocks_ = 0;

  Scratch scratch_;
  CpuMoeScratch moe_scratch_;  // mixture-of-experts layers only
  int64_t scratch_growths_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_CPU_BACKEND_H_
