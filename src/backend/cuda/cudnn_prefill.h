// CudnnPrefill: a step's prefill attention on cuDNN's fused attention (CudnnAttention), each
// chunk's K and V of the layer first gathered from the paged pool into contiguous bf16
// scratch (KvGather; fp8 KV dequantized there), or with Options::fp8_attention (fp8 KV) into
// E4M3 codes at one scale per side, the chunk's queries quantized likewise, for cuDNN's fp8
// attention (attention_fp8_inputs.h), whose E4M3 output is dequantized into the step's bf16
// rows. The scratch — K and V for the longest context, the fp8 queries and output of the
// longest chunk, and cuDNN's workspace — is allocated once at Create through the
// DeviceMemoryAccount, inside gpu_mem_limit; chunks run one after another on the compute
// stream, so one scratch serves them all. A step whose chunk cuDNN refuses (its plan does not
// finalize, wants more workspace, or the context exceeds the scratch) runs on the backend's
// own kernel instead, and the first reason is kept for compute_path. bf16 activations.
// Stepping: one thread (the backend's); Describe: any thread.
#ifndef KVTIER_BACKEND_CUDA_CUDNN_PREFILL_H_
#define KVTIER_BACKEND_CUDA_CUDNN_PREFILL_H_

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "backend/cuda/attention_fp8_inputs.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/cudnn_library.h"
#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/prefill_attention.h"

namespace kvtier::cuda {

class CudnnPrefill {
 public:
  // cuDNN's workspace, shared by every plan; a plan wanting more is refused.
  static constexpr int64_t kWorkspaceBytes = 32 << 20;

  struct Options {
    int32_t num_heads = 0;
    int32_t num_kv_heads = 0;
    int32_t head_dim = 0;
    int64_t max_context = 0;  // the longest context a chunk attends to (KV positions)
    // A step with a chunk shorter than min_chunk_tokens, or ending before position
    // min_context, runs on the backend's kernel (not a refusal): CudaOptions::prefill_cudnn
    // kFullChunks sets the step's token budget and four times it; 0 takes every step.
    int64_t min_chunk_tokens = 0;
    int64_t min_context = 0;
    // Q, K and V in E4M3 for cuDNN's fp8 attention; the pool must be fp8 (EnqueueLayer
    // refuses another). A chunk longer than max_chunk_tokens (the queries' scratch) goes to the
    // backend's kernel, as a refusal.
    bool fp8_attention = false;
    int64_t max_chunk_tokens = 0;
  };
  // Device bytes Create allocates: K and V of CudnnAttention::PlanKeys(max_context, max_context) rows
  // (bf16, or E4M3 codes), the workspace, and with fp8_attention the queries' and the
  // output's codes and the factors.
  static int64_t ScratchBytes(const Options& options);

  // InvalidArgument for a shape cuDNN's path does not take (head_dim 64 or 128, GQA);
  // CudnnAttention::Create's errors; ResourceExhausted when the scratch does not fit.
  static absl::StatusOr<std::unique_ptr<CudnnPrefill>> Create(const CudnnLibrary& library, const Options& options,
                                                              cudaStream_t stream, DeviceMemoryAccount& memory);
  ~CudnnPrefill();  // gives the scratch back to the account
  CudnnPrefill(const CudnnPrefill&) = delete;
  CudnnPrefill& operator=(const CudnnPrefill&) = delete;

  // Host only: true when every chunk of the step runs on cuDNN (none shorter than
  // min_chunk_tokens or min_context, plans prepared, contexts within the scratch); false sends
  // the step to the backend's kernel, counted as a step of short chunks or with its refusal's
  // reason.
  bool PrepareStep(std::span<const PrefillChunk> chunks);
  // Enqueues layer `layer` of the chunks PrepareStep accepted: out rows of each chunk from q
  // rows (step tokens, num_heads, head_dim) and the chunk's KV through kv's block tables.
  absl::Status EnqueueLayer(std::span<const PrefillChunk> chunks, int32_t layer, const bf16* q, bf16* out,
                            const PagedKv<bf16>& kv);

  // Builds the plans of a chunk of `chunk_tokens` queries over every key bucket from its own
  // length to max_context (a long prompt's chunks), so that no prompt waits for them: host
  // time at creation, tens of milliseconds a plan. A shape cuDNN refuses is remembered and
  // its steps run on the backend's kernel; not an error.
  void BuildPlansForChunks(int64_t chunk_tokens);
  // Whether cuDNN builds the plan of one chunk of chunk_tokens queries over as many keys (its
  // message where it does not): with fp8_attention, whether this cuDNN and GPU take the fp8
  // graph at all.
  absl::Status CheckPlan(int64_t chunk_tokens);
  // "cudnn 9.19.0 (3 plans built in 0.41 s)" when every prefill step so far ran on it; what
  // ran otherwise ("cudnn 9.19.0 and wgmma (...; 5 steps with chunks under 2048 tokens or
  // 8192 positions on wgmma)"), with the first reason cuDNN was refused. `own` names the backend's kernel.
  std::string Describe(const std::string& own) const;
  int64_t steps_on_cudnn() const { return steps_on_cudnn_.load(std::memory_order_relaxed); }
  int64_t steps_refused() const { return steps_refused_.load(std::memory_order_relaxed); }
  int64_t steps_of_short_chunks() const { return steps_of_short_chunks_.load(std::memory_order_relaxed); }
  // Plans built so far (each shape once while it stays cached).
  int64_t plans_built() const { return attention_->plans_built(); }

 private:
  // The buffers Create allocated: cuDNN's workspace, K, V and (fp8_attention) the queries'
  // and the output's codes and the factors.
  struct Scratch {
    void* workspace = nullptr;
    void* k = nullptr;
    void* v = nullptr;
    uint8_t* q_codes = nullptr;
    uint8_t* o_codes = nullptr;
    Fp8AttentionFactors* factors = nullptr;
  };
  CudnnPrefill(const Options& options, cudaStream_t stream, std::unique_ptr<CudnnAttention> attention,
               const Scratch& scratch, DeviceMemoryAccount& memory)
      : options_(options), stream_(stream), attention_(std::move(attention)), scratch_(scratch), memory_(memory) {}
  absl::Status EnqueueChunk(const PrefillChunk& c, int32_t layer, const bf16* q, bf16* out, const PagedKv<bf16>& kv);
  void Refuse(const std::string& reason);

  const Options options_;
  cudaStream_t stream_;
  std::unique_ptr<CudnnAttention> attention_;
  // K and V: (PlanKeys(max_context, max_context), num_kv_heads, head_dim) bf16 or codes; the
  // queries' and the output's codes (max_chunk_tokens, num_heads, head_dim); all the
  // account's.
  Scratch scratch_;
  DeviceMemoryAccount& memory_;
  std::atomic<int64_t> steps_on_cudnn_{0};
  std::atomic<int64_t> steps_refused_{0};
  std::atomic<int64_t> steps_of_short_chunks_{0};
  mutable std::mutex mu_;
  std::string first_refusal_;  // guarded by mu_
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_CUDNN_PREFILL_H_
