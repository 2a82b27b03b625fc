// CudaBackend: the Llama-family forward on one NVIDIA GPU — 16-bit weights resident in the
// checkpoint's dtype (fp16 checkpoints stay fp16; bf16 and fp32 ones run in bf16) or fp8
// projections (cuda_weights.h), fused QKV and gate|up, cuBLAS GEMMs with fp32 accumulation,
// own kernels for the rest, paged KV in the same 16-bit dtype or, with kv_dtype fp8, E4M3
// codes + one fp32 scale per row (the CPU backend's layout and bytes; kv_fp8.cuh). One
// thread drives it at a time (Backend).
//
// It is assembled from parts, each in its own file (docs/CUDA_BACKEND.md):
// - KernelSelection: which kernels this GPU and model shape run;
// - CudaWeights: the weights, loaded (and with fp8, quantized) once;
// - Workspace: the step's device buffers, sized from StepCapacity;
// - StepPlanner: a piece of a batch -> the step's metadata and StepLaunch;
// - ForwardPass + Projections: the layer loop and the kernel choice per projection;
// - DecodeGraphCache: decode steps replayed as CUDA graphs;
// - HostKvStreamer: host-resident KV streamed into staging buffers layer by layer;
// - TierCopies: block copies between the KV pool and host memory, on the copy stream.
// The forward's entry points each describe their step (StepSpec, by value) and run it
// piece by piece (RunStep).
//
// Invariant: every device buffer is allocated by Create (weights, workspace sized for
// BackendOptions::max_tokens_per_step / max_sequences) or by AllocateKvPool (the pool),
// through the DeviceMemoryAccount, inside gpu_mem_limit; a step never allocates. A batch
// larger than the workspace is run as several sequential sub-steps (a long chunk is cut
// into consecutive pieces, split_batch.h), so any valid batch runs.
#ifndef KVTIER_BACKEND_CUDA_CUDA_BACKEND_H_
#define KVTIER_BACKEND_CUDA_CUDA_BACKEND_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "backend/cuda/attention_fork.h"
#include "backend/cuda/copy_stats_board.h"
#include "backend/cuda/cuda_weights.h"
#include "backend/cuda/cudnn_prefill.h"
#include "backend/cuda/decode_graph_cache.h"
#include "backend/cuda/device_kv_pool.h"
#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/device_sampler_chain.h"
#include "backend/cuda/forward_pass.h"
#include "backend/cuda/host_kv_streamer.h"
#include "backend/cuda/kernel_selection.h"
#include "backend/cuda/projections.h"
#include "backend/cuda/step_capacity.h"
#include "backend/cuda/step_planner.h"
#include "backend/cuda/step_spec.h"
#include "backend/cuda/tier_copies.h"
#include "backend/cuda/weight_loaders.h"
#include "backend/cuda/workspace.h"
#include "backend/kv_layout.h"
#include "model/config.h"

namespace kvtier {

class Checkpoint;

class CudaBackend final : public Backend {
 public:
  // Unavailable: no usable GPU or driver. Unimplemented: a shape the kernels do not support
  // (named). ResourceExhausted: weights + workspace over gpu_mem_limit_bytes or the card.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const Checkpoint& checkpoint,
                                                             const BackendOptions& options);
  // Same model shape with random weights generated on the device (benchmarks, tests), held
  // as `dtype` (kBF16 or kF16).
  static absl::StatusOr<std::unique_ptr<CudaBackend>> CreateWithRandomWeights(const ModelConfig& config,
                                                                              const BackendOptions& options,
                                                                              uint64_t seed,
                                                                              DType dtype = DType::kBF16);
  // The 16-bit dtype a checkpoint runs in: kF16 for fp16 weights (or an fp32 checkpoint
  // whose config says float16), else kBF16.
  static DType ComputeDTypeOf(const Checkpoint& checkpoint);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  // "cuda, prefill attention <what ran>": the backend's kernel (wgmma, mma or generic), or
  // cuDNN's (CudaOptions::prefill_cudnn), with why cuDNN was not used where it was asked for.
  std::string compute_path() const override;
  const KvLayout& kv_layout() const override { return layout_; }
  int64_t vocab_size() const override { return config_.vocab_size; }

  absl::Status AllocateKvPool(int64_t num_blocks) override;
  int64_t num_kv_blocks() const override { return pool_.num_blocks; }
  // Prefills of 512 and max_tokens_per_step tokens and one decode step per graph bucket,
  // all on the scratch block: loads the kernels (CUDA loads modules lazily, so the first
  // launch of each kernel in a process pays for loading it), lets cuBLAS settle on its
  // kernels and captures every decode graph.
  absl::Status WarmUp() override;

  absl::Status Forward(const ForwardBatch& batch, std::vector<float>* logits) override;
  // Forward, then greedy sampling on the GPU: one token id per chunk with need_logits (in
  // chunk order, lowest index on ties); only the ids are copied back.
  absl::Status ForwardGreedy(const ForwardBatch& batch, std::vector<int32_t>* token_ids) override;
  // Forward, then each row sampled on the GPU (cuda::SampleRows: top-k / top-p / temperature
  // by radix select, no sort); only the ids are copied back.
  absl::Status ForwardSampled(const ForwardBatch& batch, std::span<const RowSampling> rows,
                              std::vector<int32_t>* token_ids) override;
  // Forward, then the sampler chain on the GPU (DeviceSamplerChain: log-probabilities,
  // adjustments, samples); decode steps replay their graph of the forward alone. Batches
  // with scores (prompt log-probabilities, which read every position's logits) run the
  // chain on the host over Forward's logits instead (Backend's default).
  absl::Status ForwardAndSample(const ForwardBatch& batch, const SamplingBatch& sampling,
                                SamplingResult* result) override;

  // Tier copies (TierCopies): on the copy stream, timed by events.
  absl::Status CopyBlocksToHost(std::span<const BlockCopy> copies) override;
  absl::Status CopyBlocksFromHost(std::span<const BlockCopy> copies) override;
  // Host -> device copies; the host does not wait.
  absl::Status PrefetchBlocksFromHost(std::span<const BlockCopy> copies) override;
  // Marks the prefetches started so far; the next forward's first kernel waits for them on
  // the device (cudaStreamWaitEvent), never the host. Prefetches started after this call
  // (e.g. while the step is scheduled) overlap that forward.
  absl::Status WaitForPrefetches() override;
  BackendCopyStats copy_stats() const override { return stats_.Get(); }
  absl::Status CopyBlock(int32_t src_block, int32_t dst_block) override;
  // Async device -> host copies after the last forward; only WaitForCopies blocks the host
  // (counted as a stall).
  absl::StatusOr<int64_t> StartCopiesToHost(std::span<const BlockCopy> copies) override;
  absl::StatusOr<bool> CopiesDone(int64_t ticket) override;
  absl::Status WaitForCopies(int64_t ticket) override;

  int64_t device_bytes_in_use() const override { return memory_.bytes_in_use(); }
  // The device's free bytes (cudaMemGetInfo); 0 when they cannot be read.
  int64_t MemoryForKvPool() const override;
  int64_t allocations_after_init() const override { return memory_.allocations_after_init(); }
  DeviceMemoryStats device_memory() const override {
    return {memory_.runtime_share(), memory_.process_peak_bytes(), memory_.measured_per_process()};
  }

  // Page-locked host memory for the host KV tier (fast, asynchronous copies).
  absl::StatusOr<void*> AllocateHostMemory(size_t bytes) override;
  void FreeHostMemory(void* ptr) override;
  // The host tier is pinned in place (cudaHostRegister), a chunk at a time (Backend).
  bool PinsHostMemory() const override { return true; }
  absl::Status PinHostMemory(void* ptr, size_t bytes) override;
  void UnpinHostMemory(void* ptr, size_t bytes) override;

  // Host-resident KV (HostKvStreamer, docs/LONG_CONTEXT.md): on when
  // CudaOptions::host_kv_stream_tokens > 0, the fast attention kernels run and the device
  // can read mapped host memory at its host address, and the KV is not in layer groups (the
  // streamer stages one layer index of every host block; a group's would need its own): the
  // engine then runs only sequences that fit the device tier.
  bool ReadsHostResidentKv() const override { return host_kv_->slots() > 0 && !options_.kv_grouping.enabled(); }
  std::string WhyNoHostResidentKv() const override {
    return cuda::HostKvStreamer::WhyNotRead(HostKvOptions(), host_kv_->slots() > 0, options_.kv_grouping.enabled());
  }
  int64_t MaxHostResidentBlocks() const override { return host_kv_->slots(); }

  const ModelConfig& config() const { return config_; }
  // Decode steps replayed as CUDA graphs (on from CudaOptions::decode_graphs at Create);
  // tests and benchmarks turn them off and read the replay count.
  cuda::DecodeGraphCache& decode_graphs() { return graphs_; }
  // The config runs on DecodeAttention + PrefillAttention (else the generic kernel).
  bool fast_attention() const { return kernels_.fast_attention; }
  // fp8 weights: whether prefill-sized steps run their projections W8A8 (cuBLASLt).
  bool uses_w8a8() const { return projections_->has_fp8_gemm(); }
  // Device pointer of block `block` (KvLayout bytes); for tests.
  const void* BlockDevicePointer(int32_t block) const { return pool_.Block(block); }

 private:
  CudaBackend(const ModelConfig& config, const BackendOptions& options, DType dtype);
  // fp8_loader: how fp8 projections load (options.weight_dtype fp8); null quantizes on the
  // device what `loader` writes in the compute dtype.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> CreateImpl(const ModelConfig& config,
                                                                 const BackendOptions& options, DType dtype,
                                                                 const cuda::WeightLoader& loader,
                                                                 const cuda::Fp8WeightLoader* fp8_loader = nullptr);

  // Init and its steps, in order (cuda_backend.cc).
  absl::Status Init(const cuda::WeightLoader& loader, const cuda::Fp8WeightLoader* fp8_loader);
  absl::Status CreateStreams();
  // Weights + workspace within gpu_mem_limit and the device's free memory.
  absl::Status CheckFits() const;
  // fp8 weights: the W8A8 kernels and their activation buffers, where this GPU has them.
  absl::Status InitW8A8();
  // fp8 weights with fp8 activations (cuda.fp8_activations), which the fp8 kernels compute in
  // bf16 only: InitW8A8 runs, and the MoE experts' library path takes fp8 experts.
  bool WantsW8A8() const;
  // CudaOptions::prefill_cudnn: cuDNN loaded and its scratch allocated, or why not (the
  // backend's kernel then runs every prefill; not an error).
  absl::Status InitCudnnPrefill();
  cuda::CudnnPrefill::Options CudnnPrefillOptions() const;
  // CudnnPrefill with CudnnPrefillOptions, or without fp8_attention where cuDNN refuses its
  // fp8 plan (cudnn_fp8_refusal_ says why).
  absl::StatusOr<std::unique_ptr<cuda::CudnnPrefill>> CreateCudnnPrefill(const cuda::CudnnLibrary& library);
  // Warms up against a one-block stand-in pool, then measures the runtime share
  // (cuda_warm_up.cc); the last step of Init.
  absl::Status MeasureWarmRuntime();
  int64_t WeightBytes() const;
  int64_t WorkspaceBytes() const;
  size_t MetaCapacity() const;
  cuda::HostKvStreamer::Options HostKvOptions() const;

  // Stepping (cuda_backend_step.cc).
  absl::Status ValidateBatch(const ForwardBatch& batch) const;
  // A chunk of a grouped KV layout: its group tables (ValidateGroupTables), none with
  // host-resident blocks (Unimplemented); adds the blocks it writes to *written.
  absl::Status ValidateGroupedChunk(const SequenceChunk& chunk, size_t c, absl::flat_hash_set<int32_t>* written) const;
  // Runs the batch whole when it fits the workspace, else piece by piece (SplitBatch).
  template <typename Fn>
  absl::Status RunAll(const ForwardBatch& batch, Fn&& run_piece);
  // Runs one piece (fits the workspace) as `spec` says; returns the ids picked on the
  // device (spec.picks_ids(); empty otherwise), valid until the next step.
  absl::StatusOr<std::span<const int32_t>> RunStep(const ForwardBatch& piece, cuda::StepSpec spec);
  // RunStep for a spec that picks ids, appending them to *ids.
  absl::Status RunStepForIds(const ForwardBatch& piece, const cuda::StepSpec& spec, std::vector<int32_t>* ids);

  const ModelConfig config_;
  const BackendOptions options_;
  const DType compute_dtype_;  // kBF16 or kF16; layout_.dtype unless kv_dtype fp8
  const KvLayout layout_;
  const cuda::StepCapacity capacity_;
  cuda::DeviceMemoryAccount memory_;  // every device buffer, inside gpu_mem_limit
  cuda::CopyStatsBoard stats_;
  cuda::DeviceKvPool pool_;
  cudaStream_t stream_ = nullptr;  // compute
  cublasHandle_t cublas_ = nullptr;
  cuda::KernelSelection kernels_;
  cuda::CudaWeights weights_;
  cuda::Workspace ws_;
  cuda::DecodeGraphCache graphs_;
  std::unique_ptr<cuda::TierCopies> copies_;
  std::unique_ptr<cuda::Projections> projections_;
  std::unique_ptr<cuda::StepPlanner> planner_;
  std::unique_ptr<DeviceSamplerChain> chain_;  // the sampler chain's buffers
  std::unique_ptr<cuda::HostKvStreamer> host_kv_;
  std::unique_ptr<cuda::ForwardPass> forward_;
  std::unique_ptr<cuda::AttentionFork> attention_fork_;  // CudaOptions::overlap_attention
  std::unique_ptr<cuda::CudnnPrefill> cudnn_;  // CudaOptions::prefill_cudnn, where cuDNN is usable
  std::string cudnn_unavailable_;              // why not, where it was asked for; set by Init
  std::string cudnn_fp8_refusal_;              // why cuDNN's fp8 attention is not used with fp8 KV
};

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CUDA_CUDA_BACKEND_H_
