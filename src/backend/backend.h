// Backend: runs the model forward over a ragged batch, reading and writing paged KV in its
// own device-tier block pool. It never decides policy (which blocks, which sequences): the
// engine and the KV manager tell it. One thread drives a backend at a time.
#ifndef KVTIER_BACKEND_BACKEND_H_
#define KVTIER_BACKEND_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cuda_options.h"
#include "backend/host_resident_kv.h"
#include "backend/kv_grouping.h"
#include "backend/kv_layout.h"
#include "backend/row_sampling.h"
#include "backend/sampler_chain.h"
#include "backend/storage_dtype.h"
#include "backend/token_masks.h"
#include "common/progress.h"

namespace kvtier {

class Checkpoint;

// One sequence's part of a step: `tokens` are fed at positions start_position,
// start_position+1, ...; positions [0, start_position) are already in the KV cache. Their
// K/V are read through `block_table` (device-tier block ids; entry j covers positions
// [j*block_tokens, (j+1)*block_tokens)), which already covers every position this chunk
// writes — except the blocks `host_kv` names, which live in host memory and are only read
// (host_resident_kv.h: the table then skips them). No padding: chunks have any length >= 1.
struct SequenceChunk {
  std::span<const int32_t> tokens;
  int64_t start_position = 0;
  std::span<const int32_t> block_table;
  bool need_logits = false;  // return logits of the chunk's last token
  // Return logits of every token of the chunk, in position order (prompt scoring); the
  // last is the need_logits row when both are set. Forward and ForwardAndSample only.
  bool all_logits = false;

  // Full blocks of the sequence read from host memory in place (a sequence longer than the
  // device tier); empty for every other sequence. Backends that cannot read them refuse
  // the batch (Unimplemented).
  HostResidentKv host_kv{};
  // With a grouped KV layout (BackendOptions::kv_grouping), the sequence's table in each
  // layer group, read instead of block_table; empty otherwise.
  std::span<const GroupKvTable> group_tables{};

  size_t num_logit_rows() const { return all_logits ? tokens.size() : (need_logits ? 1 : 0); }
};

struct ForwardBatch {
  std::vector<SequenceChunk> chunks;
  // Allowed-token masks of some logits rows (grammar-constrained sequences), applied by
  // ForwardGreedy, ForwardSampled and ForwardAndSample before they pick (and before
  // log-probabilities are taken); null = none. Forward ignores them.
  const TokenMasks* masks = nullptr;
  // The logits rows a forward produces, chunk by chunk: one per chunk with need_logits (the
  // row the sampled token comes from), one per token of chunks with all_logits.
  size_t num_logit_rows() const {
    size_t n = 0;
    for (const SequenceChunk& chunk : chunks) n += chunk.num_logit_rows();
    return n;
  }
};

// A host<->device copy of one whole block. `host` points at KvLayout::BlockBytes() bytes.
struct BlockCopy {
  int32_t device_block = 0;
  void* host = nullptr;
};

// How a GPU backend's device memory stands against gpu_mem_limit (zeros where the backend
// has no device memory of its own).
struct DeviceMemoryStats {
  // What the process holds on the device beyond every backend's buffers (CUDA context,
  // modules, graphs, library state), measured after the warm-up and charged to this backend.
  int64_t runtime_share_bytes = 0;
  // The process's device bytes at the highest sample taken (at creation, after the
  // warm-up, then about once a second while stepping).
  int64_t process_peak_bytes = 0;
  // True when read per process (NVML); false when the device's used bytes stood in.
  bool per_process = false;
};

// Device-side timing of tier copies (backends with copy engines; zeros elsewhere).
struct BackendCopyStats {
  int64_t prefetch_batches = 0;
  int64_t prefetch_bytes = 0;
  double prefetch_copy_seconds = 0;   // copy-engine time of PrefetchBlocksFromHost copies
  double prefetch_stall_seconds = 0;  // time a forward waited on the device for them
  int64_t sync_batches = 0;
  int64_t sync_bytes = 0;
  double sync_copy_seconds = 0;  // copy-engine time of the synchronous tier copies (host blocked)
  // Asynchronous device -> host copies (StartCopiesToHost): swap-out, prefix-cache write-back.
  int64_t async_out_batches = 0;
  int64_t async_out_bytes = 0;
  double async_out_copy_seconds = 0;  // copy-engine time of those copies
  double async_out_wait_seconds = 0;  // host time spent in WaitForCopies (exposed)
  // Host-resident KV read by forwards (docs/LONG_CONTEXT.md): steps that read some, and the
  // bytes read (every layer of every host block, once per step); CUDA: streamed over the host
  // link. host_link_bytes_per_second: pinned host -> device copy bandwidth the backend
  // measured when it was created (0: not measured).
  int64_t host_kv_steps = 0;
  int64_t host_kv_bytes = 0;
  double host_link_bytes_per_second = 0;
  // CUDA: how host-resident KV is gathered (the fastest way measured when the backend was
  // created; empty: no streaming) and the rate it moved then.
  std::string host_kv_gather;
  double host_kv_gather_bytes_per_second = 0;
};

// How the CPU backend computes its matrix products (backend "cpu" or "cpu-reference").
//   kFast: each matrix in the checkpoint's format (backend/cpu/cpu_matrix.h): GGUF's
//     quantized blocks with integer dot products against activations quantized as
//     llama.cpp does; 16-bit floats kept in 16 bits (backend/cpu/dot16.h): F16 widened in
//     registers and summed in the reference's order, BF16 the same or, where the processor
//     has AVX-512 BF16, through bf16 dot products with the activations rounded to bf16.
//   kExact: as kFast, but every 16-bit matrix summed in the reference's order, so F16 and
//     BF16 checkpoints give kReference's bits on every processor.
//   kReference: every matrix widened to fp32 once, products in fp32: the oracle other
//     paths are tested against.
enum class CpuKernels { kFast, kExact, kReference };

struct BackendOptions {
  int32_t num_threads = 0;    // CPU backend: 0 = hardware concurrency
  CpuKernels cpu_kernels = CpuKernels::kFast;
  int64_t block_tokens = 16;  // KV block size in tokens
  // CUDA: workspace is sized once for this many tokens and chunks per forward; larger
  // batches still run, as several sequential sub-steps.
  int64_t max_tokens_per_step = 2048;
  int64_t max_sequences = 256;
  // CUDA: cap on device memory held (weights + workspace + KV pool); 0 = the card's.
  int64_t gpu_mem_limit_bytes = 0;
  // CUDA: switches between equivalent ways of running the forward (for measuring).
  CudaOptions cuda;
  // Formats weights and KV are held in (options weight_dtype / kv_dtype). A backend
  // refuses (Unimplemented, naming the option and value) a format it cannot hold.
  StorageDType weight_dtype = StorageDType::kAuto;
  StorageDType kv_dtype = StorageDType::kAuto;
  // Tensor parallelism (docs/TENSOR_PARALLEL.md): ranks the attention heads, KV heads and
  // MLP rows are split over, 1, 2, 4 or 8. devices: CUDA ordinals, one per rank (empty:
  // 0 .. tensor_parallel-1). sharded_reduction: the CPU backend runs the sharded plan (its
  // fixed-order reductions) at tensor_parallel 1 too, the baseline its TP>1 bits equal.
  int32_t tensor_parallel = 1;
  std::vector<int32_t> devices;
  bool sharded_reduction = false;
  // Layer groups of a model with sliding-window layers (kv_grouping.h): the KV block holds
  // one group's layers and each chunk brings a table per group. Empty: every layer in every
  // block. A backend that cannot read it refuses it at creation (Unimplemented): CUDA, and
  // the CPU backend's sharded plan.
  KvGrouping kv_grouping;
  // Hears the stage "weights" (checkpoint bytes converted or copied to the device) while
  // the backend is created; creation returns Cancelled when it asks to stop. May be empty.
  ProgressFn progress;
};

// A backend that runs a model exactly only over its first `positions` positions (say, the
// CUDA forward and sliding-window attention: within the window it is full attention).
struct PositionLimit {
  int64_t positions = 0;
  std::string reason;  // for the error a longer request gets, e.g. "... use --backend cpu"
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "cpu", "cuda"
  // How the forward computes, in one line for people (stats "compute_path", `kvtier run`).
  virtual std::string compute_path() const { return std::string(name()); }
  // Layout of a KV block on this backend (dtype: f32 on CPU, the compute dtype on CUDA).
  virtual const KvLayout& kv_layout() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Below the model's max_position_embeddings where this backend stops being exact; the
  // engine caps every sequence there. None by default.
  virtual std::optional<PositionLimit> position_limit() const { return std::nullopt; }

  // Allocates the device-tier KV pool once; no allocation happens after this while
  // stepping. ResourceExhausted when it does not fit.
  virtual absl::Status AllocateKvPool(int64_t num_blocks) = 0;
  virtual int64_t num_kv_blocks() const = 0;
  // Called once after AllocateKvPool, before the first forward: backends with lazily
  // loaded code or captured launch sequences run their first forwards here (on memory no
  // sequence uses), so the first request does not pay for them. Default: nothing.
  virtual absl::Status WarmUp() { return absl::OkStatus(); }

  // Runs one forward over the batch: appends each chunk's K/V to its blocks and writes one
  // row of vocab_size() logits per chunk with need_logits (in chunk order) into *logits
  // (resized). InvalidArgument for a malformed batch (block table too short, token out
  // of range); Internal / Unavailable for a backend failure.
  virtual absl::Status Forward(const ForwardBatch& batch, std::vector<float>* logits) = 0;

  // Forward, then the greedy token (first maximum) of each logits row, in chunk order.
  // Backends that can pick it on the device override this so only ids come back.
  virtual absl::Status ForwardGreedy(const ForwardBatch& batch, std::vector<int32_t>* token_ids);

  // Forward, then each logits row's token sampled as SampleRow does with rows[r] (one per
  // chunk with need_logits, in chunk order; greedy rows allowed), into *token_ids.
  // InvalidArgument as ValidateRowSampling says (before any work). Backends that can
  // sample on the device override this so only ids come back.
  virtual absl::Status ForwardSampled(const ForwardBatch& batch, std::span<const RowSampling> rows,
                                      std::vector<int32_t>* token_ids);

  // Forward, then the sampler chain (sampler_chain.h) over the logits rows: a token for
  // each of sampling.samples (several may read one row), the log-probabilities asked for,
  // the scores; into *result. InvalidArgument as ValidateSamplingBatch says, before any
  // work. The default runs SampleOnHost on Forward's logits; backends that sample on the
  // device override it, so only the asked-for numbers come back.
  virtual absl::Status ForwardAndSample(const ForwardBatch& batch, const SamplingBatch& sampling,
                                        SamplingResult* result);

  // Host-tier memory: page-locked where the backend copies faster from it (CUDA), plain
  // otherwise. Allocated once when a context is created; freed with FreeHostMemory.
  // Small host buffers (the disk tier's staging buffers): page-locked where the backend
  // copies faster from it (CUDA), plain otherwise. Allocated once when a context is
  // created; freed with FreeHostMemory.
  virtual absl::StatusOr<void*> AllocateHostMemory(size_t bytes);
  virtual void FreeHostMemory(void* ptr);

  // The host tier, whatever its size, without making context creation wait for it:
  // ReserveHostMemory maps `bytes` of address space (page-aligned; nothing committed or
  // pinned, so it costs the same for 1 GiB and 96 GiB); where PinsHostMemory() says so,
  // PinHostMemory page-locks a page-aligned part of it (CUDA: cudaHostRegister, which
  // touches and locks every page: slow for a large tier), and a part is copied to or from
  // only once its pin returned OK. The KV manager pins a chunk at a time on a background
  // thread: PinHostMemory and UnpinHostMemory may run on any thread, concurrently with
  // every other method, so they touch no state those use. UnpinHostMemory takes exactly
  // the (ptr, bytes) of one successful PinHostMemory; ReleaseHostMemory unmaps the whole
  // reservation after every pinned part was unpinned. Defaults: anonymous mmap / munmap,
  // no pinning (plain memory serves the CPU backend as well).
  virtual bool PinsHostMemory() const { return false; }
  virtual absl::StatusOr<void*> ReserveHostMemory(size_t bytes);
  virtual absl::Status PinHostMemory(void* ptr, size_t bytes);
  virtual void UnpinHostMemory(void* ptr, size_t bytes);
  virtual void ReleaseHostMemory(void* ptr, size_t bytes);

  // Whether Forward reads SequenceChunk::host_kv (host-resident blocks of a sequence longer
  // than the device tier); the engine runs such sequences only where it does.
  virtual bool ReadsHostResidentKv() const { return false; }
  // Why it does not (ReadsHostResidentKv false), naming the options that would make it where
  // some would: the engine's refusal of a sequence longer than the device tier says it.
  virtual std::string WhyNoHostResidentKv() const { return "this backend cannot read KV blocks from the host tier"; }
  // Most host-resident blocks one step may read in all (CUDA: what its staging buffers
  // hold); a long sequence whose whole context needs more blocks is refused at admission.
  virtual int64_t MaxHostResidentBlocks() const { return INT64_MAX; }

  // Tier moves: whole blocks between the device pool and host memory. Synchronous here;
  // backends with copy engines may overlap them internally but return only when done.
  virtual absl::Status CopyBlocksToHost(std::span<const BlockCopy> copies) = 0;
  virtual absl::Status CopyBlocksFromHost(std::span<const BlockCopy> copies) = 0;
  // Starts host -> device copies that the NEXT forward may read, overlapping them with the
  // current one where the backend has a copy engine. The host bytes must stay unchanged
  // until WaitForPrefetches returns (device -> host copies issued later are ordered after
  // these). Default: a synchronous CopyBlocksFromHost.
  virtual absl::Status PrefetchBlocksFromHost(std::span<const BlockCopy> copies) {
    return CopyBlocksFromHost(copies);
  }
  // Orders every later forward after the prefetches started so far.
  virtual absl::Status WaitForPrefetches() { return absl::OkStatus(); }
  // Starts device -> host copies and returns at once with a ticket (> 0). The copies read
  // the blocks as every forward and copy started so far left them, and write each host
  // buffer after every host -> device copy started so far has read it. Until
  // CopiesDone(ticket) says true (or WaitForCopies returns) the caller must neither read
  // nor write the host bytes, nor let a forward or another copy write the device blocks.
  // Tickets complete in the order they were started: a done ticket implies all earlier.
  // Default: the synchronous CopyBlocksToHost, returning a ticket that is already done.
  virtual absl::StatusOr<int64_t> StartCopiesToHost(std::span<const BlockCopy> copies);
  // Non-blocking: whether the ticket's copies (and all earlier ones) have landed.
  // InvalidArgument for a ticket never returned; Internal when the copies failed.
  virtual absl::StatusOr<bool> CopiesDone(int64_t ticket);
  // Blocks the host until CopiesDone(ticket); the wait is counted as exposed copy time.
  virtual absl::Status WaitForCopies(int64_t ticket);
  // Timing of the tier copies so far (for the "copy time hidden behind compute" figure).
  virtual BackendCopyStats copy_stats() const { return {}; }
  // Device-tier block to device-tier block (prefix-cache copy-on-write).
  virtual absl::Status CopyBlock(int32_t src_block, int32_t dst_block) = 0;

  // Bytes of device memory counted against gpu_mem_limit (weights + KV pool + workspace, and
  // on CUDA the runtime share of DeviceMemoryStats).
  virtual int64_t device_bytes_in_use() const = 0;
  virtual DeviceMemoryStats device_memory() const { return {}; }
  // The memory a device KV pool would draw on now, which the engine sizes the pool against
  // when the options give no budget: the machine's physical memory by default (the CPU),
  // the device's free bytes after the weights and workspace on CUDA. 0 when unknown.
  virtual int64_t MemoryForKvPool() const;
  // Device allocations made after AllocateKvPool returned (must stay 0).
  virtual int64_t allocations_after_init() const = 0;
};

// Creates the backend named "cpu", "cpu-reference" or "cuda" ("auto" picks cuda when
// usable, else cpu). "cpu-reference" is the CPU backend with options.cpu_kernels
// kReference; "cpu" takes options.cpu_kernels as given.
// Unimplemented when the named backend is not built or not usable, naming why.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::string_view name,
                                                       const Checkpoint& checkpoint,
                                                       const BackendOptions& options);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_BACKEND_H_
