// CudaBackend (see cuda_backend.h): creation — Init as a list of steps, each calling one
// part — and the KV pool. Stepping is in cuda_backend_step.cc, the tier copies and host
// memory in cuda_backend_copies.cc, the warm-up in cuda_warm_up.cc.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda_model_support.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"
#include "model/tensor.h"

namespace kvtier {
namespace {

absl::Status CheckDevice() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: ", cudaGetErrorString(err)));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device present");
  return absl::OkStatus();
}

KvLayout LayoutFor(const ModelConfig& config, const BackendOptions& options, DType dtype) {
  KvLayout layout;
  // With layer groups a block holds one group's layers (every group has as many).
  const KvGrouping& grouping = options.kv_grouping;
  layout.num_layers = grouping.enabled() ? config.num_layers / grouping.num_groups() : config.num_layers;
  layout.num_kv_heads = config.num_kv_heads;
  layout.head_dim = config.head_dim;
  layout.block_tokens = options.block_tokens;
  // kv_dtype fp8: E4M3 codes + one fp32 scale per row (kv_layout.h), the CPU backend's bytes.
  layout.dtype = options.kv_dtype == StorageDType::kFp8 ? DType::kF8E4M3 : dtype;
  return layout;
}

}  // namespace

CudaBackend::CudaBackend(const ModelConfig& config, const BackendOptions& options, DType dtype)
    : config_(config),
      options_(options),
      compute_dtype_(dtype),
      layout_(LayoutFor(config, options, dtype)),
      capacity_(cuda::StepCapacity::For(config, options)),
      memory_(options.gpu_mem_limit_bytes),
      graphs_(options.cuda.decode_graphs, capacity_.max_chunks) {
  pool_.block_bytes = layout_.BlockBytes();
}

CudaBackend::~CudaBackend() {
  // Everything in flight lands before a buffer goes.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (attention_fork_ != nullptr) attention_fork_->Synchronize();
  cudnn_.reset();  // its cuDNN handle is bound to stream_
  copies_.reset();
  host_kv_.reset();
  memory_.FreeAll();
  graphs_.Drop();
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  memory_.Trace("backend freed");
}

DType CudaBackend::ComputeDTypeOf(const Checkpoint& checkpoint) {
  absl::StatusOr<TensorView> embed = checkpoint.Tensor("model.embed_tokens.weight");
  if (embed.ok() && (embed->dtype == DType::kBF16 || embed->dtype == DType::kF16)) return embed->dtype;
  return DTypeFromTorchName(checkpoint.config().torch_dtype) == DType::kF16 ? DType::kF16 : DType::kBF16;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const Checkpoint& checkpoint,
                                                                 const BackendOptions& options) {
  if (options.tensor_parallel > 1) {  // never run one GPU in place of the ranks asked for
    return absl::UnimplementedError(absl::StrCat("cuda backend: tensor_parallel ", options.tensor_parallel,
                                                 " is not yet implemented (one GPU per context)"));
  }
  // weight_dtype bf16/fp16 choose the 16-bit type weights, activations and KV are held in;
  // fp8 holds the projections as E4M3 and computes in the checkpoint's 16-bit type. The KV
  // cache is held in that 16-bit type or, with kv_dtype fp8, as E4M3 codes + row scales.
  if (IsBlockStorageDType(options.weight_dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        "cuda backend: weight_dtype '", std::string(StorageDTypeName(options.weight_dtype)),
        "' is not supported (q8_0 and q4_k are cpu backend formats; GGUF files of those types are dequantized "
        "to 16 bits on the GPU): use auto, bf16, fp16 or fp8"));
  }
  DType dtype = ComputeDTypeOf(checkpoint);
  if (options.weight_dtype == StorageDType::kBf16) dtype = DType::kBF16;
  if (options.weight_dtype == StorageDType::kFp16) dtype = DType::kF16;
  const bool kv_matches =
      options.kv_dtype == StorageDType::kAuto || (options.kv_dtype == StorageDType::kBf16 && dtype == DType::kBF16) ||
      (options.kv_dtype == StorageDType::kFp16 && dtype == DType::kF16) || options.kv_dtype == StorageDType::kFp8;
  if (!kv_matches) {
    return absl::UnimplementedError(absl::StrCat(
        "cuda backend: kv_dtype '", std::string(StorageDTypeName(options.kv_dtype)), "' is not supported with ",
        std::string(DTypeName(dtype)), " weights (the KV cache is held in the compute type or fp8: use auto or fp8)"));
  }
  ProgressStage stage(options.progress, "weights", checkpoint.TotalTensorBytes());
  RETURN_IF_ERROR(stage.Begin());
  const cuda::Fp8WeightLoader fp8_loader = cuda::CheckpointFp8WeightLoader(checkpoint, stage);
  ASSIGN_OR_RETURN(
      std::unique_ptr<CudaBackend> backend,
      CreateImpl(checkpoint.config(), options, dtype, cuda::CheckpointWeightLoader(checkpoint, stage), &fp8_loader));
  RETURN_IF_ERROR(stage.End());
  return backend;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::CreateWithRandomWeights(const ModelConfig& config,
                                                                                  const BackendOptions& options,
                                                                                  uint64_t seed, DType dtype) {
  uint64_t counter = seed * 1000003;
  return CreateImpl(config, options, dtype, [&counter](const std::string& name, int64_t n, void* dst, DType as) {
    return cuda::FillRandomWeight(name, n, dst, as, ++counter);
  });
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::CreateImpl(const ModelConfig& config,
                                                                     const BackendOptions& options, DType dtype,
                                                                     const cuda::WeightLoader& loader,
                                                                     const cuda::Fp8WeightLoader* fp8_loader) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda backend: compute dtype must be BF16 or F16, not ", std::string(DTypeName(dtype))));
  }
  RETURN_IF_ERROR(CudaForwardSupports(config));
  if (options.kv_grouping.enabled()) {
    std::vector<std::optional<int64_t>> windows;
    for (int64_t l = 0; l < config.num_layers; ++l) windows.push_back(config.LayerWindow(l));
    RETURN_IF_ERROR(options.kv_grouping.Validate(windows).status());
  }
  RETURN_IF_ERROR(CheckDevice());
  if (config.num_kv_heads <= 0 || config.num_heads % config.num_kv_heads != 0) {
    return absl::UnimplementedError(absl::StrCat("cuda backend: num_heads ", config.num_heads,
                                                 " not a multiple of num_kv_heads ", config.num_kv_heads));
  }
  if (!cuda::AttentionSupportsHeadDim(static_cast<int>(config.head_dim))) {
    return absl::UnimplementedError(absl::StrCat("cuda backend: head_dim ", config.head_dim, " is not supported"));
  }
  if (options.block_tokens <= 0) {
    return absl::InvalidArgumentError("cuda backend: block_tokens must be positive");
  }
  // Llama/Qwen3 checkpoints with attention_bias also carry an o_proj bias (Qwen2 does not);
  // the CUDA path does not apply it yet, so refuse rather than compute something else.
  if (config.attention_bias && config.architecture != Architecture::kQwen2) {
    return absl::UnimplementedError(
        "cuda backend: an o_proj bias (attention_bias on a non-Qwen2 model) is not supported yet; use --backend cpu");
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend(config, options, dtype));
  RETURN_IF_ERROR(backend->Init(loader, fp8_loader));
  return backend;
}

absl::Status CudaBackend::Init(const cuda::WeightLoader& loader, const cuda::Fp8WeightLoader* fp8_loader) {
  RETURN_IF_ERROR(CreateStreams());
  ASSIGN_OR_RETURN(kernels_, cuda::KernelSelection::For(config_, layout_, options_.cuda, compute_dtype_));
  const bool fp8_weights = options_.weight_dtype == StorageDType::kFp8;
  // The path falls back to the tiles where cuBLASLt turns out to have no fp8 GEMM.
  kernels_.moe_library = cuda::MoeLibraryPathSuits(config_, fp8_weights, WantsW8A8());
  kernels_.moe_library_fp8 = kernels_.moe_library && fp8_weights;
  kernels_.moe_skinny = config_.moe.num_experts > 0 && kernels_.skinny_mode != 0 &&
                        cuda::MoeSkinnyWanted(options_.cuda.launch);
  RETURN_IF_ERROR(CheckFits());
  ASSIGN_OR_RETURN(weights_, cuda::CudaWeights::Load(
                                 config_, compute_dtype_, fp8_weights,
                                 cuda::CudaWeights::Fp8PartialFloats(config_, capacity_.max_tokens, kernels_.sm_count),
                                 loader, fp8_loader, memory_));
  RETURN_IF_ERROR(ws_.AllocateActivations(config_, capacity_, kernels_, memory_));
  CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(cublas_, ws_.cublas, cuda::Workspace::kCublasBytes));
  projections_ = std::make_unique<cuda::Projections>(cublas_, stream_, options_.cuda.launch, kernels_, &weights_, &ws_);
  if (WantsW8A8()) RETURN_IF_ERROR(InitW8A8());
  RETURN_IF_ERROR(ws_.AllocateKernelScratch(config_, capacity_, kernels_, MetaCapacity(), memory_));
  RETURN_IF_ERROR(InitCudnnPrefill());
  ASSIGN_OR_RETURN(planner_, cuda::StepPlanner::Create({capacity_, layout_.block_tokens, kernels_.fast_attention,
                                                        kernels_.prefill_tile_tokens,
                                                        static_cast<int32_t>(config_.num_kv_heads), kernels_.decode_wave_ctas,
                                                        options_.kv_grouping.group_window},
                                                       MetaCapacity()));
  ASSIGN_OR_RETURN(chain_, DeviceSamplerChain::Create(
                               capacity_.max_chunks, config_.vocab_size,
                               [this](size_t bytes, const char* what) { return memory_.Allocate(bytes, what); }));
  ASSIGN_OR_RETURN(host_kv_, cuda::HostKvStreamer::Create(HostKvOptions(), memory_, &stats_));
  if (options_.cuda.overlap_attention && kernels_.fast_attention) {
    ASSIGN_OR_RETURN(attention_fork_, cuda::AttentionFork::Create());
  }
  forward_ = std::make_unique<cuda::ForwardPass>(cuda::ForwardPass::Parts{&config_, &layout_, &options_.kv_grouping, compute_dtype_, &weights_,
                                                                          &ws_, projections_.get(), host_kv_.get(),
                                                                          &pool_, stream_, options_.cuda.launch,
                                                                          kernels_.prefill_kernel, cudnn_.get(),
                                                                          attention_fork_.get(),
                                                                          kernels_.moe_library ? cublas_ : nullptr});
  // The scratch block (KV of graph padding rows) is allocated with the pool, one block past
  // it; reserve its bytes now so the pool the engine sizes from device_bytes_in_use() fits.
  memory_.Reserve(static_cast<int64_t>(layout_.BlockBytes()));
  CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  memory_.Trace("weights and workspace allocated");
  return MeasureWarmRuntime();
}

absl::Status CudaBackend::CreateStreams() {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  ASSIGN_OR_RETURN(copies_, cuda::TierCopies::Create(stream_, &pool_, &stats_));
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
  // What the process holds beyond every backend's buffers (the CUDA context, modules loaded
  // so far, cuBLAS) counts against gpu_mem_limit: measured now, and again after WarmUp.
  RETURN_IF_ERROR(memory_.MeasureRuntimeShare());
  memory_.Trace("backend created");
  return absl::OkStatus();
}

int64_t CudaBackend::WeightBytes() const {
  return cuda::CudaWeights::Bytes(
      config_, options_.weight_dtype == StorageDType::kFp8,
      cuda::CudaWeights::Fp8PartialFloats(config_, capacity_.max_tokens, kernels_.sm_count));
}

int64_t CudaBackend::WorkspaceBytes() const {
  return cuda::Workspace::Bytes(config_, capacity_, kernels_, MetaCapacity()) +
         DeviceSamplerChain::DeviceBytes(capacity_.max_chunks, config_.vocab_size) +
         cuda::HostKvStreamer::StagingBytes(HostKvOptions()) +
         (kernels_.prefill_cudnn ? cuda::CudnnPrefill::ScratchBytes(CudnnPrefillOptions()) : 0);
}

size_t CudaBackend::MetaCapacity() const {
  return cuda::StepPlanner::MetaCapacity(capacity_, cuda::HostKvStreamer::SlotsWanted(HostKvOptions()),
                                         options_.kv_grouping.group_window, layout_.block_tokens);
}

cuda::HostKvStreamer::Options CudaBackend::HostKvOptions() const {
  cuda::HostKvStreamer::Options o;
  o.layout = layout_;
  o.stream_tokens = options_.cuda.host_kv_stream_tokens;
  o.fast_attention = kernels_.fast_attention;
  o.sm_count = kernels_.sm_count;
  o.compute = stream_;
  o.meta_device = ws_.meta;
  o.meta_host = planner_ != nullptr ? planner_->meta_host() : nullptr;
  return o;
}

absl::Status CudaBackend::CheckFits() const {
  const int64_t needed = memory_.bytes_in_use() + WeightBytes() + WorkspaceBytes();
  if (options_.gpu_mem_limit_bytes > 0 && needed > options_.gpu_mem_limit_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("cuda backend: runtime (", memory_.bytes_in_use(),
                                                     " bytes) + weights (", WeightBytes(), " bytes) + workspace (",
                                                     WorkspaceBytes(), " bytes) exceed gpu_mem_limit_bytes ",
                                                     options_.gpu_mem_limit_bytes));
  }
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (WeightBytes() + WorkspaceBytes() > static_cast<int64_t>(free_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda backend: weights + workspace need ", needed, " bytes, ", free_bytes, " free on the device"));
  }
  return absl::OkStatus();
}

// W8A8 computes in bf16 only (the fp8 kernels' outputs, as they were validated).
bool CudaBackend::WantsW8A8() const {
  return options_.weight_dtype == StorageDType::kFp8 && options_.cuda.fp8_activations &&
         compute_dtype_ == DType::kBF16;
}

absl::Status CudaBackend::InitW8A8() {
  // Both W8A8 kernels read 16-byte pieces of code rows: k a multiple of 16, n of 8.
  const int64_t h = config_.hidden_size, inter = config_.intermediate_size, q_dim = config_.q_dim();
  const int64_t qkv = q_dim + 2 * config_.kv_dim();
  for (auto [k, n] : {std::pair{h, qkv}, std::pair{q_dim, h}, std::pair{h, 2 * inter}, std::pair{inter, h}}) {
    if (k % 16 != 0 || n % 8 != 0) return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<cuda::Fp8Gemm>> gemm =
      cuda::Fp8Gemm::Create(ws_.cublas, cuda::Workspace::kCublasBytes);
  if (gemm.ok()) {
    projections_->SetFp8Gemm(std::move(*gemm));
  } else {
    // Not an error: steps above the skinny sizes dequantize into the scratch instead.
    Log(LogLevel::kInfo,
        "cuda backend: fp8 projections of large steps dequantize the weights: ", gemm.status().message());
  }
  if (!projections_->has_fp8_gemm() && kernels_.skinny_mode == 0) return absl::OkStatus();  // no W8A8 kernel here
  const int64_t widest = std::max({config_.hidden_size, config_.q_dim(), config_.intermediate_size});
  RETURN_IF_ERROR(ws_.AllocateFp8Activations(capacity_.max_tokens, widest, memory_));
  // The dequantization scratch served only the weights' load from here on.
  if (projections_->has_fp8_gemm()) RETURN_IF_ERROR(weights_.ReleaseDequantScratch(memory_, stream_));
  return absl::OkStatus();
}

int64_t CudaBackend::MemoryForKvPool() const {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 0;
  return static_cast<int64_t>(free_bytes);
}

absl::Status CudaBackend::AllocateKvPool(int64_t num_blocks) {
  if (pool_.base != nullptr) return absl::FailedPreconditionError("KV pool already allocated");
  if (num_blocks <= 0) return absl::InvalidArgumentError("num_blocks must be positive");
  const size_t bytes = static_cast<size_t>(num_blocks + 1) * layout_.BlockBytes();
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (bytes > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("cuda backend: KV pool of ", num_blocks, " blocks needs ", bytes,
                                                     " bytes, ", free_bytes, " free on the device"));
  }
  memory_.Unreserve(static_cast<int64_t>(layout_.BlockBytes()));  // the reservation of Init
  absl::StatusOr<void*> pool = memory_.Allocate(bytes, "KV pool");
  if (!pool.ok()) {
    memory_.Reserve(static_cast<int64_t>(layout_.BlockBytes()));
    return pool.status();
  }
  pool_.base = *pool;
  pool_.num_blocks = num_blocks;
  pool_.scratch_block = static_cast<int32_t>(num_blocks);
  // Zeros, so that the attention kernels' masked loads of it (the entries before a windowed
  // group's first block, StepPlanner) meet finite values; the padding rows' writes keep it so.
  CUDA_RETURN_IF_ERROR(cudaMemset(pool_.Block(pool_.scratch_block), 0, layout_.BlockBytes()));
  memory_.MarkInitDone();
  memory_.Trace("KV pool allocated");
  return absl::OkStatus();
}

}  // namespace kvtier
