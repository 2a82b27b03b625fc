// CudaBackend: the Llama-family forward on one NVIDIA GPU — 16-bit weights resident in the
// checkpoint's dtype (fp16 checkpoints stay fp16; bf16 and fp32 ones run in bf16), fused QKV
// and gate|up, cuBLAS GEMMs with fp32 accumulation, own kernels for the rest, paged KV in
// the same 16-bit dtype or, with kv_dtype fp8, E4M3 codes + one fp32 scale per row (the CPU
// backend's layout and bytes; kv_fp8.cuh). One thread drives it at a time (Backend).
//
// weight_dtype fp8: the four projections of every layer (qkv, o, gate|up, down) are held as
// E4M3 codes with one fp32 scale per output channel (the CPU backend's rule, same bytes);
// decode steps of 1-2 rows read the codes directly (GemvFp8), steps of 3-64 rows run them
// through the tensor cores (SkinnyFp8, W8A16 with codes converted in registers), larger
// steps (prefill) dequantize each projection into one 16-bit scratch matrix and run cuBLAS. Embeddings, lm_head and
// the norms stay 16-bit / fp32: the embedding is a gather (one row per token, no bandwidth
// to save), the lm_head sets every logit (its error is not averaged away by later layers),
// and the norms are vectors.
//
// Invariant: every device buffer is allocated by Create (weights, workspace sized for
// BackendOptions::max_tokens_per_step / max_sequences) or by AllocateKvPool (the pool);
// a step never allocates. A batch larger than the workspace is run as several sequential
// sub-steps (a long chunk is cut into consecutive pieces), so any valid batch runs.
#ifndef KVTIER_BACKEND_CUDA_CUDA_BACKEND_H_
#define KVTIER_BACKEND_CUDA_CUDA_BACKEND_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "backend/cuda/attention_plan.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/device_sampler_chain.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/host_kv_stream.h"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/kv_layout.h"
#include "model/config.h"

namespace kvtier {

class Checkpoint;

namespace cuda {

// Rounds a byte count up to the 256-byte alignment every step-metadata array keeps.
constexpr size_t AlignMetaBytes(size_t x) { return (x + 255) & ~size_t{255}; }

// Splits a batch into pieces of at most max_tokens tokens and max_chunks chunks, in order;
// a chunk cut in two keeps its block table, the later piece starting where the earlier
// ended, and only the last piece keeps need_logits. A piece names at most max_host_blocks
// host-resident blocks in all (a chunk with more is left whole, in a piece of its own).
// Pure host code.
std::vector<ForwardBatch> SplitBatch(const ForwardBatch& batch, int64_t max_tokens,
                                     int64_t max_chunks, int64_t max_host_blocks = INT64_MAX);

}  // namespace cuda

class CudaBackend final : public Backend {
 public:
  // Unavailable: no usable GPU or driver. Unimplemented: a shape the kernels do not support
  // (named). ResourceExhausted: weights + workspace over gpu_mem_limit_bytes or the card.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const Checkpoint& checkpoint,
                                                             const BackendOptions& options);
  // Same model shape with random weights generated on the device (benchmarks, tests), held
  // as `dtype` (kBF16 or kF16).
  static absl::StatusOr<std::unique_ptr<CudaBackend>> CreateWithRandomWeights(
      const ModelConfig& config, const BackendOptions& options, uint64_t seed,
      DType dtype = DType::kBF16);
  // The 16-bit dtype a checkpoint runs in: kF16 for fp16 weights (or an fp32 checkpoint
  // whose config says float16), else kBF16.
  static DType ComputeDTypeOf(const Checkpoint& checkpoint);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  const KvLayout& kv_layout() const override { return layout_; }
  int64_t vocab_size() const override { return config_.vocab_size; }

  absl::Status AllocateKvPool(int64_t num_blocks) override;
  int64_t num_kv_blocks() const override { return num_blocks_; }
  // Prefills of 512 and max_tokens_per_step tokens and one decode step per graph bucket,
  // all on the scratch block: loads the kernels (CUDA loads modules lazily, which made the
  // first forward of a process much slower than the next: NOTES.md, session 4), lets
  // cuBLAS settle on its kernels and captures every decode graph.
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

  absl::Status CopyBlocksToHost(std::span<const BlockCopy> copies) override;
  absl::Status CopyBlocksFromHost(std::span<const BlockCopy> copies) override;
  // Host -> device copies on the copy stream, timed by events; the host does not wait.
  absl::Status PrefetchBlocksFromHost(std::span<const BlockCopy> copies) override;
  // Marks the prefetches started so far; the next forward's first kernel waits for them on
  // the device (cudaStreamWaitEvent), never the host. Prefetches started after this call
  // (e.g. while the step is scheduled) overlap that forward.
  absl::Status WaitForPrefetches() override;
  BackendCopyStats copy_stats() const override;
  absl::Status CopyBlock(int32_t src_block, int32_t dst_block) override;
  // Async device -> host copies on the copy stream (cuda_backend_copies.cc): after the last
  // forward, timed by pool events; only WaitForCopies blocks the host (counted as a stall).
  absl::StatusOr<int64_t> StartCopiesToHost(std::span<const BlockCopy> copies) override;
  absl::StatusOr<bool> CopiesDone(int64_t ticket) override;
  absl::Status WaitForCopies(int64_t ticket) override;

 private:
  struct AsyncCopyBatch {
    int64_t ticket = 0;
    cudaEvent_t start = nullptr, end = nullptr;
    int64_t bytes = 0;
  };
  // Folds landed async batches (in order) into copy_stats_ and returns their events.
  absl::Status HarvestAsyncCopies();
  std::deque<AsyncCopyBatch> async_out_in_flight_;
  int64_t next_async_ticket_ = 1;
  int64_t async_done_through_ = 0;

 public:

  int64_t device_bytes_in_use() const override { return memory_.bytes_in_use(); }
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

  // Host-resident KV (cuda_host_kv.cc, docs/LONG_CONTEXT.md): read by streaming each
  // layer's slices into a device staging buffer while the previous layer computes; on when
  // CudaOptions::host_kv_stream_tokens > 0, the fast attention kernels run and the device
  // can read mapped host memory at its host address.
  bool ReadsHostResidentKv() const override { return host_kv_slots_ > 0; }
  int64_t MaxHostResidentBlocks() const override { return host_kv_slots_; }

  const ModelConfig& config() const { return config_; }
  // Decode steps replayed as CUDA graphs (from CudaOptions::decode_graphs at Create); off
  // runs every step eagerly (tests compare the two; benchmarks measure the gain).
  void SetDecodeGraphs(bool on) { graphs_enabled_ = on; }
  bool decode_graphs() const { return graphs_enabled_; }
  // Why decode graphs were turned off after a failed capture ("" if they were not).
  const std::string& graph_error() const { return graph_error_; }
  // The config runs on DecodeAttention + PrefillAttention (else the generic kernel): its
  // shape fits them and CudaOptions::fast_attention allows them.
  bool fast_attention() const { return fast_attention_; }
  int64_t graph_replays() const { return graph_replays_; }
  // fp8 weights: whether prefill-sized steps run their projections W8A8 (fp8_gemm_).
  bool uses_w8a8() const { return fp8_gemm_ != nullptr; }
  // Device pointer of block `block` (KvLayout bytes); for tests.
  const void* BlockDevicePointer(int32_t block) const;

  // name, expected element count, device destination, dtype to store (kF32 or the
  // backend's 16-bit dtype).
  using WeightLoader =
      std::function<absl::Status(const std::string&, int64_t, void*, DType)>;
  // weight_dtype fp8: name, rows, cols, device codes (rows, cols) and scales (rows) to fill
  // with the per-output-channel quantization, and a 16-bit device staging buffer of at least
  // rows * cols elements the loader may use.
  using Fp8WeightLoader =
      std::function<absl::Status(const std::string&, int64_t, int64_t, uint8_t*, float*, void*)>;

 private:
  // 16-bit device arrays (weights, activations, 16-bit KV) hold elements of compute_dtype_;
  // the forward views them as cuda::bf16 or cuda::f16 (EnqueueForwardAs).
  using Raw16 = uint16_t;
  // An fp8 projection: E4M3 codes (out, in) and one scale per output row.
  struct Fp8Matrix {
    uint8_t* codes = nullptr;
    float* scales = nullptr;
  };
  struct LayerWeights {
    Raw16* qkv = nullptr;           // (q_dim + 2*kv_dim, hidden)
    float* qkv_bias = nullptr;      // (q_dim + 2*kv_dim) or null
    float* q_norm = nullptr;        // (head_dim) or null
    float* k_norm = nullptr;        // (head_dim) or null
    Raw16* o = nullptr;             // (hidden, q_dim)
    Raw16* gate_up = nullptr;       // (2*intermediate, hidden): gate rows then up rows
    Raw16* down = nullptr;          // (hidden, intermediate)
    float* input_norm = nullptr;    // (hidden)
    float* post_norm = nullptr;     // (hidden)
    // weight_dtype fp8: the projections above as codes + scales (their Raw16 are null).
    Fp8Matrix qkv8, o8, gate_up8, down8;
  };
  // Activations of one step, each (tokens, width) row-major, sized for max_tokens_.
  struct Workspace {
    float* residual = nullptr;      // (tokens, hidden) fp32 residual stream
    Raw16* normed = nullptr;        // (tokens, hidden)
    Raw16* wide = nullptr;          // (tokens, max(qkv width, 2*intermediate)): qkv, gate|up
    Raw16* q = nullptr;             // (tokens, q_dim) after norm + RoPE
    Raw16* attn = nullptr;          // (tokens, q_dim)
    Raw16* proj = nullptr;          // (tokens, hidden): o_proj / down_proj output
    Raw16* act = nullptr;           // (tokens, intermediate)
    float* logits = nullptr;        // (logit rows, vocab)
    int32_t* token_ids = nullptr;   // (logit rows) greedy result
    void* argmax_scratch = nullptr;  // cuda::ArgmaxScratchBytes(logit rows)
    uint32_t* masks = nullptr;      // (logit rows, ceil(vocab / 32)) a step's grammar masks
    float* partial_out = nullptr;   // (slots, num_heads, head_dim)
    float* partial_ml = nullptr;    // (slots, num_heads, 2)
    void* cublas = nullptr;         // cuBLAS workspace (cuBLASLt's too: the same stream, in turn)
    // fp8 weights with Fp8Gemm: the activations of a W8A8 projection, quantized per token.
    uint8_t* x8 = nullptr;          // (tokens, max(hidden, q_dim, intermediate)) E4M3 codes
    float* x8_scales = nullptr;     // (tokens)
    uint8_t* meta = nullptr;        // per-step metadata (device copy of meta_host_)
  };
  // Offsets of the per-step metadata inside meta_host_ / Workspace::meta. The block-table
  // indices come last: a step copies only the bytes it uses, and a captured decode graph,
  // whose arrays sit at fixed offsets for its batch bucket, reads tables of any length.
  struct MetaLayout {
    size_t ids = 0, pos = 0, chunk = 0, rows = 0, logit_rows = 0, indptr = 0, num_splits = 0,
           partial_base = 0, items = 0, tiles = 0, sampling = 0, mask_slots = 0, host_blocks = 0, indices = 0,
           bytes = 0;
  };
  // How a step's attention runs: decode rows on DecodeAttention and multi-token chunks on
  // PrefillAttention (kFast), or everything on the generic PagedAttention (kGeneric, for
  // shapes the fast kernels do not support).
  enum class AttentionPath { kFast, kGeneric };
  // Everything EnqueueForward needs; a pure function of the batch bucket for graph steps.
  struct StepLaunch {
    MetaLayout meta;
    int32_t rows = 0;          // step tokens incl. padding
    int32_t logit_rows = 0;
    int32_t decode_rows = 0;   // kFast: 1-token chunks (meta.rows)
    int32_t decode_splits = 1;
    int32_t prefill_tiles = 0;  // kFast: tiles at meta.tiles
    AttentionPath path = AttentionPath::kFast;
    bool greedy = false;       // ids picked on the device (argmax, or sampled), to ids_host_
    bool sampled = false;      // SampleRows with meta.sampling instead of the argmax
    // Grammar masks of some logits rows (never in a graph step): slots first_slot ..
    // first_slot + num_slots of `masks` go to the device, meta.mask_slots maps the rows.
    const TokenMasks* masks = nullptr;
    int32_t first_slot = 0, num_slots = 0;
    // Host-resident blocks the step streams (meta.host_blocks: their host addresses, in
    // staging-slot order; block-table entry -1 - s names slot s).
    int32_t host_blocks = 0;
  };

  CudaBackend(const ModelConfig& config, const BackendOptions& options, DType dtype);
  // fp8_loader: how fp8 projections load (options.weight_dtype fp8); null quantizes on the
  // device what `loader` writes in the compute dtype.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> CreateImpl(const ModelConfig& config,
                                                                 const BackendOptions& options,
                                                                 DType dtype,
                                                                 const WeightLoader& loader,
                                                                 const Fp8WeightLoader* fp8_loader = nullptr);
  absl::Status Init(const WeightLoader& loader, const Fp8WeightLoader* fp8_loader);
  // Largest fused projection (elements): the fp8 dequantization scratch.
  int64_t MaxProjectionElements() const;
  int64_t SkinnyGemmBytes() const;
  // Floats of SkinnyFp8 partials the largest projection needs at its largest row count.
  int64_t Fp8PartialFloats() const;
  absl::StatusOr<void*> DeviceAlloc(size_t bytes, const char* what) { return memory_.Allocate(bytes, what); }
  int64_t WorkspaceBytes() const;
  int64_t WeightBytes() const;
  absl::Status ValidateBatch(const ForwardBatch& batch) const;
  absl::Status ValidateBlock(int32_t block) const;
  // Chunk c's host-resident blocks: streaming is on, they fit the staging buffers, and they
  // are full blocks before every position the chunk writes (cuda_host_kv.cc).
  absl::Status ValidateHostKv(const SequenceChunk& chunk, size_t c) const;
  // The sampler chain's share of one piece: the samples (indices into batch->samples,
  // ordered by row) reading its logits rows, which are the step's rows from first_row on.
  struct ChainPiece {
    const SamplingBatch* batch = nullptr;
    std::span<const int32_t> samples;
    int64_t first_row = 0;
    SamplingResult* result = nullptr;
  };
  // Runs one piece (fits the workspace); leaves logits or ids on the host. With token_ids,
  // greedy ids unless `sampling` (one row per logits row of the piece) is given. With
  // `chain` (and neither logits nor token_ids), the sampler chain's results. `masks` (rows
  // of the whole batch; the piece's start at first_row) are applied before picking.
  absl::Status RunStep(const ForwardBatch& piece, std::vector<float>* logits,
                       std::vector<int32_t>* token_ids,
                       std::span<const RowSampling> sampling = {}, const TokenMasks* masks = nullptr,
                       size_t first_row = 0, const ChainPiece* chain = nullptr);
  // allow_gemv false: always cuBLAS (a weight another kernel just wrote: the GEMV reads its
  // first weights before the PDL wait).
  template <typename T>
  absl::Status Gemm(const T* x, const T* w, int rows, int k, int n, void* out, bool out_f32,
                    bool allow_gemv = true);
  // out (rows, n) T = x (rows, k) times a projection: the 16-bit weight w16, or with fp8
  // weights w8 (GemvFp8 for decode rows, else dequantized into fp8_scratch_ + cuBLAS).
  template <typename T>
  absl::Status Project(const T* x, const Raw16* w16, const Fp8Matrix& w8, int rows, int k, int n, void* out);
  // Where a step of `rows` tokens runs its projections W8A8 (fp8 weights and activations):
  // not at all, on the skinny kernel (decode batches), or on cuBLASLt (fp8_gemm_, larger).
  enum class W8A8Path { kNone, kSkinny, kLibrary };
  W8A8Path W8A8PathFor(int rows) const;
  // out (rows, n) T = the per-token E4M3 activations in ws_.x8 / ws_.x8_scales times the fp8
  // projection w8, on the tensor cores.
  template <typename T>
  absl::Status ProjectW8A8(W8A8Path path, const Fp8Matrix& w8, int rows, int k, int n, void* out);
  // Whether a rows x k by n projection (weights w: 16-bit or fp8 codes) runs on SkinnyGemm,
  // and on which pipeline.
  template <typename T>
  bool UseSkinnyGemm(int rows, int k, int n, const void* x, const void* w, bool fp8) const;
  cuda::SkinnyPipeline SkinnyPipelineFor(bool fp8) const;
  // Timing events come from a pool created at Init (no creation while stepping).
  absl::StatusOr<cudaEvent_t> TakeEvent();
  // Folds finished prefetch / stall timings into copy_stats_; `block` waits for all.
  absl::Status HarvestTimings(bool block);
  // Enqueues the pending prefetch wait (if any) on the compute stream.
  absl::Status ApplyPrefetchWait();
  absl::Status TimedSyncCopies(std::span<const BlockCopy> copies, cudaMemcpyKind kind);
  template <typename Fn>
  absl::Status RunAll(const ForwardBatch& batch, Fn&& run_piece);
  // Writes the step's metadata into meta_host_ (padding chunks up to `padded_chunks` with
  // one-token chunks on the scratch block) and returns how to launch it.
  absl::StatusOr<StepLaunch> PrepareStep(const ForwardBatch& piece, int64_t padded_chunks,
                                         bool greedy, std::span<const RowSampling> sampling,
                                         const TokenMasks* masks = nullptr, size_t first_row = 0);
  // Enqueues the forward of a prepared step on stream_ (capturable: no host sync inside);
  // logits go to logits_out (host) unless the step is greedy.
  absl::Status EnqueueForward(const StepLaunch& step, float* logits_out);
  template <typename T>
  absl::Status EnqueueForwardAs(const StepLaunch& step, float* logits_out);
  // The instantiated decode graph of a batch bucket, captured on first use.
  absl::StatusOr<cudaGraphExec_t> DecodeGraph(const StepLaunch& step);
  void DropDecodeGraphs();
  // Warms up against a one-block stand-in pool, then measures the runtime share
  // (cuda_warm_up.cc); the last step of Init.
  absl::Status MeasureWarmRuntime();
  // fp8 weights: fp8_gemm_ and the activation buffers, where cuBLASLt has the kernels.
  absl::Status InitW8A8(size_t lt_workspace_bytes);
  // Smallest graph bucket >= chunks, or 0 when no graph covers it.
  int64_t GraphBucket(int64_t chunks) const;

  // Host-resident KV streaming (cuda_host_kv.cc).
  // Slots per staging buffer for CudaOptions::host_kv_stream_tokens (0 when streaming is
  // off for this config), and the bytes of both buffers.
  int64_t HostKvSlotsWanted() const;
  int64_t HostKvStagingBytes() const;
  // Allocates the staging buffers, stream and events (Init); leaves host_kv_slots_ 0 when
  // streaming is off.
  absl::Status InitHostKvStaging();
  // Times pinned host -> device copies into the staging area (copy_stats_).
  absl::Status MeasureHostLink();
  // Times each way of gathering host-resident KV on this link and keeps the fastest in
  // gather_shape_ (cuda_host_kv_tuning.cc).
  absl::Status ChooseHostKvGather();
  // Counts a step's streamed bytes in copy_stats_.
  void CountHostKvStep(const StepLaunch& step);
  // Before the layer loop: the gather of layer 0. At layer `layer`, before its attention:
  // the gather of layer + 1 (once the buffer it overwrites is free), then the compute
  // stream's wait for this layer's slices; returns the staging buffer to read.
  absl::Status StageFirstHostKvLayer(const StepLaunch& step);
  absl::StatusOr<const void*> StageHostKvLayer(const StepLaunch& step, int64_t layer);
  // After layer `layer`'s attention: its buffer may be overwritten.
  absl::Status ReleaseHostKvLayer(const StepLaunch& step, int64_t layer);
  // The byte ranges of a block holding `layer` (one for 16-bit KV; codes and scales for fp8).
  struct HostKvLayerSlice {
    cuda::HostKvSegment segments[2];
    int32_t num_segments = 1;
  };
  HostKvLayerSlice HostKvLayerSegments(int64_t layer) const;
  // Enqueues the gather of `layer` into staging buffer `buffer` and records its landing.
  absl::Status GatherHostKvLayer(const StepLaunch& step, int64_t layer, int buffer);
  cuda::HostKvGatherShape gather_shape_;
  cuda::HostKvCopyBatch host_kv_copy_batch_;  // kCopyBatch's argument arrays
  cuda::HostKvAuxStream stage_aux_;           // kSplit's second stream
  int64_t host_kv_slots_ = 0;          // per staging buffer (0: streaming off)
  size_t host_kv_slice_bytes_ = 0;     // one layer of one block
  void* host_kv_staged_[2] = {nullptr, nullptr};
  cudaStream_t stage_stream_ = nullptr;
  cudaEvent_t stage_meta_ready_ = nullptr;
  cudaEvent_t stage_landed_[2] = {nullptr, nullptr};
  cudaEvent_t stage_free_[2] = {nullptr, nullptr};

  const ModelConfig config_;
  const BackendOptions options_;
  KvLayout layout_;
  int64_t max_tokens_ = 0;     // tokens per sub-step
  int64_t max_chunks_ = 0;     // chunks (and logit rows) per sub-step
  int64_t partial_slots_ = 0;
  int64_t max_table_entries_ = 0;
  int64_t max_items_ = 0;
  cuda::AttentionPlanOptions plan_options_;

  cudaStream_t stream_ = nullptr;       // compute
  cudaStream_t copy_stream_ = nullptr;  // tier moves
  cudaEvent_t compute_done_ = nullptr;
  // Tier-copy timing (all events timing-enabled, from event_pool_).
  struct CopyTiming {
    cudaEvent_t start = nullptr, end = nullptr;
    int64_t bytes = 0;
  };
  struct StallTiming {
    cudaEvent_t ready = nullptr;  // compute stream reached the wait
    cudaEvent_t mark = nullptr;   // copy stream finished the prefetches waited for
  };
  std::vector<cudaEvent_t> all_events_;
  std::vector<cudaEvent_t> event_pool_;
  std::deque<CopyTiming> prefetches_in_flight_;
  std::deque<StallTiming> stalls_in_flight_;
  cudaEvent_t pending_wait_mark_ = nullptr;  // set by WaitForPrefetches, used by the next forward
  bool prefetch_since_wait_ = false;
  cudaEvent_t sync_start_ = nullptr, sync_end_ = nullptr;
  mutable std::mutex stats_mu_;
  BackendCopyStats copy_stats_;
  cublasHandle_t cublas_ = nullptr;

  cuda::DeviceMemoryAccount memory_;  // every device buffer, inside gpu_mem_limit

  DType compute_dtype_ = DType::kBF16;  // kBF16 or kF16; layout_.dtype unless kv_dtype fp8
  bool fp8_weights_ = false;       // options.weight_dtype fp8: LayerWeights' *8 matrices
  Raw16* fp8_scratch_ = nullptr;   // (MaxProjectionElements) load staging, prefill dequant
  float* fp8_partial_ = nullptr;   // SkinnyFp8's split partials (Fp8PartialFloats)
  // fp8 x fp8 projections of steps above kW8A8MinRows rows (null: cuBLASLt offers none here;
  // those steps then dequantize into fp8_scratch_, which is kept only for that).
  std::unique_ptr<cuda::Fp8Gemm> fp8_gemm_;
  // SkinnyGemm (off where the GPU is not compute capability 9.0 or options turn it off) and
  // its workspace (SkinnyGemmBytes, zeroed once at Init).
  int32_t skinny_mode_ = 0;        // CudaOptions::skinny_gemm, 0 where unavailable
  void* skinny_workspace_ = nullptr;
  Raw16* embed_ = nullptr;         // (vocab, hidden)
  Raw16* lm_head_ = nullptr;       // (vocab, hidden); == embed_ when tied
  float* final_norm_ = nullptr;    // (hidden)
  float* inv_freq_ = nullptr;      // (head_dim / 2)
  std::vector<LayerWeights> layers_;
  Workspace ws_;
  uint8_t* meta_host_ = nullptr;   // pinned, MetaLayout-capacity bytes
  size_t meta_capacity_ = 0;

  Raw16* kv_pool_ = nullptr;       // (num_blocks_ + 1) blocks of layout_.BlockBytes() bytes
  int64_t num_blocks_ = 0;

  int32_t scratch_block_ = -1;  // pool block past num_blocks_: KV of graph padding rows
  bool fast_attention_ = false;  // the config fits DecodeAttention + PrefillAttention
  bool graphs_enabled_ = true;   // CudaOptions::decode_graphs, then SetDecodeGraphs
  int32_t sm_count_ = 0;
  int32_t prefill_tile_tokens_ = 0;
  std::string graph_error_;      // why graphs were turned off, when a capture failed
  int64_t graph_replays_ = 0;
  int32_t* ids_host_ = nullptr;  // pinned (max_chunks_) greedy ids of the last step
  float* decode_partial_out_ = nullptr;
  float* decode_partial_ml_ = nullptr;
  uint32_t* decode_split_counters_ = nullptr;
  // Captured decode graphs: (bucket, with the greedy tail) -> graph. Without the tail for
  // steps whose sampling runs after the graph (DeviceSamplerChain).
  std::vector<std::pair<std::pair<int64_t, bool>, cudaGraphExec_t>> graphs_;
  std::unique_ptr<DeviceSamplerChain> chain_;  // the sampler chain's buffers

  cuda::AttentionPlan plan_;              // reused every step
  std::vector<cuda::ChunkShape> shapes_;  // reused every step
  std::vector<cuda::PrefillChunk> prefill_chunks_;  // reused every step
  std::vector<cuda::PrefillTile> prefill_tiles_;    // reused every step
};

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CUDA_CUDA_BACKEND_H_
