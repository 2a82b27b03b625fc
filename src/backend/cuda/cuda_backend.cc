// CudaBackend (see cuda_backend.h): creation, weights, workspace, the KV pool, batch
// validation and splitting. The layer loop is in cuda_forward.cc, the tier copies in
// cuda_backend_copies.cc.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_check.h"
#include "common/log.h"
#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/fp8_skinny.h"
#include "backend/cuda/skinny_gemm.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"
#include "model/fp8_weights.h"
#include "model/tensor.h"

namespace kvtier {
namespace cuda {

std::vector<ForwardBatch> SplitBatch(const ForwardBatch& batch, int64_t max_tokens,
                                     int64_t max_chunks, int64_t max_host_blocks) {
  std::vector<ForwardBatch> pieces;
  ForwardBatch current;
  int64_t current_tokens = 0;
  int64_t current_host = 0;  // host-resident blocks named by the piece's chunks
  auto flush = [&] {
    if (!current.chunks.empty()) pieces.push_back(std::move(current));
    current = ForwardBatch();
    current_tokens = 0;
    current_host = 0;
  };
  int64_t current_rows = 0;  // logits rows: at most max_chunks per piece, as chunks
  for (const SequenceChunk& chunk : batch.chunks) {
    const int64_t n = static_cast<int64_t>(chunk.tokens.size());
    const int64_t host = chunk.host_kv.num_blocks();
    int64_t offset = 0;
    while (offset < n) {
      if (static_cast<int64_t>(current.chunks.size()) == max_chunks ||
          current_tokens == max_tokens || current_rows >= max_chunks ||
          (host > 0 && current_host + host > max_host_blocks)) {
        flush();
        current_rows = 0;
      }
      int64_t take = std::min(n - offset, max_tokens - current_tokens);
      if (chunk.all_logits) take = std::min(take, max_chunks - current_rows);
      SequenceChunk piece;
      piece.tokens = chunk.tokens.subspan(offset, take);
      piece.start_position = chunk.start_position + offset;
      piece.block_table = chunk.block_table;
      piece.host_kv = chunk.host_kv;  // full blocks before every piece's positions
      piece.need_logits = chunk.need_logits && offset + take == n;
      piece.all_logits = chunk.all_logits;
      current.chunks.push_back(piece);
      current_tokens += take;
      current_host += host;
      current_rows += static_cast<int64_t>(piece.num_logit_rows());
      offset += take;
    }
  }
  flush();
  return pieces;
}

}  // namespace cuda

namespace {

std::string LayerName(int64_t layer, const char* suffix) {
  return absl::StrCat("model.layers.", layer, ".", suffix);
}

// Copies a checkpoint tensor to the device, converted to `as` (kF32, kBF16 or kF16).
absl::Status LoadFromCheckpoint(const Checkpoint& checkpoint, const std::string& name,
                                int64_t num_elements, void* dst, DType as) {
  ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
  if (tensor.num_elements() != num_elements) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has ",
                                                   tensor.num_elements(), " elements, expected ",
                                                   num_elements));
  }
  if (tensor.dtype == as) {  // stored as it will be held: one copy
    CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, tensor.data, tensor.nbytes(), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  std::vector<float> f32;
  RETURN_IF_ERROR(checkpoint.TensorAsFloat32(name, &f32));  // fp8: codes times scales
  if (as == DType::kF32) {
    CUDA_RETURN_IF_ERROR(
        cudaMemcpy(dst, f32.data(), f32.size() * sizeof(float), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  std::vector<uint16_t> b16(f32.size());
  for (size_t i = 0; i < f32.size(); ++i) {
    b16[i] = as == DType::kF16 ? FloatToFp16(f32[i]) : FloatToBf16(f32[i]);
  }
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(dst, b16.data(), b16.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

// Per-output-channel fp8 of a (rows, cols) 16-bit matrix already on the device (`staging`,
// elements of `dtype`), on the device; waits for it (the staging buffer is reused next).
absl::Status QuantizeOnDevice(const void* staging, DType dtype, int64_t rows, int64_t cols, uint8_t* codes,
                              float* scales) {
  const cudaError_t err =
      dtype == DType::kF16
          ? cuda::QuantizeRowsFp8(static_cast<const cuda::f16*>(staging), rows, cols, codes, scales, nullptr)
          : cuda::QuantizeRowsFp8(static_cast<const cuda::bf16*>(staging), rows, cols, codes, scales, nullptr);
  CUDA_RETURN_IF_ERROR(err);
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
  return absl::OkStatus();
}

// weight_dtype fp8 from a checkpoint: 16-bit tensors are copied as they are and quantized
// on the device (seconds for an 8B model); fp32 and fp8 tensors are quantized on the host
// from their fp32 values (an fp8 tensor: codes times its own scales, whatever their layout),
// which is what the CPU backend does, so both hold the same codes and scales.
absl::Status LoadFp8FromCheckpoint(const Checkpoint& checkpoint, const std::string& name, int64_t rows, int64_t cols,
                                   uint8_t* codes, float* scales, void* staging) {
  ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
  if (tensor.num_elements() != rows * cols) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has ", tensor.num_elements(),
                                                   " elements, expected ", rows * cols));
  }
  if (tensor.dtype == DType::kBF16 || tensor.dtype == DType::kF16) {
    CUDA_RETURN_IF_ERROR(cudaMemcpy(staging, tensor.data, tensor.nbytes(), cudaMemcpyHostToDevice));
    return QuantizeOnDevice(staging, tensor.dtype, rows, cols, codes, scales);
  }
  std::vector<float> f32;
  RETURN_IF_ERROR(checkpoint.TensorAsFloat32(name, &f32));
  std::vector<uint8_t> host_codes(f32.size());
  std::vector<float> host_scales(static_cast<size_t>(rows));
  QuantizeRowsFp8(f32.data(), rows, cols, host_codes.data(), host_scales.data());
  CUDA_RETURN_IF_ERROR(cudaMemcpy(codes, host_codes.data(), host_codes.size(), cudaMemcpyHostToDevice));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(scales, host_scales.data(), host_scales.size() * sizeof(float), cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status CheckDevice() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("no usable CUDA device: ", cudaGetErrorString(err)));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device present");
  return absl::OkStatus();
}

}  // namespace

CudaBackend::CudaBackend(const ModelConfig& config, const BackendOptions& options, DType dtype)
    : config_(config),
      options_(options),
      memory_(options.gpu_mem_limit_bytes),
      compute_dtype_(dtype),
      fp8_weights_(options.weight_dtype == StorageDType::kFp8),
      graphs_enabled_(options.cuda.decode_graphs) {
  layout_.num_layers = config.num_layers;
  layout_.num_kv_heads = config.num_kv_heads;
  layout_.head_dim = config.head_dim;
  layout_.block_tokens = options.block_tokens;
  // kv_dtype fp8: E4M3 codes + one fp32 scale per row (kv_layout.h), the CPU backend's bytes.
  layout_.dtype = options.kv_dtype == StorageDType::kFp8 ? DType::kF8E4M3 : dtype;
  max_tokens_ = std::max<int64_t>(1, options.max_tokens_per_step);
  max_chunks_ = std::clamp<int64_t>(options.max_sequences, 1, max_tokens_);
  partial_slots_ = std::max<int64_t>(max_tokens_, 16 * max_chunks_);
  const int64_t max_context =
      std::clamp<int64_t>(config.max_position_embeddings, 4096, int64_t{1} << 18);
  max_table_entries_ =
      max_chunks_ * ((max_context + options.block_tokens - 1) / options.block_tokens);
  // A streamed long sequence's table holds its whole context (host entries included).
  max_table_entries_ += (std::max<int64_t>(0, options.cuda.host_kv_stream_tokens) + options.block_tokens - 1) /
                        options.block_tokens;
  plan_options_.num_heads = static_cast<int32_t>(config.num_heads);
  plan_options_.num_kv_heads = static_cast<int32_t>(config.num_kv_heads);
  plan_options_.max_rows = cuda::AttentionMaxRows(static_cast<int>(config.head_dim));
  plan_options_.partial_slots = partial_slots_;
  const int64_t group = config.num_heads / std::max<int64_t>(1, config.num_kv_heads);
  const int64_t subgroups = (group + plan_options_.max_rows - 1) / plan_options_.max_rows;
  max_items_ = subgroups * (max_tokens_ + partial_slots_);
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
  if (stage_stream_ != nullptr) cudaStreamSynchronize(stage_stream_);
  if (stage_aux_.stream != nullptr) cudaStreamSynchronize(stage_aux_.stream);
  memory_.FreeAll();
  DropDecodeGraphs();
  if (meta_host_ != nullptr) cudaFreeHost(meta_host_);
  if (ids_host_ != nullptr) cudaFreeHost(ids_host_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
  for (cudaEvent_t e : all_events_) cudaEventDestroy(e);
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
  for (cudaEvent_t e : {stage_meta_ready_, stage_landed_[0], stage_landed_[1], stage_free_[0], stage_free_[1],
                        stage_aux_.fork, stage_aux_.join}) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (stage_stream_ != nullptr) cudaStreamDestroy(stage_stream_);
  if (stage_aux_.stream != nullptr) cudaStreamDestroy(stage_aux_.stream);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  memory_.Trace("backend freed");
}

DType CudaBackend::ComputeDTypeOf(const Checkpoint& checkpoint) {
  absl::StatusOr<TensorView> embed = checkpoint.Tensor("model.embed_tokens.weight");
  if (embed.ok() && (embed->dtype == DType::kBF16 || embed->dtype == DType::kF16)) return embed->dtype;
  return checkpoint.config().torch_dtype == "float16" ? DType::kF16 : DType::kBF16;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const Checkpoint& checkpoint,
                                                                 const BackendOptions& options) {
  // weight_dtype bf16/fp16 choose the 16-bit type weights, activations and KV are held in;
  // fp8 holds the projections as E4M3 and computes in the checkpoint's 16-bit type. The KV
  // cache is held in that 16-bit type or, with kv_dtype fp8, as E4M3 codes + row scales.
  DType dtype = ComputeDTypeOf(checkpoint);
  if (options.weight_dtype == StorageDType::kBf16) dtype = DType::kBF16;
  if (options.weight_dtype == StorageDType::kFp16) dtype = DType::kF16;
  const bool kv_matches = options.kv_dtype == StorageDType::kAuto ||
                          (options.kv_dtype == StorageDType::kBf16 && dtype == DType::kBF16) ||
                          (options.kv_dtype == StorageDType::kFp16 && dtype == DType::kF16) ||
                          options.kv_dtype == StorageDType::kFp8;
  if (!kv_matches) {
    return absl::UnimplementedError(absl::StrCat("cuda backend: kv_dtype '", std::string(StorageDTypeName(options.kv_dtype)),
                                                 "' is not supported with ", std::string(DTypeName(dtype)),
                                                 " weights (the KV cache is held in the compute type or fp8: use auto or fp8)"));
  }
  ProgressStage stage(options.progress, "weights", checkpoint.TotalTensorBytes());
  RETURN_IF_ERROR(stage.Begin());
  const Fp8WeightLoader fp8_loader = [&checkpoint, &stage](const std::string& name, int64_t rows, int64_t cols,
                                                             uint8_t* codes, float* scales, void* staging) {
    RETURN_IF_ERROR(LoadFp8FromCheckpoint(checkpoint, name, rows, cols, codes, scales, staging));
    ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
    return stage.Add(static_cast<int64_t>(tensor.nbytes()));
  };
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend,
                   CreateImpl(checkpoint.config(), options, dtype,
                              [&checkpoint, &stage](const std::string& name, int64_t n, void* dst, DType as) {
                                RETURN_IF_ERROR(LoadFromCheckpoint(checkpoint, name, n, dst, as));
                                ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
                                return stage.Add(static_cast<int64_t>(tensor.nbytes()));
                              },
                              &fp8_loader));
  RETURN_IF_ERROR(stage.End());
  return backend;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::CreateWithRandomWeights(
    const ModelConfig& config, const BackendOptions& options, uint64_t seed, DType dtype) {
  uint64_t counter = seed * 1000003;
  return CreateImpl(config, options, dtype,
                    [&counter](const std::string& name, int64_t n, void* dst, DType as) {
                      ++counter;
                      cudaError_t err;
                      if (as == DType::kF32) {
                        const bool is_norm = name.find("norm") != std::string::npos;
                        err = cuda::FillRandom(static_cast<float*>(dst), n, counter,
                                               is_norm ? 1.0f : 0.0f, is_norm ? 0.1f : 0.02f,
                                               nullptr);
                      } else if (as == DType::kF16) {
                        err = cuda::FillRandom(static_cast<cuda::f16*>(dst), n, counter, 0.0f,
                                               0.035f, nullptr);
                      } else {
                        err = cuda::FillRandom(static_cast<cuda::bf16*>(dst), n, counter, 0.0f,
                                               0.035f, nullptr);
                      }
                      CUDA_RETURN_IF_ERROR(err);
                      return absl::OkStatus();
                    });
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::CreateImpl(
    const ModelConfig& config, const BackendOptions& options, DType dtype,
    const WeightLoader& loader, const Fp8WeightLoader* fp8_loader) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: compute dtype must be BF16 or F16, not ", std::string(DTypeName(dtype))));
  }
  RETURN_IF_ERROR(CheckDevice());
  if (config.num_kv_heads <= 0 || config.num_heads % config.num_kv_heads != 0) {
    return absl::UnimplementedError(absl::StrCat("cuda backend: num_heads ", config.num_heads,
                                                 " not a multiple of num_kv_heads ",
                                                 config.num_kv_heads));
  }
  if (!cuda::AttentionSupportsHeadDim(static_cast<int>(config.head_dim))) {
    return absl::UnimplementedError(
        absl::StrCat("cuda backend: head_dim ", config.head_dim, " is not supported"));
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

int64_t CudaBackend::MaxProjectionElements() const {
  const int64_t h = config_.hidden_size, inter = config_.intermediate_size;
  const int64_t qkv = config_.q_dim() + 2 * config_.kv_dim();
  return std::max({qkv * h, h * config_.q_dim(), 2 * inter * h, h * inter});
}

int64_t CudaBackend::Fp8PartialFloats() const {
  const int64_t h = config_.hidden_size, inter = config_.intermediate_size;
  const int64_t qkv = config_.q_dim() + 2 * config_.kv_dim();
  const int rows = static_cast<int>(std::min<int64_t>(cuda::kSkinnyFp8MaxRows, max_tokens_));
  int64_t floats = 0;
  for (auto [n, k] : {std::pair{qkv, h}, std::pair{h, config_.q_dim()}, std::pair{2 * inter, h}, std::pair{h, inter}}) {
    floats = std::max<int64_t>(
        floats, static_cast<int64_t>(cuda::SkinnyFp8PartialFloats(rows, n, cuda::SkinnyFp8Splits(n, k, sm_count_))));
  }
  return floats;
}

int64_t CudaBackend::SkinnyGemmBytes() const {
  if (skinny_mode_ == 0) return 0;
  const int max_m = static_cast<int>(std::min<int64_t>(cuda::kSkinnyGemmMaxRows, max_tokens_));
  return static_cast<int64_t>(cuda::SkinnyGemmWorkspaceBytes(max_m, sm_count_));
}

int64_t CudaBackend::WeightBytes() const {
  const int64_t h = config_.hidden_size, inter = config_.intermediate_size;
  const int64_t qkv = config_.q_dim() + 2 * config_.kv_dim();
  const int64_t projection_elements = qkv * h + h * config_.q_dim() + 2 * inter * h + h * inter;
  const int64_t projection_bytes =
      fp8_weights_ ? projection_elements + 4 * (qkv + h + 2 * inter + h) : 2 * projection_elements;
  int64_t per_layer = projection_bytes + 4 * (2 * h + 2 * config_.head_dim + qkv);
  int64_t total = config_.num_layers * per_layer + 2 * config_.vocab_size * h + 4 * h;
  if (fp8_weights_) total += 2 * MaxProjectionElements() + 4 * Fp8PartialFloats();
  if (!config_.tie_word_embeddings) total += 2 * config_.vocab_size * h;
  return total;
}

int64_t CudaBackend::WorkspaceBytes() const {
  const int64_t t = max_tokens_, h = config_.hidden_size, inter = config_.intermediate_size;
  const int64_t wide = std::max(config_.q_dim() + 2 * config_.kv_dim(), 2 * inter);
  return t * h * 4 + t * h * 2 + t * wide * 2 + 2 * t * config_.q_dim() * 2 + t * h * 2 +
         t * inter * 2 + max_chunks_ * config_.vocab_size * 4 + max_chunks_ * 4 +
         max_chunks_ * ((config_.vocab_size + 31) / 32) * 4 +
         (fast_attention_ ? 0 : partial_slots_ * config_.num_heads * (config_.head_dim + 2) * 4) +
         (32 << 20) +
         static_cast<int64_t>(meta_capacity_) + 64 * 256 +
         DeviceSamplerChain::DeviceBytes(max_chunks_, config_.vocab_size) + 16 * 256 + HostKvStagingBytes() +
         SkinnyGemmBytes();
}

absl::Status CudaBackend::Init(const WeightLoader& loader, const Fp8WeightLoader* fp8_loader) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
  constexpr int kTimingEvents = 514;
  for (int i = 0; i < kTimingEvents; ++i) {
    cudaEvent_t e = nullptr;
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    all_events_.push_back(e);
  }
  sync_start_ = all_events_[0];
  sync_end_ = all_events_[1];
  event_pool_.assign(all_events_.begin() + 2, all_events_.end());
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
  // What the process holds beyond every backend's buffers (the CUDA context, modules loaded
  // so far, cuBLAS) counts against gpu_mem_limit: measured now, and again after WarmUp.
  RETURN_IF_ERROR(memory_.MeasureRuntimeShare());
  memory_.Trace("backend created");

  cudaDeviceProp props{};
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, 0));
  sm_count_ = props.multiProcessorCount;
  // The skinny kernels are sm_90a code; they compute in bf16 only.
  skinny_mode_ = cuda::SkinnyGemmDeviceOk(0) && compute_dtype_ == DType::kBF16 ? options_.cuda.skinny_gemm : 0;
  const int32_t heads = static_cast<int32_t>(config_.num_heads);
  const int32_t kv_heads = static_cast<int32_t>(config_.num_kv_heads);
  const int32_t head_dim = static_cast<int32_t>(config_.head_dim);
  fast_attention_ = cuda::DecodeAttentionSupported(head_dim, heads, kv_heads) &&
                    cuda::PrefillAttentionSupported(head_dim, heads, kv_heads) &&
                    layout_.block_tokens >= 8 && layout_.block_tokens <= 64 &&
                    (layout_.block_tokens & (layout_.block_tokens - 1)) == 0 &&
                    options_.cuda.fast_attention;
  // fp8 KV is read by DecodeAttention and PrefillAttention only (the generic kernel reads
  // 16-bit KV).
  if (layout_.dtype == DType::kF8E4M3 && !fast_attention_) {
    return absl::UnimplementedError(absl::StrCat(
        "cuda backend: kv_dtype fp8 needs the fast attention kernels (head_dim 64 or 128, at most 8 query heads per kv head, "
        "block_tokens a power of two in [8, 64], fast attention on); this model has head_dim ",
        head_dim, ", ", heads, " heads, ", kv_heads, " kv heads, block_tokens ", layout_.block_tokens));
  }
  prefill_tile_tokens_ = cuda::PrefillTileTokens(head_dim, heads / kv_heads);

  // Metadata capacity: token arrays (ids, pos, chunk, decode rows, splits, partial bases),
  // chunk arrays, items or prefill tiles, block tables.
  using cuda::AlignMetaBytes;
  meta_capacity_ = 6 * AlignMetaBytes(max_tokens_ * 4) + 2 * AlignMetaBytes((max_chunks_ + 1) * 4) +
                   AlignMetaBytes(max_items_ * sizeof(cuda::AttentionItem)) +
                   AlignMetaBytes((max_tokens_ + max_chunks_) * sizeof(cuda::PrefillTile)) +
                   AlignMetaBytes(max_chunks_ * sizeof(cuda::SampleParams)) +
                   AlignMetaBytes(max_chunks_ * 4) +
                   AlignMetaBytes(max_table_entries_ * 4) + AlignMetaBytes(HostKvSlotsWanted() * 8) + 4 * 256;

  const int64_t needed = memory_.bytes_in_use() + WeightBytes() + WorkspaceBytes();
  if (options_.gpu_mem_limit_bytes > 0 && needed > options_.gpu_mem_limit_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cuda backend: runtime (", memory_.bytes_in_use(), " bytes) + weights (", WeightBytes(),
        " bytes) + workspace (", WorkspaceBytes(), " bytes) exceed gpu_mem_limit_bytes ",
        options_.gpu_mem_limit_bytes));
  }
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (WeightBytes() + WorkspaceBytes() > static_cast<int64_t>(free_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat("cuda backend: weights + workspace need ",
                                                     needed, " bytes, ", free_bytes,
                                                     " free on the device"));
  }

  const int64_t h = config_.hidden_size, inter = config_.intermediate_size;
  const int64_t q_dim = config_.q_dim(), kv_dim = config_.kv_dim();
  const int64_t qkv = q_dim + 2 * kv_dim;
  auto alloc_16 = [&](int64_t n, const char* what) -> absl::StatusOr<Raw16*> {
    ASSIGN_OR_RETURN(void* p, DeviceAlloc(n * sizeof(Raw16), what));
    return static_cast<Raw16*>(p);
  };
  const DType w16 = compute_dtype_;
  constexpr DType f32 = DType::kF32;
  auto alloc_f32 = [&](int64_t n, const char* what) -> absl::StatusOr<float*> {
    ASSIGN_OR_RETURN(void* p, DeviceAlloc(n * sizeof(float), what));
    return static_cast<float*>(p);
  };

  // A projection of `rows` x `cols` made of `parts` (checkpoint tensor, rows) stacked in
  // order: 16-bit, or fp8 codes + per-row scales (each part quantized by rows, which is
  // the quantization of the stacked matrix).
  struct Part {
    std::string name;
    int64_t rows;
  };
  const Fp8WeightLoader default_fp8_loader = [&](const std::string& name, int64_t rows, int64_t cols, uint8_t* codes,
                                                 float* scales, void* staging) {
    RETURN_IF_ERROR(loader(name, rows * cols, staging, w16));
    return QuantizeOnDevice(staging, w16, rows, cols, codes, scales);
  };
  const Fp8WeightLoader& load_fp8 = fp8_loader != nullptr ? *fp8_loader : default_fp8_loader;
  auto load_projection = [&](int64_t rows, int64_t cols, const std::vector<Part>& parts, const char* what,
                             Raw16** w, Fp8Matrix* w8) -> absl::Status {
    if (!fp8_weights_) {
      ASSIGN_OR_RETURN(*w, alloc_16(rows * cols, what));
      int64_t row = 0;
      for (const Part& part : parts) {
        RETURN_IF_ERROR(loader(part.name, part.rows * cols, *w + row * cols, w16));
        row += part.rows;
      }
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(void* codes, DeviceAlloc(rows * cols, what));
    w8->codes = static_cast<uint8_t*>(codes);
    ASSIGN_OR_RETURN(w8->scales, alloc_f32(rows, what));
    int64_t row = 0;
    for (const Part& part : parts) {
      RETURN_IF_ERROR(load_fp8(part.name, part.rows, cols, w8->codes + row * cols, w8->scales + row, fp8_scratch_));
      row += part.rows;
    }
    return absl::OkStatus();
  };

  // Weights.
  if (fp8_weights_) {
    ASSIGN_OR_RETURN(fp8_scratch_, alloc_16(MaxProjectionElements(), "fp8 dequantization scratch"));
    ASSIGN_OR_RETURN(fp8_partial_, alloc_f32(Fp8PartialFloats(), "fp8 projection partials"));
    CUDA_RETURN_IF_ERROR(cuda::SkinnyFp8Init());
  }
  ASSIGN_OR_RETURN(embed_, alloc_16(config_.vocab_size * h, "embeddings"));
  RETURN_IF_ERROR(loader("model.embed_tokens.weight", config_.vocab_size * h, embed_, w16));
  if (config_.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    ASSIGN_OR_RETURN(lm_head_, alloc_16(config_.vocab_size * h, "lm_head"));
    RETURN_IF_ERROR(loader("lm_head.weight", config_.vocab_size * h, lm_head_, w16));
  }
  ASSIGN_OR_RETURN(final_norm_, alloc_f32(h, "final norm"));
  RETURN_IF_ERROR(loader("model.norm.weight", h, final_norm_, f32));
  layers_.resize(config_.num_layers);
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    LayerWeights& w = layers_[i];
    RETURN_IF_ERROR(load_projection(qkv, h,
                                    {{LayerName(i, "self_attn.q_proj.weight"), q_dim},
                                     {LayerName(i, "self_attn.k_proj.weight"), kv_dim},
                                     {LayerName(i, "self_attn.v_proj.weight"), kv_dim}},
                                    "qkv weights", &w.qkv, &w.qkv8));
    if (config_.attention_bias) {
      ASSIGN_OR_RETURN(w.qkv_bias, alloc_f32(qkv, "qkv bias"));
      RETURN_IF_ERROR(loader(LayerName(i, "self_attn.q_proj.bias"), q_dim, w.qkv_bias, f32));
      RETURN_IF_ERROR(
          loader(LayerName(i, "self_attn.k_proj.bias"), kv_dim, w.qkv_bias + q_dim, f32));
      RETURN_IF_ERROR(loader(LayerName(i, "self_attn.v_proj.bias"), kv_dim,
                             w.qkv_bias + q_dim + kv_dim, f32));
    }
    if (config_.qk_norm) {
      ASSIGN_OR_RETURN(w.q_norm, alloc_f32(config_.head_dim, "q norm"));
      ASSIGN_OR_RETURN(w.k_norm, alloc_f32(config_.head_dim, "k norm"));
      RETURN_IF_ERROR(
          loader(LayerName(i, "self_attn.q_norm.weight"), config_.head_dim, w.q_norm, f32));
      RETURN_IF_ERROR(
          loader(LayerName(i, "self_attn.k_norm.weight"), config_.head_dim, w.k_norm, f32));
    }
    RETURN_IF_ERROR(load_projection(h, q_dim, {{LayerName(i, "self_attn.o_proj.weight"), h}}, "o weights", &w.o,
                                    &w.o8));
    RETURN_IF_ERROR(load_projection(2 * inter, h,
                                    {{LayerName(i, "mlp.gate_proj.weight"), inter},
                                     {LayerName(i, "mlp.up_proj.weight"), inter}},
                                    "gate/up weights", &w.gate_up, &w.gate_up8));
    RETURN_IF_ERROR(load_projection(h, inter, {{LayerName(i, "mlp.down_proj.weight"), h}}, "down weights", &w.down,
                                    &w.down8));
    ASSIGN_OR_RETURN(w.input_norm, alloc_f32(h, "input norm"));
    RETURN_IF_ERROR(loader(LayerName(i, "input_layernorm.weight"), h, w.input_norm, f32));
    ASSIGN_OR_RETURN(w.post_norm, alloc_f32(h, "post-attention norm"));
    RETURN_IF_ERROR(
        loader(LayerName(i, "post_attention_layernorm.weight"), h, w.post_norm, f32));
  }
  std::vector<float> inv_freq(config_.head_dim / 2);
  RopeInverseFrequencies(config_.head_dim, config_.rope_theta, config_.rope_scaling,
                         inv_freq.data());
  ASSIGN_OR_RETURN(inv_freq_, alloc_f32(config_.head_dim / 2, "rope"));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(inv_freq_, inv_freq.data(), inv_freq.size() * sizeof(float),
                                  cudaMemcpyHostToDevice));

  // Workspace.
  const int64_t t = max_tokens_;
  const int64_t wide = std::max(qkv, 2 * inter);
  ASSIGN_OR_RETURN(ws_.residual, alloc_f32(t * h, "residual"));
  ASSIGN_OR_RETURN(ws_.normed, alloc_16(t * h, "normed"));
  ASSIGN_OR_RETURN(ws_.wide, alloc_16(t * wide, "qkv/gate_up"));
  ASSIGN_OR_RETURN(ws_.q, alloc_16(t * q_dim, "q"));
  ASSIGN_OR_RETURN(ws_.attn, alloc_16(t * q_dim, "attention out"));
  ASSIGN_OR_RETURN(ws_.proj, alloc_16(t * h, "projection out"));
  ASSIGN_OR_RETURN(ws_.act, alloc_16(t * inter, "activation"));
  ASSIGN_OR_RETURN(ws_.logits, alloc_f32(max_chunks_ * config_.vocab_size, "logits"));
  ASSIGN_OR_RETURN(void* ids, DeviceAlloc(max_chunks_ * sizeof(int32_t), "token ids"));
  ws_.token_ids = static_cast<int32_t*>(ids);
  ASSIGN_OR_RETURN(ws_.argmax_scratch,
                   DeviceAlloc(cuda::ArgmaxScratchBytes(static_cast<int>(max_chunks_)),
                               "argmax partials"));
  ASSIGN_OR_RETURN(void* masks, DeviceAlloc(max_chunks_ * ((config_.vocab_size + 31) / 32) * 4, "grammar masks"));
  ws_.masks = static_cast<uint32_t*>(masks);
  if (!fast_attention_) {  // the generic attention's split partials
    ASSIGN_OR_RETURN(ws_.partial_out,
                     alloc_f32(partial_slots_ * config_.num_heads * config_.head_dim, "partials"));
    ASSIGN_OR_RETURN(ws_.partial_ml, alloc_f32(partial_slots_ * config_.num_heads * 2, "partials"));
  }
  constexpr size_t kCublasWorkspace = 32 << 20;
  ASSIGN_OR_RETURN(ws_.cublas, DeviceAlloc(kCublasWorkspace, "cublas workspace"));
  CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(cublas_, ws_.cublas, kCublasWorkspace));
  // W8A8 computes in bf16 only (the fp8 kernels' outputs, as they were validated).
  if (fp8_weights_ && options_.cuda.fp8_activations && compute_dtype_ == DType::kBF16) {
    RETURN_IF_ERROR(InitW8A8(kCublasWorkspace));
  }
  if (skinny_mode_ != 0) {
    // Tile counters: zero once; every SkinnyGemm leaves them at zero (graph replays too).
    ASSIGN_OR_RETURN(skinny_workspace_, DeviceAlloc(SkinnyGemmBytes(), "skinny projection workspace"));
    CUDA_RETURN_IF_ERROR(cudaMemset(skinny_workspace_, 0, SkinnyGemmBytes()));
    CUDA_RETURN_IF_ERROR(cuda::SkinnyGemmInit());
  }
  if (fast_attention_) {
    // Decode partials for the largest split count any decode batch size may pick.
    size_t out_floats = 1, ml_floats = 1;
    for (int32_t r = 1; r <= max_chunks_; ++r) {
      const int32_t splits = cuda::DecodeMaxSplits(r, kv_heads, sm_count_);
      out_floats = std::max(out_floats, cuda::DecodePartialFloats(r, splits, heads, head_dim));
      ml_floats = std::max(ml_floats, cuda::DecodePartialMlFloats(r, splits, heads));
    }
    ASSIGN_OR_RETURN(decode_partial_out_, alloc_f32(out_floats, "decode partials"));
    ASSIGN_OR_RETURN(decode_partial_ml_, alloc_f32(ml_floats, "decode partials"));
    // Split counters: zero once; every launch leaves them at zero (graph replays too).
    const size_t counters = cuda::DecodeCounterInts(static_cast<int32_t>(max_chunks_), kv_heads);
    ASSIGN_OR_RETURN(void* c, DeviceAlloc(counters * sizeof(uint32_t), "decode split counters"));
    decode_split_counters_ = static_cast<uint32_t*>(c);
    CUDA_RETURN_IF_ERROR(cudaMemset(decode_split_counters_, 0, counters * sizeof(uint32_t)));
  }
  ASSIGN_OR_RETURN(void* meta, DeviceAlloc(meta_capacity_, "step metadata"));
  ws_.meta = static_cast<uint8_t*>(meta);
  CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&meta_host_), meta_capacity_,
                                     cudaHostAllocDefault));
  CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&ids_host_),
                                     max_chunks_ * sizeof(int32_t), cudaHostAllocDefault));
  ASSIGN_OR_RETURN(chain_, DeviceSamplerChain::Create(max_chunks_, config_.vocab_size,
                                                      [this](size_t bytes, const char* what) {
                                                        return DeviceAlloc(bytes, what);
                                                      }));
  RETURN_IF_ERROR(InitHostKvStaging());
  // The scratch block (KV of graph padding rows) is allocated with the pool, one block past
  // it; reserve its bytes now so the pool the engine sizes from device_bytes_in_use() fits.
  memory_.Reserve(static_cast<int64_t>(layout_.BlockBytes()));
  CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  memory_.Trace("weights and workspace allocated");
  return MeasureWarmRuntime();
}

absl::Status CudaBackend::InitW8A8(size_t lt_workspace_bytes) {
  // Both W8A8 kernels read 16-byte pieces of code rows: k a multiple of 16, n of 8.
  const int64_t h = config_.hidden_size, inter = config_.intermediate_size, q_dim = config_.q_dim();
  const int64_t qkv = q_dim + 2 * config_.kv_dim();
  for (auto [k, n] : {std::pair{h, qkv}, std::pair{q_dim, h}, std::pair{h, 2 * inter}, std::pair{inter, h}}) {
    if (k % 16 != 0 || n % 8 != 0) return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<cuda::Fp8Gemm>> gemm = cuda::Fp8Gemm::Create(ws_.cublas, lt_workspace_bytes);
  if (gemm.ok()) {
    fp8_gemm_ = std::move(*gemm);
  } else {
    // Not an error: steps above the skinny sizes dequantize into the scratch instead.
    Log(LogLevel::kInfo, "cuda backend: fp8 projections of large steps dequantize the weights: ",
        gemm.status().message());
  }
  if (fp8_gemm_ == nullptr && skinny_mode_ == 0) return absl::OkStatus();  // no W8A8 kernel here
  const int64_t widest = std::max({config_.hidden_size, config_.q_dim(), config_.intermediate_size});
  ASSIGN_OR_RETURN(void* codes, DeviceAlloc(static_cast<size_t>(max_tokens_ * widest), "fp8 activations"));
  ws_.x8 = static_cast<uint8_t*>(codes);
  ASSIGN_OR_RETURN(void* scales, DeviceAlloc(static_cast<size_t>(max_tokens_) * sizeof(float), "fp8 activation scales"));
  ws_.x8_scales = static_cast<float*>(scales);
  if (fp8_gemm_ != nullptr) {
    // The dequantization scratch served only the weights' load from here on.
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    memory_.Free(fp8_scratch_);
    fp8_scratch_ = nullptr;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::AllocateKvPool(int64_t num_blocks) {
  if (kv_pool_ != nullptr) return absl::FailedPreconditionError("KV pool already allocated");
  if (num_blocks <= 0) return absl::InvalidArgumentError("num_blocks must be positive");
  const size_t bytes = static_cast<size_t>(num_blocks + 1) * layout_.BlockBytes();
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (bytes > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("cuda backend: KV pool of ", num_blocks,
                                                     " blocks needs ", bytes, " bytes, ",
                                                     free_bytes, " free on the device"));
  }
  memory_.Unreserve(static_cast<int64_t>(layout_.BlockBytes()));  // the reservation of Init
  absl::StatusOr<void*> pool = DeviceAlloc(bytes, "KV pool");
  if (!pool.ok()) {
    memory_.Reserve(static_cast<int64_t>(layout_.BlockBytes()));
    return pool.status();
  }
  kv_pool_ = static_cast<Raw16*>(*pool);
  num_blocks_ = num_blocks;
  scratch_block_ = static_cast<int32_t>(num_blocks);
  memory_.MarkInitDone();
  memory_.Trace("KV pool allocated");
  return absl::OkStatus();
}

const void* CudaBackend::BlockDevicePointer(int32_t block) const {
  return reinterpret_cast<const uint8_t*>(kv_pool_) +
         static_cast<size_t>(block) * layout_.BlockBytes();
}

absl::Status CudaBackend::ValidateBlock(int32_t block) const {
  if (block < 0 || block >= num_blocks_) {
    return absl::InvalidArgumentError(
        absl::StrCat("block id ", block, " out of range [0, ", num_blocks_, ")"));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::ValidateBatch(const ForwardBatch& batch) const {
  if (kv_pool_ == nullptr) return absl::FailedPreconditionError("KV pool not allocated");
  for (size_t c = 0; c < batch.chunks.size(); ++c) {
    const SequenceChunk& chunk = batch.chunks[c];
    if (chunk.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " has no tokens"));
    }
    if (chunk.start_position < 0) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " has negative start"));
    }
    const int64_t end = chunk.start_position + static_cast<int64_t>(chunk.tokens.size());
    if (end > INT32_MAX) return absl::InvalidArgumentError("context too long");
    const int64_t blocks = (end + layout_.block_tokens - 1) / layout_.block_tokens;
    RETURN_IF_ERROR(ValidateHostKv(chunk, c));
    const int64_t device_blocks = blocks - chunk.host_kv.num_blocks();
    if (static_cast<int64_t>(chunk.block_table.size()) < device_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " block table has ",
                                                     chunk.block_table.size(),
                                                     " entries, needs ", device_blocks));
    }
    for (int64_t j = 0; j < device_blocks; ++j) RETURN_IF_ERROR(ValidateBlock(chunk.block_table[j]));
    for (int32_t token : chunk.tokens) {
      if (token < 0 || token >= config_.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("token ", token, " out of range [0, ", config_.vocab_size, ")"));
      }
    }
  }
  return absl::OkStatus();
}

template <typename Fn>
absl::Status CudaBackend::RunAll(const ForwardBatch& batch, Fn&& run_piece) {
  RETURN_IF_ERROR(ValidateBatch(batch));
  int64_t tokens = 0, host_blocks = 0;
  for (const SequenceChunk& c : batch.chunks) {
    tokens += static_cast<int64_t>(c.tokens.size());
    host_blocks += c.host_kv.num_blocks();
  }
  if (tokens <= max_tokens_ && static_cast<int64_t>(batch.chunks.size()) <= max_chunks_ &&
      static_cast<int64_t>(batch.num_logit_rows()) <= max_chunks_ && host_blocks <= host_kv_slots_) {
    return run_piece(batch);
  }
  for (const ForwardBatch& piece : cuda::SplitBatch(batch, max_tokens_, max_chunks_, host_kv_slots_)) {
    RETURN_IF_ERROR(run_piece(piece));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Forward(const ForwardBatch& batch, std::vector<float>* logits) {
  logits->clear();
  return RunAll(batch, [&](const ForwardBatch& piece) { return RunStep(piece, logits, nullptr); });
}

absl::Status CudaBackend::ForwardGreedy(const ForwardBatch& batch,
                                        std::vector<int32_t>* token_ids) {
  token_ids->clear();
  size_t next_row = 0;  // pieces keep chunk order: each takes the next logits rows
  return RunAll(batch, [&](const ForwardBatch& piece) {
    const size_t first_row = next_row;
    next_row += piece.num_logit_rows();
    return RunStep(piece, nullptr, token_ids, {}, batch.masks, first_row);
  });
}

absl::Status CudaBackend::ForwardSampled(const ForwardBatch& batch,
                                         std::span<const RowSampling> rows,
                                         std::vector<int32_t>* token_ids) {
  RETURN_IF_ERROR(ValidateRowSampling(rows, batch.num_logit_rows()));
  token_ids->clear();
  size_t next_row = 0;  // pieces keep chunk order: each takes the next rows
  return RunAll(batch, [&](const ForwardBatch& piece) {
    const std::span<const RowSampling> mine = rows.subspan(next_row, piece.num_logit_rows());
    const size_t first_row = next_row;
    next_row += mine.size();
    return RunStep(piece, nullptr, token_ids, mine, batch.masks, first_row);
  });
}

absl::Status CudaBackend::ForwardAndSample(const ForwardBatch& batch, const SamplingBatch& sampling,
                                           SamplingResult* result) {
  RETURN_IF_ERROR(ValidateSamplingBatch(sampling, batch.num_logit_rows(), config_.vocab_size));
  if (!sampling.scores.empty()) return Backend::ForwardAndSample(batch, sampling, result);
  result->Clear();
  result->tokens.assign(sampling.samples.size(), 0);
  result->sample_logprobs.assign(sampling.samples.size(), LogprobEntry{});
  // Samples by row, so each piece takes a contiguous run of them.
  std::vector<int32_t> order(sampling.samples.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return sampling.samples[static_cast<size_t>(a)].logits_row < sampling.samples[static_cast<size_t>(b)].logits_row;
  });
  int64_t first_row = 0;
  size_t next = 0;
  return RunAll(batch, [&](const ForwardBatch& piece) {
    const int64_t rows = static_cast<int64_t>(piece.num_logit_rows());
    size_t end = next;
    while (end < order.size() && sampling.samples[static_cast<size_t>(order[end])].logits_row < first_row + rows) ++end;
    ChainPiece chain{&sampling, std::span<const int32_t>(order).subspan(next, end - next), first_row, result};
    next = end;
    first_row += rows;
    return RunStep(piece, nullptr, nullptr, {}, batch.masks, static_cast<size_t>(chain.first_row), &chain);
  });
}

}  // namespace kvtier
