// CudaBackend (see cuda_backend.h): creation, weights, step metadata, the layer loop.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_check.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"
#include "model/tensor.h"

namespace kvtier {
namespace cuda {

std::vector<ForwardBatch> SplitBatch(const ForwardBatch& batch, int64_t max_tokens,
                                     int64_t max_chunks) {
  std::vector<ForwardBatch> pieces;
  ForwardBatch current;
  int64_t current_tokens = 0;
  auto flush = [&] {
    if (!current.chunks.empty()) pieces.push_back(std::move(current));
    current = ForwardBatch();
    current_tokens = 0;
  };
  for (const SequenceChunk& chunk : batch.chunks) {
    const int64_t n = static_cast<int64_t>(chunk.tokens.size());
    int64_t offset = 0;
    while (offset < n) {
      if (static_cast<int64_t>(current.chunks.size()) == max_chunks ||
          current_tokens == max_tokens) {
        flush();
      }
      const int64_t take = std::min(n - offset, max_tokens - current_tokens);
      SequenceChunk piece;
      piece.tokens = chunk.tokens.subspan(offset, take);
      piece.start_position = chunk.start_position + offset;
      piece.block_table = chunk.block_table;
      piece.need_logits = chunk.need_logits && offset + take == n;
      current.chunks.push_back(piece);
      current_tokens += take;
      offset += take;
    }
  }
  flush();
  return pieces;
}

}  // namespace cuda

namespace {

using cuda::bf16;

size_t Align(size_t x) { return (x + 255) & ~size_t{255}; }

std::string LayerName(int64_t layer, const char* suffix) {
  return absl::StrCat("model.layers.", layer, ".", suffix);
}

// Copies a checkpoint tensor to the device, converted to bf16 or fp32.
absl::Status LoadFromCheckpoint(const Checkpoint& checkpoint, const std::string& name,
                                int64_t num_elements, void* dst, bool as_f32) {
  ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
  if (tensor.num_elements() != num_elements) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has ",
                                                   tensor.num_elements(), " elements, expected ",
                                                   num_elements));
  }
  if (!as_f32 && tensor.dtype == DType::kBF16) {
    CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, tensor.data, tensor.nbytes(), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  std::vector<float> f32;
  ToFloat32(tensor, &f32);
  if (as_f32) {
    CUDA_RETURN_IF_ERROR(
        cudaMemcpy(dst, f32.data(), f32.size() * sizeof(float), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  std::vector<uint16_t> b16(f32.size());
  for (size_t i = 0; i < f32.size(); ++i) b16[i] = FloatToBf16(f32[i]);
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(dst, b16.data(), b16.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
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

CudaBackend::CudaBackend(const ModelConfig& config, const BackendOptions& options)
    : config_(config), options_(options) {
  layout_.num_layers = config.num_layers;
  layout_.num_kv_heads = config.num_kv_heads;
  layout_.head_dim = config.head_dim;
  layout_.block_tokens = options.block_tokens;
  layout_.dtype = DType::kBF16;
  max_tokens_ = std::max<int64_t>(1, options.max_tokens_per_step);
  max_chunks_ = std::clamp<int64_t>(options.max_sequences, 1, max_tokens_);
  partial_slots_ = std::max<int64_t>(max_tokens_, 16 * max_chunks_);
  const int64_t max_context =
      std::clamp<int64_t>(config.max_position_embeddings, 4096, int64_t{1} << 18);
  max_table_entries_ =
      max_chunks_ * ((max_context + options.block_tokens - 1) / options.block_tokens);
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
  for (void* p : allocations_) cudaFree(p);
  if (meta_host_ != nullptr) cudaFreeHost(meta_host_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
  for (cudaEvent_t e : all_events_) cudaEventDestroy(e);
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const Checkpoint& checkpoint,
                                                                 const BackendOptions& options) {
  return CreateImpl(checkpoint.config(), options,
                    [&checkpoint](const std::string& name, int64_t n, void* dst, bool as_f32) {
                      return LoadFromCheckpoint(checkpoint, name, n, dst, as_f32);
                    });
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::CreateWithRandomWeights(
    const ModelConfig& config, const BackendOptions& options, uint64_t seed) {
  uint64_t counter = seed * 1000003;
  return CreateImpl(config, options,
                    [&counter](const std::string& name, int64_t n, void* dst, bool as_f32) {
                      ++counter;
                      cudaError_t err;
                      if (as_f32) {
                        const bool is_norm = name.find("norm") != std::string::npos;
                        err = cuda::FillRandomF32(static_cast<float*>(dst), n, counter,
                                                  is_norm ? 1.0f : 0.0f, is_norm ? 0.1f : 0.02f,
                                                  nullptr);
                      } else {
                        err = cuda::FillRandomBf16(static_cast<bf16*>(dst), n, counter, 0.0f,
                                                   0.035f, nullptr);
                      }
                      CUDA_RETURN_IF_ERROR(err);
                      return absl::OkStatus();
                    });
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::CreateImpl(
    const ModelConfig& config, const BackendOptions& options, const WeightLoader& loader) {
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
  std::unique_ptr<CudaBackend> backend(new CudaBackend(config, options));
  RETURN_IF_ERROR(backend->Init(loader));
  return backend;
}

int64_t CudaBackend::WeightBytes() const {
  const int64_t h = config_.hidden_size, inter = config_.intermediate_size;
  const int64_t qkv = config_.q_dim() + 2 * config_.kv_dim();
  int64_t per_layer = 2 * (qkv * h + h * config_.q_dim() + 2 * inter * h + h * inter) +
                      4 * (2 * h + 2 * config_.head_dim + qkv);
  int64_t total = config_.num_layers * per_layer + 2 * config_.vocab_size * h + 4 * h;
  if (!config_.tie_word_embeddings) total += 2 * config_.vocab_size * h;
  return total;
}

int64_t CudaBackend::WorkspaceBytes() const {
  const int64_t t = max_tokens_, h = config_.hidden_size, inter = config_.intermediate_size;
  const int64_t wide = std::max(config_.q_dim() + 2 * config_.kv_dim(), 2 * inter);
  return t * h * 4 + t * h * 2 + t * wide * 2 + 2 * t * config_.q_dim() * 2 + t * h * 2 +
         t * inter * 2 + max_chunks_ * config_.vocab_size * 4 + max_chunks_ * 4 +
         partial_slots_ * config_.num_heads * (config_.head_dim + 2) * 4 + (32 << 20) +
         static_cast<int64_t>(meta_capacity_) + 64 * 256;
}

absl::StatusOr<void*> CudaBackend::DeviceAlloc(size_t bytes, const char* what) {
  if (options_.gpu_mem_limit_bytes > 0 &&
      device_bytes_ + static_cast<int64_t>(bytes) > options_.gpu_mem_limit_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cuda backend: ", what, " needs ", bytes, " bytes; ", device_bytes_,
        " already held, limit ", options_.gpu_mem_limit_bytes));
  }
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, std::max<size_t>(bytes, 1));
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("cuda backend: cudaMalloc of ", bytes,
                                                     " bytes for ", what,
                                                     " failed: ", cudaGetErrorString(err)));
  }
  allocations_.push_back(ptr);
  device_bytes_ += static_cast<int64_t>(bytes);
  if (init_done_) ++allocations_after_init_;
  return ptr;
}

absl::Status CudaBackend::Init(const WeightLoader& loader) {
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
  // The CUDA runtime's own device memory (context, module images, cuBLAS) counts against
  // gpu_mem_limit too: measured once per process, right after the context exists (what the
  // device shows in use then, at most 1 GiB), plus 128 MiB for modules loaded lazily later.
  // Without it the process held ~590 MiB more than the backend counted (H200, W3).
  static const int64_t runtime_overhead = [] {
    size_t free_now = 0, total_now = 0;
    if (cudaMemGetInfo(&free_now, &total_now) != cudaSuccess) {
      cudaGetLastError();
      return int64_t{512} << 20;
    }
    return std::clamp<int64_t>(static_cast<int64_t>(total_now - free_now), 0, int64_t{1} << 30) +
           (int64_t{128} << 20);
  }();
  device_bytes_ += runtime_overhead;

  // Metadata capacity: token arrays, chunk arrays, block tables, items.
  meta_capacity_ = Align(5 * max_tokens_ * 4) + 2 * Align((max_chunks_ + 1) * 4) +
                   Align(max_table_entries_ * 4) +
                   Align(max_items_ * sizeof(cuda::AttentionItem)) + 4 * 256;

  const int64_t needed = device_bytes_ + WeightBytes() + WorkspaceBytes();
  if (options_.gpu_mem_limit_bytes > 0 && needed > options_.gpu_mem_limit_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cuda backend: runtime (", device_bytes_, " bytes) + weights (", WeightBytes(),
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
  auto alloc_bf16 = [&](int64_t n, const char* what) -> absl::StatusOr<bf16*> {
    ASSIGN_OR_RETURN(void* p, DeviceAlloc(n * sizeof(bf16), what));
    return static_cast<bf16*>(p);
  };
  auto alloc_f32 = [&](int64_t n, const char* what) -> absl::StatusOr<float*> {
    ASSIGN_OR_RETURN(void* p, DeviceAlloc(n * sizeof(float), what));
    return static_cast<float*>(p);
  };

  // Weights.
  ASSIGN_OR_RETURN(embed_, alloc_bf16(config_.vocab_size * h, "embeddings"));
  RETURN_IF_ERROR(loader("model.embed_tokens.weight", config_.vocab_size * h, embed_, false));
  if (config_.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    ASSIGN_OR_RETURN(lm_head_, alloc_bf16(config_.vocab_size * h, "lm_head"));
    RETURN_IF_ERROR(loader("lm_head.weight", config_.vocab_size * h, lm_head_, false));
  }
  ASSIGN_OR_RETURN(final_norm_, alloc_f32(h, "final norm"));
  RETURN_IF_ERROR(loader("model.norm.weight", h, final_norm_, true));
  layers_.resize(config_.num_layers);
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    LayerWeights& w = layers_[i];
    ASSIGN_OR_RETURN(w.qkv, alloc_bf16(qkv * h, "qkv weights"));
    RETURN_IF_ERROR(loader(LayerName(i, "self_attn.q_proj.weight"), q_dim * h, w.qkv, false));
    RETURN_IF_ERROR(
        loader(LayerName(i, "self_attn.k_proj.weight"), kv_dim * h, w.qkv + q_dim * h, false));
    RETURN_IF_ERROR(loader(LayerName(i, "self_attn.v_proj.weight"), kv_dim * h,
                           w.qkv + (q_dim + kv_dim) * h, false));
    if (config_.attention_bias) {
      ASSIGN_OR_RETURN(w.qkv_bias, alloc_f32(qkv, "qkv bias"));
      RETURN_IF_ERROR(loader(LayerName(i, "self_attn.q_proj.bias"), q_dim, w.qkv_bias, true));
      RETURN_IF_ERROR(
          loader(LayerName(i, "self_attn.k_proj.bias"), kv_dim, w.qkv_bias + q_dim, true));
      RETURN_IF_ERROR(loader(LayerName(i, "self_attn.v_proj.bias"), kv_dim,
                             w.qkv_bias + q_dim + kv_dim, true));
    }
    if (config_.qk_norm) {
      ASSIGN_OR_RETURN(w.q_norm, alloc_f32(config_.head_dim, "q norm"));
      ASSIGN_OR_RETURN(w.k_norm, alloc_f32(config_.head_dim, "k norm"));
      RETURN_IF_ERROR(
          loader(LayerName(i, "self_attn.q_norm.weight"), config_.head_dim, w.q_norm, true));
      RETURN_IF_ERROR(
          loader(LayerName(i, "self_attn.k_norm.weight"), config_.head_dim, w.k_norm, true));
    }
    ASSIGN_OR_RETURN(w.o, alloc_bf16(h * q_dim, "o weights"));
    RETURN_IF_ERROR(loader(LayerName(i, "self_attn.o_proj.weight"), h * q_dim, w.o, false));
    ASSIGN_OR_RETURN(w.gate_up, alloc_bf16(2 * inter * h, "gate/up weights"));
    RETURN_IF_ERROR(loader(LayerName(i, "mlp.gate_proj.weight"), inter * h, w.gate_up, false));
    RETURN_IF_ERROR(
        loader(LayerName(i, "mlp.up_proj.weight"), inter * h, w.gate_up + inter * h, false));
    ASSIGN_OR_RETURN(w.down, alloc_bf16(h * inter, "down weights"));
    RETURN_IF_ERROR(loader(LayerName(i, "mlp.down_proj.weight"), h * inter, w.down, false));
    ASSIGN_OR_RETURN(w.input_norm, alloc_f32(h, "input norm"));
    RETURN_IF_ERROR(loader(LayerName(i, "input_layernorm.weight"), h, w.input_norm, true));
    ASSIGN_OR_RETURN(w.post_norm, alloc_f32(h, "post-attention norm"));
    RETURN_IF_ERROR(
        loader(LayerName(i, "post_attention_layernorm.weight"), h, w.post_norm, true));
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
  ASSIGN_OR_RETURN(ws_.normed, alloc_bf16(t * h, "normed"));
  ASSIGN_OR_RETURN(ws_.wide, alloc_bf16(t * wide, "qkv/gate_up"));
  ASSIGN_OR_RETURN(ws_.q, alloc_bf16(t * q_dim, "q"));
  ASSIGN_OR_RETURN(ws_.attn, alloc_bf16(t * q_dim, "attention out"));
  ASSIGN_OR_RETURN(ws_.proj, alloc_bf16(t * h, "projection out"));
  ASSIGN_OR_RETURN(ws_.act, alloc_bf16(t * inter, "activation"));
  ASSIGN_OR_RETURN(ws_.logits, alloc_f32(max_chunks_ * config_.vocab_size, "logits"));
  ASSIGN_OR_RETURN(void* ids, DeviceAlloc(max_chunks_ * sizeof(int32_t), "token ids"));
  ws_.token_ids = static_cast<int32_t*>(ids);
  ASSIGN_OR_RETURN(ws_.partial_out,
                   alloc_f32(partial_slots_ * config_.num_heads * config_.head_dim, "partials"));
  ASSIGN_OR_RETURN(ws_.partial_ml, alloc_f32(partial_slots_ * config_.num_heads * 2, "partials"));
  constexpr size_t kCublasWorkspace = 32 << 20;
  ASSIGN_OR_RETURN(ws_.cublas, DeviceAlloc(kCublasWorkspace, "cublas workspace"));
  CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(cublas_, ws_.cublas, kCublasWorkspace));
  ASSIGN_OR_RETURN(void* meta, DeviceAlloc(meta_capacity_, "step metadata"));
  ws_.meta = static_cast<uint8_t*>(meta);
  CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&meta_host_), meta_capacity_,
                                     cudaHostAllocDefault));
  CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

absl::Status CudaBackend::AllocateKvPool(int64_t num_blocks) {
  if (kv_pool_ != nullptr) return absl::FailedPreconditionError("KV pool already allocated");
  if (num_blocks <= 0) return absl::InvalidArgumentError("num_blocks must be positive");
  const size_t bytes = static_cast<size_t>(num_blocks) * layout_.BlockBytes();
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (bytes > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("cuda backend: KV pool of ", num_blocks,
                                                     " blocks needs ", bytes, " bytes, ",
                                                     free_bytes, " free on the device"));
  }
  ASSIGN_OR_RETURN(void* pool, DeviceAlloc(bytes, "KV pool"));
  kv_pool_ = static_cast<bf16*>(pool);
  num_blocks_ = num_blocks;
  init_done_ = true;
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
    if (static_cast<int64_t>(chunk.block_table.size()) < blocks) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " block table has ",
                                                     chunk.block_table.size(),
                                                     " entries, needs ", blocks));
    }
    for (int64_t j = 0; j < blocks; ++j) RETURN_IF_ERROR(ValidateBlock(chunk.block_table[j]));
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
  int64_t tokens = 0;
  for (const SequenceChunk& c : batch.chunks) tokens += static_cast<int64_t>(c.tokens.size());
  if (tokens <= max_tokens_ && static_cast<int64_t>(batch.chunks.size()) <= max_chunks_) {
    return run_piece(batch);
  }
  for (const ForwardBatch& piece : cuda::SplitBatch(batch, max_tokens_, max_chunks_)) {
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
  return RunAll(batch,
                [&](const ForwardBatch& piece) { return RunStep(piece, nullptr, token_ids); });
}

absl::Status CudaBackend::Gemm(const bf16* x, const bf16* w, int rows, int k, int n, void* out,
                               bool out_f32) {
  // Row-major out(rows, n) = x(rows, k) * w(n, k)^T, i.e. column-major out^T = w^T' * x'.
  if (cuda::GemvSupported(rows, k, x, w)) {
    CUDA_RETURN_IF_ERROR(cuda::GemvSmallRows(x, w, rows, k, n, out, out_f32, stream_));
    return absl::OkStatus();
  }
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_RETURN_IF_ERROR(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &alpha, w,
                                      CUDA_R_16BF, k, x, CUDA_R_16BF, k, &beta, out,
                                      out_f32 ? CUDA_R_32F : CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

absl::Status CudaBackend::RunStep(const ForwardBatch& piece, std::vector<float>* logits,
                                  std::vector<int32_t>* token_ids) {
  const int64_t num_chunks = static_cast<int64_t>(piece.chunks.size());
  shapes_.resize(num_chunks);
  int64_t num_tokens = 0, num_entries = 0, num_logits = 0;
  for (int64_t c = 0; c < num_chunks; ++c) {
    const SequenceChunk& chunk = piece.chunks[c];
    shapes_[c].num_tokens = static_cast<int32_t>(chunk.tokens.size());
    shapes_[c].start_position = chunk.start_position;
    num_tokens += static_cast<int64_t>(chunk.tokens.size());
    num_entries += (chunk.start_position + static_cast<int64_t>(chunk.tokens.size()) +
                    layout_.block_tokens - 1) /
                   layout_.block_tokens;
    if (chunk.need_logits) ++num_logits;
  }
  if (num_tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR(cuda::PlanAttention(shapes_, plan_options_, &plan_));
  if (num_entries > max_table_entries_ ||
      static_cast<int64_t>(plan_.items.size()) > max_items_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda backend: step needs ", num_entries, " block-table entries (capacity ",
                     max_table_entries_, ") and ", plan_.items.size(),
                     " attention items (capacity ", max_items_, ")"));
  }

  // Step metadata: one pinned buffer, one host-to-device copy.
  MetaLayout m;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t offset = at;
    at += Align(bytes);
    return offset;
  };
  m.ids = take(num_tokens * 4);
  m.pos = take(num_tokens * 4);
  m.chunk = take(num_tokens * 4);
  m.num_splits = take(num_tokens * 4);
  m.partial_base = take(num_tokens * 4);
  m.logit_rows = take(std::max<int64_t>(num_logits, 1) * 4);
  m.indptr = take((num_chunks + 1) * 4);
  m.indices = take(num_entries * 4);
  m.items = take(plan_.items.size() * sizeof(cuda::AttentionItem));
  m.bytes = at;
  if (m.bytes > meta_capacity_) return absl::InternalError("step metadata over capacity");
  auto host = [&](size_t offset) { return reinterpret_cast<int32_t*>(meta_host_ + offset); };
  int32_t* ids = host(m.ids);
  int32_t* pos = host(m.pos);
  int32_t* chunk_of = host(m.chunk);
  int32_t* logit_rows = host(m.logit_rows);
  int32_t* indptr = host(m.indptr);
  int32_t* indices = host(m.indices);
  int64_t t = 0, entry = 0, logit = 0;
  for (int64_t c = 0; c < num_chunks; ++c) {
    const SequenceChunk& chunk = piece.chunks[c];
    for (size_t i = 0; i < chunk.tokens.size(); ++i, ++t) {
      ids[t] = chunk.tokens[i];
      pos[t] = static_cast<int32_t>(chunk.start_position + static_cast<int64_t>(i));
      chunk_of[t] = static_cast<int32_t>(c);
    }
    if (chunk.need_logits) logit_rows[logit++] = static_cast<int32_t>(t - 1);
    indptr[c] = static_cast<int32_t>(entry);
    const int64_t blocks = (chunk.start_position + static_cast<int64_t>(chunk.tokens.size()) +
                            layout_.block_tokens - 1) /
                           layout_.block_tokens;
    for (int64_t j = 0; j < blocks; ++j) indices[entry++] = chunk.block_table[j];
  }
  indptr[num_chunks] = static_cast<int32_t>(entry);
  std::memcpy(host(m.num_splits), plan_.num_splits.data(), num_tokens * 4);
  std::memcpy(host(m.partial_base), plan_.partial_base.data(), num_tokens * 4);
  std::memcpy(meta_host_ + m.items, plan_.items.data(),
              plan_.items.size() * sizeof(cuda::AttentionItem));
  RETURN_IF_ERROR(ApplyPrefetchWait());
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(ws_.meta, meta_host_, m.bytes, cudaMemcpyHostToDevice, stream_));
  auto dev = [&](size_t offset) { return reinterpret_cast<int32_t*>(ws_.meta + offset); };

  cuda::StepTokens step_tokens{dev(m.chunk), dev(m.pos), static_cast<int32_t>(num_tokens)};
  cuda::PagedKv kv;
  kv.pool = kv_pool_;
  kv.indices = dev(m.indices);
  kv.indptr = dev(m.indptr);
  kv.block_elements = layout_.ElementsPerBlock();
  kv.num_kv_heads = static_cast<int32_t>(config_.num_kv_heads);
  kv.head_dim = static_cast<int32_t>(config_.head_dim);
  kv.block_tokens = static_cast<int32_t>(layout_.block_tokens);
  cuda::AttentionSplits splits{dev(m.num_splits), dev(m.partial_base), ws_.partial_out,
                               ws_.partial_ml};

  const int rows = static_cast<int>(num_tokens);
  const int h = static_cast<int>(config_.hidden_size);
  const int inter = static_cast<int>(config_.intermediate_size);
  const int q_dim = static_cast<int>(config_.q_dim());
  const int qkv = static_cast<int>(config_.q_dim() + 2 * config_.kv_dim());
  const float eps = static_cast<float>(config_.rms_norm_eps);

  CUDA_RETURN_IF_ERROR(
      cuda::EmbeddingGather(dev(m.ids), embed_, rows, h, ws_.residual, stream_));
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    const LayerWeights& w = layers_[layer];
    CUDA_RETURN_IF_ERROR(cuda::AddRmsNorm(ws_.residual, layer == 0 ? nullptr : ws_.proj,
                                          w.input_norm, nullptr, rows, h, eps, ws_.normed,
                                          stream_));
    RETURN_IF_ERROR(Gemm(ws_.normed, w.qkv, rows, h, qkv, ws_.wide, false));
    cuda::QkvPostParams post;
    post.qkv = ws_.wide;
    post.bias = w.qkv_bias;
    post.q_norm = w.q_norm;
    post.k_norm = w.k_norm;
    post.inv_freq = inv_freq_;
    post.norm_eps = eps;
    post.num_heads = static_cast<int32_t>(config_.num_heads);
    post.layer = static_cast<int32_t>(layer);
    post.q_out = ws_.q;
    CUDA_RETURN_IF_ERROR(cuda::QkvPost(post, step_tokens, kv, stream_));
    cuda::AttentionParams attn;
    attn.q = ws_.q;
    attn.out = ws_.attn;
    attn.items = reinterpret_cast<const cuda::AttentionItem*>(ws_.meta + m.items);
    attn.num_items = static_cast<int32_t>(plan_.items.size());
    attn.num_heads = static_cast<int32_t>(config_.num_heads);
    attn.layer = static_cast<int32_t>(layer);
    attn.max_rows = plan_.max_rows;
    attn.any_split = plan_.any_split;
    CUDA_RETURN_IF_ERROR(cuda::PagedAttention(attn, step_tokens, kv, splits, stream_));
    RETURN_IF_ERROR(Gemm(ws_.attn, w.o, rows, q_dim, h, ws_.proj, false));
    CUDA_RETURN_IF_ERROR(cuda::AddRmsNorm(ws_.residual, ws_.proj, w.post_norm, nullptr, rows,
                                          h, eps, ws_.normed, stream_));
    RETURN_IF_ERROR(Gemm(ws_.normed, w.gate_up, rows, h, 2 * inter, ws_.wide, false));
    CUDA_RETURN_IF_ERROR(cuda::SiluMul(ws_.wide, rows, inter, ws_.act, stream_));
    RETURN_IF_ERROR(Gemm(ws_.act, w.down, rows, inter, h, ws_.proj, false));
  }
  if (num_logits > 0) {
    const int n = static_cast<int>(num_logits);
    CUDA_RETURN_IF_ERROR(cuda::AddRmsNorm(ws_.residual, ws_.proj, final_norm_, dev(m.logit_rows),
                                          n, h, eps, ws_.normed, stream_));
    const int vocab = static_cast<int>(config_.vocab_size);
    RETURN_IF_ERROR(Gemm(ws_.normed, lm_head_, n, h, vocab, ws_.logits, true));
    if (token_ids != nullptr) {
      CUDA_RETURN_IF_ERROR(cuda::ArgmaxRows(ws_.logits, n, vocab, ws_.token_ids, stream_));
      const size_t old = token_ids->size();
      token_ids->resize(old + n);
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(token_ids->data() + old, ws_.token_ids,
                                           n * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                           stream_));
    } else {
      const size_t old = logits->size();
      logits->resize(old + static_cast<size_t>(n) * vocab);
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits->data() + old, ws_.logits,
                                           static_cast<size_t>(n) * vocab * sizeof(float),
                                           cudaMemcpyDeviceToHost, stream_));
    }
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(compute_done_, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return HarvestTimings(/*block=*/false);
}

absl::Status CudaBackend::TimedSyncCopies(std::span<const BlockCopy> copies, cudaMemcpyKind kind) {
  for (const BlockCopy& c : copies) RETURN_IF_ERROR(ValidateBlock(c.device_block));
  if (copies.empty()) return absl::OkStatus();
  // After the last forward (compute_done_) and, on the copy stream, after every prefetch.
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  const size_t bytes = layout_.BlockBytes();
  CUDA_RETURN_IF_ERROR(cudaEventRecord(sync_start_, copy_stream_));
  for (const BlockCopy& c : copies) {
    void* dev = const_cast<void*>(BlockDevicePointer(c.device_block));
    if (kind == cudaMemcpyDeviceToHost) {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(c.host, dev, bytes, kind, copy_stream_));
    } else {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev, c.host, bytes, kind, copy_stream_));
    }
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(sync_end_, copy_stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_stream_));
  // sync_start_ completes only after earlier prefetches on the copy stream: no double count.
  RETURN_IF_ERROR(HarvestTimings(/*block=*/false));
  float ms = 0;
  CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, sync_start_, sync_end_));
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++copy_stats_.sync_batches;
  copy_stats_.sync_bytes += static_cast<int64_t>(bytes * copies.size());
  copy_stats_.sync_copy_seconds += ms * 1e-3;
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyBlocksToHost(std::span<const BlockCopy> copies) {
  return TimedSyncCopies(copies, cudaMemcpyDeviceToHost);
}

absl::Status CudaBackend::CopyBlocksFromHost(std::span<const BlockCopy> copies) {
  return TimedSyncCopies(copies, cudaMemcpyHostToDevice);
}

absl::StatusOr<cudaEvent_t> CudaBackend::TakeEvent() {
  if (event_pool_.empty()) RETURN_IF_ERROR(HarvestTimings(/*block=*/true));
  if (event_pool_.empty()) return absl::InternalError("cuda backend: timing event pool exhausted");
  cudaEvent_t e = event_pool_.back();
  event_pool_.pop_back();
  return e;
}

absl::Status CudaBackend::PrefetchBlocksFromHost(std::span<const BlockCopy> copies) {
  for (const BlockCopy& c : copies) RETURN_IF_ERROR(ValidateBlock(c.device_block));
  if (copies.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(cudaEvent_t start, TakeEvent());
  ASSIGN_OR_RETURN(cudaEvent_t end, TakeEvent());
  // The destination blocks were free: the last forward (compute_done_) is their last reader.
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(start, copy_stream_));
  const size_t bytes = layout_.BlockBytes();
  for (const BlockCopy& c : copies) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(const_cast<void*>(BlockDevicePointer(c.device_block)),
                                         c.host, bytes, cudaMemcpyHostToDevice, copy_stream_));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(end, copy_stream_));
  prefetches_in_flight_.push_back({start, end, static_cast<int64_t>(bytes * copies.size())});
  prefetch_since_wait_ = true;
  return absl::OkStatus();
}

absl::Status CudaBackend::WaitForPrefetches() {
  if (!prefetch_since_wait_) return absl::OkStatus();
  prefetch_since_wait_ = false;
  if (pending_wait_mark_ == nullptr) {
    ASSIGN_OR_RETURN(pending_wait_mark_, TakeEvent());
  }
  // Re-recording moves the mark past every copy enqueued so far on the copy stream.
  CUDA_RETURN_IF_ERROR(cudaEventRecord(pending_wait_mark_, copy_stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::ApplyPrefetchWait() {
  if (pending_wait_mark_ == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(cudaEvent_t ready, TakeEvent());
  CUDA_RETURN_IF_ERROR(cudaEventRecord(ready, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, pending_wait_mark_, 0));
  stalls_in_flight_.push_back({ready, pending_wait_mark_});
  pending_wait_mark_ = nullptr;
  return absl::OkStatus();
}

absl::Status CudaBackend::HarvestTimings(bool block) {
  auto done = [&](cudaEvent_t e) -> absl::StatusOr<bool> {
    if (block) {
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e));
      return true;
    }
    const cudaError_t err = cudaEventQuery(e);
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    CUDA_RETURN_IF_ERROR(err);
    return true;
  };
  while (!prefetches_in_flight_.empty()) {
    const CopyTiming t = prefetches_in_flight_.front();
    ASSIGN_OR_RETURN(bool finished, done(t.end));
    if (!finished) break;
    float ms = 0;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, t.start, t.end));
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++copy_stats_.prefetch_batches;
      copy_stats_.prefetch_bytes += t.bytes;
      copy_stats_.prefetch_copy_seconds += ms * 1e-3;
    }
    event_pool_.push_back(t.start);
    event_pool_.push_back(t.end);
    prefetches_in_flight_.pop_front();
  }
  while (!stalls_in_flight_.empty()) {
    const StallTiming t = stalls_in_flight_.front();
    ASSIGN_OR_RETURN(bool ready_done, done(t.ready));
    if (!ready_done) break;
    ASSIGN_OR_RETURN(bool mark_done, done(t.mark));
    if (!mark_done) break;
    // Positive when the copies ended after the compute stream reached the wait: the
    // forward's first kernel was held back that long.
    float ms = 0;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, t.ready, t.mark));
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      copy_stats_.prefetch_stall_seconds += std::max(0.0f, ms) * 1e-3;
    }
    event_pool_.push_back(t.ready);
    event_pool_.push_back(t.mark);
    stalls_in_flight_.pop_front();
  }
  return absl::OkStatus();
}

BackendCopyStats CudaBackend::copy_stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return copy_stats_;
}

absl::Status CudaBackend::CopyBlock(int32_t src_block, int32_t dst_block) {
  RETURN_IF_ERROR(ValidateBlock(src_block));
  RETURN_IF_ERROR(ValidateBlock(dst_block));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(const_cast<void*>(BlockDevicePointer(dst_block)),
                                       BlockDevicePointer(src_block), layout_.BlockBytes(),
                                       cudaMemcpyDeviceToDevice, copy_stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_stream_));
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaBackend::AllocateHostMemory(size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("cudaHostAlloc of ", bytes,
                                                     " bytes failed: ", cudaGetErrorString(err)));
  }
  return ptr;
}

void CudaBackend::FreeHostMemory(void* ptr) {
  if (ptr != nullptr) cudaFreeHost(ptr);
}

}  // namespace kvtier
