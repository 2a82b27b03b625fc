// CpuBackend: the decoder over a ragged batch with cpu_ops (cpu_backend.h).
// Thread-compatible: one thread drives it; ops inside split work over its ThreadPool.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/dot16.h"
#include "backend/cpu/onednn_bf16.h"
#include "backend/cpu/quant_dot.h"
#include "backend/cpu/sharded_weights.h"
#include "common/physical_memory.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"

namespace kvtier {
namespace {

// Activation rows preallocated at creation when the options give no step size.
constexpr int64_t kDefaultScratchTokens = 256;

// How long idle workers spin for the next kernel before they block: a forward calls the
// pool for every kernel, microseconds apart, and a blocked worker's wake-up costs more
// than a kernel of a decode step.
constexpr int kSpinUs = 100;

// The formats of the matrices and what computes from them, for compute_path().
std::string DescribeComputePath(const CpuWeights& weights, CpuKernels kernels, StorageDType weight_dtype) {
  if (kernels == CpuKernels::kReference) return "cpu-reference: fp32 weights, reference arithmetic";
  std::vector<DType> types;
  const Dot16Kernels* sixteen = nullptr;  // the set the 16-bit matrices name (UseDot16: one for all)
  auto add = [&types, &sixteen](const CpuMatrix& m) {
    if (!m.empty() && std::find(types.begin(), types.end(), m.dtype) == types.end()) types.push_back(m.dtype);
    if (!m.empty() && (m.dtype == DType::kF16 || m.dtype == DType::kBF16)) sixteen = m.dot16;
  };
  for (const CpuLayerWeights& layer : weights.layers) {
    for (const CpuMatrix* m : {&layer.q_proj, &layer.k_proj, &layer.v_proj, &layer.o_proj, &layer.gate_proj,
                               &layer.up_proj, &layer.down_proj}) {
      add(*m);
    }
  }
  add(weights.lm_head);
  std::string names;
  bool blocks = false;
  for (DType t : types) {
    absl::StrAppend(&names, names.empty() ? "" : "+", std::string(DTypeName(t)));
    blocks = blocks || HasQuantDot(t);
  }
  std::string path = absl::StrCat("cpu: ", names, " weights");
  if (blocks) absl::StrAppend(&path, ", int8 dot products (", std::string(BestQuantDot().isa), ")");
  if (sixteen != nullptr) absl::StrAppend(&path, ", 16-bit dot products (", std::string(sixteen->isa), ")");
  // fp8 weights are held widened: say so, or the line would read like an fp32 model's.
  if (weight_dtype == StorageDType::kFp8) absl::StrAppend(&path, ", holding fp8 (E4M3 x channel scale) values");
  return path;
}

// Activation rows preallocated at creation: the engine's step budget.
int64_t ReserveTokens(const BackendOptions& options) {
  return options.max_tokens_per_step > 0 ? options.max_tokens_per_step : kDefaultScratchTokens;
}

// The part of compute_path() for the matrices MatMul gives oneDNN at prefill row counts;
// empty when there are none.
std::string DescribeOnednnPath(const CpuWeights& weights) {
  int64_t count = 0;
  for (const CpuLayerWeights& layer : weights.layers) {
    for (const CpuMatrix* m : {&layer.q_proj, &layer.k_proj, &layer.v_proj, &layer.o_proj, &layer.gate_proj,
                               &layer.up_proj, &layer.down_proj}) {
      count += UsesOnednnBf16(*m, kOnednnBf16MinRows) ? 1 : 0;
    }
  }
  count += UsesOnednnBf16(weights.lm_head, kOnednnBf16MinRows) ? 1 : 0;  // prompts scored at every position
  if (count == 0) return "";
  return absl::StrCat(", prefill through oneDNN bf16 matmul (", count, " matrices, steps of >= ", kOnednnBf16MinRows,
                      " rows)");
}

}  // namespace

std::string CpuBackend::compute_path() const {
  return onednn_ran_.load(std::memory_order_relaxed) ? compute_path_ + onednn_path_ : compute_path_;
}

int64_t CpuBackend::Scratch::Bytes() const {
  int64_t floats = 0;
  for (const std::vector<float>* v : {&hidden, &normed, &q, &k, &v, &attention, &gate, &up}) {
    floats += static_cast<int64_t>(v->size());
  }
  return floats * static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(tokens.size() * sizeof(int32_t) +
                              positions.size() * sizeof(int64_t) + activations.size());
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const Checkpoint& checkpoint,
                                                               const BackendOptions& options) {
  const ModelConfig& config = checkpoint.config();
  if (options.block_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_tokens must be positive, got ", options.block_tokens));
  }
  if (config.num_kv_heads <= 0 || config.num_heads % config.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_attention_heads (", config.num_heads,
        ") must be a multiple of num_key_value_heads (", config.num_kv_heads, ")"));
  }
  if (config.head_dim <= 0 || config.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim must be positive and even for RoPE, got ", config.head_dim));
  }
  if (options.kv_dtype != StorageDType::kAuto && options.kv_dtype != StorageDType::kFp8) {
    // The CPU KV cache is fp32 or fp8 (the format that changes capacity); 16-bit KV would
    // only round values the CPU computes in fp32 anyway.
    return absl::UnimplementedError(absl::StrCat("cpu backend: kv_dtype '", std::string(StorageDTypeName(options.kv_dtype)),
                                                 "' is not supported (the CPU KV cache is fp32 or fp8: use auto or fp8)"));
  }
  if (options.kv_grouping.enabled()) {
    if (options.tensor_parallel > 1 || options.sharded_reduction) {
      return absl::UnimplementedError("cpu backend: a grouped KV layout is not read by the sharded plan");
    }
    std::vector<std::optional<int64_t>> windows;
    for (int64_t l = 0; l < config.num_layers; ++l) windows.push_back(config.LayerWindow(l));
    RETURN_IF_ERROR(options.kv_grouping.Validate(windows).status());
  }
  // weight_dtype rounds fp32 matrices, so a format of the checkpoint's own is kept only
  // where none is asked for.
  const bool fast = options.cpu_kernels != CpuKernels::kReference;
  const bool keep_formats = fast && options.weight_dtype == StorageDType::kAuto;
  ASSIGN_OR_RETURN(CpuWeights weights, LoadCpuWeights(checkpoint, options.progress, keep_formats));
  if (IsBlockStorageDType(options.weight_dtype)) {
    QuantizeCpuWeights(config, options.weight_dtype == StorageDType::kQ8_0 ? DType::kQ8_0 : DType::kQ4_K, fast,
                       &weights);
  } else {
    RoundProjections(config, options.weight_dtype, fast, &weights);
  }
  if (options.cpu_kernels == CpuKernels::kExact) UseDot16(BestExactDot16(), &weights);
  std::string compute_path = DescribeComputePath(weights, options.cpu_kernels, options.weight_dtype);
  std::unique_ptr<ShardedForward> sharded;
  if (options.tensor_parallel > 1 || options.sharded_reduction) {
    ASSIGN_OR_RETURN(ShardedWeights shards, ShardCpuWeights(config, options.tensor_parallel, &weights));
    absl::StrAppend(&compute_path, ", tensor parallel ", options.tensor_parallel, " (sharded plan)");
    sharded = std::make_unique<ShardedForward>(config, std::move(shards), ReserveTokens(options));
  }
  return std::unique_ptr<CpuBackend>(
      new CpuBackend(config, std::move(weights), std::move(sharded), std::move(compute_path), options));
}

CpuBackend::CpuBackend(const ModelConfig& config, CpuWeights weights, std::unique_ptr<ShardedForward> sharded,
                       std::string compute_path, const BackendOptions& options)
    : config_(config),
      weights_(std::move(weights)),
      sharded_(std::move(sharded)),
      grouping_(options.kv_grouping),
      inv_freq_(config.head_dim / 2),
      pool_(std::make_unique<ThreadPool>(options.num_threads, ThreadPool::Options{.spin_us = kSpinUs, .pin_workers = true})) {
  layout_.num_layers = grouping_.enabled() ? config.num_layers / grouping_.num_groups() : config.num_layers;
  layout_.num_kv_heads = config.num_kv_heads;
  layout_.head_dim = config.head_dim;
  layout_.block_tokens = options.block_tokens;
  layout_.dtype = options.kv_dtype == StorageDType::kFp8 ? DType::kF8E4M3 : DType::kF32;
  if (config.long_rope) {
    LongRopeInverseFrequencies(config.head_dim, config.rope_theta, config.long_rope->short_factor, inv_freq_.data());
    long_inv_freq_.resize(inv_freq_.size());
    LongRopeInverseFrequencies(config.head_dim, config.rope_theta, config.long_rope->long_factor,
                               long_inv_freq_.data());
  } else {
    RopeInverseFrequencies(config.head_dim, config.rope_theta, config.rope_scaling, inv_freq_.data());
    // HF _compute_linear_scaling_rope_parameters: inv_freq / factor in fp32.
    const float linear = static_cast<float>(config.gemma3_rope.linear_factor);
    if (linear != 1.0f) {
      for (float& f : inv_freq_) f /= linear;
    }
  }
  if (config.gemma3_rope.local_theta) {  // the global layers' rope_scaling does not reach these
    local_inv_freq_.resize(inv_freq_.size());
    RopeInverseFrequencies(config.head_dim, *config.gemma3_rope.local_theta, std::nullopt, local_inv_freq_.data());
  }
  // Sized for the engine's step budget; a larger batch grows it (counted, never shrunk).
  EnsureScratch(ReserveTokens(options));
  scratch_growths_ = 0;
  compute_path_ = std::move(compute_path);
  onednn_path_ = DescribeOnednnPath(weights_);
}

absl::Status CpuBackend::AllocateKvPool(int64_t num_blocks) {
  if (kv_pool_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV pool already allocated (", num_blocks_, " blocks)"));
  }
  if (num_blocks <= 0 || num_blocks > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV pool block count must be in [1, 2^31), got ", num_blocks));
  }
  const int64_t block_bytes = static_cast<int64_t>(layout_.BlockBytes());
  const int64_t physical = PhysicalMemoryBytes();
  if (physical > 0 && num_blocks > physical / block_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV pool of ", num_blocks, " blocks x ", block_bytes, " bytes exceeds the ", physical,
        " bytes of physical memory"));
  }
  // Value-initialised: every page is touched now, not first during a step. float elements
  // keep the f32 layout aligned; BlockBytes is a multiple of 4 in both layouts.
  kv_pool_.reset(new (std::nothrow) float[static_cast<size_t>(num_blocks * block_bytes) / sizeof(float)]());
  if (kv_pool_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate KV pool of ", num_blocks,
                                                     " blocks (", num_blocks * block_bytes,
                                                     " bytes)"));
  }
  num_blocks_ = num_blocks;
  return absl::OkStatus();
}

absl::Status CpuBackend::ValidateBlock(int32_t block, const std::string& what) const {
  if (block < 0 || block >= num_blocks_) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": block id ", block,
                                                   " out of range [0, ", num_blocks_, ")"));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::ValidateBatch(const ForwardBatch& batch) const {
  // Blocks written this step: two chunks writing one block would corrupt each other.
  absl::flat_hash_set<int32_t> written_blocks;
  const int64_t block_tokens = layout_.block_tokens;
  for (size_t c = 0; c < batch.chunks.size(); ++c) {
    const SequenceChunk& chunk = batch.chunks[c];
    const std::string name = absl::StrCat("chunk ", c);
    const int64_t len = static_cast<int64_t>(chunk.tokens.size());
    if (len == 0) return absl::InvalidArgumentError(absl::StrCat(name, ": no tokens"));
    if (chunk.start_position < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": negative start_position ", chunk.start_position));
    }
    const int64_t end_position = chunk.start_position + len;
    if (end_position > config_.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": positions up to ", end_position, " exceed max_position_embeddings ",
          config_.max_position_embeddings));
    }
    for (int64_t i = 0; i < len; ++i) {
      if (chunk.tokens[i] < 0 || chunk.tokens[i] >= config_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": token ", chunk.tokens[i],
                                                       " at index ", i, " out of range [0, ",
                                                       config_.vocab_size, ")"));
      }
    }
    if (grouping_.enabled() || !chunk.group_tables.empty()) {
      if (!grouping_.enabled()) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": group tables without a grouped KV layout"));
      }
      if (!chunk.host_kv.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": host-resident blocks outside the group tables"));
      }
      RETURN_IF_ERROR(ValidateGroupTables(grouping_, chunk.group_tables, chunk.start_position, end_position,
                                          block_tokens, num_blocks_, &written_blocks, name));
      continue;
    }
    const int64_t blocks_needed = (end_position + block_tokens - 1) / block_tokens;
    const HostResidentKv& host = chunk.host_kv;
    const int64_t device_blocks_needed = blocks_needed - std::min(host.num_blocks(), blocks_needed);
    if (static_cast<int64_t>(chunk.block_table.size()) < device_blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": block table has ", chunk.block_table.size(), " blocks (and ", host.num_blocks(),
          " host-resident), positions up to ", end_position, " need ", blocks_needed));
    }
    if (!host.empty()) {
      // Host blocks are read only, and full: the chunk writes after all of them.
      if (host.first_block < 0 || (host.first_block + host.num_blocks()) * block_tokens > chunk.start_position) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": host-resident blocks [", host.first_block, ", ", host.first_block + host.num_blocks(),
            ") are not all before the chunk's first position ", chunk.start_position));
      }
      for (const void* data : host.blocks) {
        if (data == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, ": null host-resident block"));
      }
    }
    for (int64_t j = 0; j < device_blocks_needed; ++j) {
      RETURN_IF_ERROR(ValidateBlock(chunk.block_table[j], name));
    }
    for (int64_t j = chunk.start_position / block_tokens; j < blocks_needed; ++j) {
      if (!written_blocks.insert(chunk.block_table[host.DeviceIndex(j)]).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": block ", chunk.block_table[host.DeviceIndex(j)], " is written twice in one batch"));
      }
    }
  }
  return absl::OkStatus();
}

void CpuBackend::EnsureScratch(int64_t num_tokens) {
  if (num_tokens <= scratch_.capacity_tokens) return;
  ++scratch_growths_;
  const auto size = [num_tokens](int64_t width) { return static_cast<size_t>(num_tokens * width); };
  scratch_.hidden.resize(size(config_.hidden_size));
  scratch_.normed.resize(size(config_.hidden_size));
  scratch_.q.resize(size(config_.q_dim()));
  scratch_.k.resize(size(config_.kv_dim()));
  scratch_.v.resize(size(config_.kv_dim()));
  scratch_.attention.resize(size(config_.q_dim()));
  scratch_.gate.resize(size(config_.intermediate_size));
  scratch_.up.resize(size(config_.intermediate_size));
  scratch_.tokens.resize(size(1));
  scratch_.positions.resize(size(1));
  moe_scratch_.Reserve(config_, num_tokens);
  scratch_.capacity_tokens = num_tokens;
}

absl::Status CpuBackend::Forward(const ForwardBatch& batch, std::vector<float>* logits) {
  if (kv_pool_ == nullptr) {
    return absl::FailedPreconditionError("Forward called before AllocateKvPool");
  }
  RETURN_IF_ERROR(ValidateBatch(batch));
  int64_t num_tokens = 0;
  for (const SequenceChunk& chunk : batch.chunks) num_tokens += chunk.tokens.size();
  EnsureScratch(num_tokens);
  if (!onednn_path_.empty() && num_tokens >= kOnednnBf16MinRows) onednn_ran_.store(true, std::memory_order_relaxed);

  int64_t row = 0;
  for (const SequenceChunk& chunk : batch.chunks) {
    for (size_t i = 0; i < chunk.tokens.size(); ++i, ++row) {
      scratch_.tokens[row] = chunk.tokens[i];
      scratch_.positions[row] = chunk.start_position + static_cast<int64_t>(i);
    }
  }
  EmbeddingLookup(weights_.embed_tokens.data(), scratch_.tokens.data(), num_tokens,
                  config_.hidden_size, scratch_.hidden.data());
  if (config_.gemma.scale_embeddings) {  // Gemma: the normalizer sqrt(hidden), rounded to fp32
    ScaleInPlace(scratch_.hidden.data(), num_tokens * config_.hidden_size,
                 static_cast<float>(std::sqrt(static_cast<double>(config_.hidden_size))));
  }
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    RunLayer(layer, batch, num_tokens);
  }
  ComputeLogits(batch, logits);
  return absl::OkStatus();
}

void CpuBackend::RunLayer(int64_t layer, const ForwardBatch& batch, int64_t num_tokens) {
  const CpuLayerWeights& w = weights_.layers[layer];
  const int64_t hidden = config_.hidden_size;
  const double eps = config_.rms_norm_eps;
  ThreadPool* pool = pool_.get();
  float* x = scratch_.hidden.data();
  float* normed = scratch_.normed.data();

  // Attention block.
  RmsNorm(x, w.input_norm.data(), num_tokens, hidden, eps, normed, pool);
  if (sharded_ != nullptr) {
    sharded_->Attention(layer, w, ShardedIo(batch, num_tokens),
                        ShardedAttentionIo{&layout_, kv_pool_.get(), [this, layer](float* rows_x, int64_t rows, int64_t heads) {
                                             ApplyLayerRope(layer, rows_x, rows, heads);
                                           }});
  } else {
    AttentionBlock(layer, w, batch, num_tokens);
  }
  if (config_.gemma.sandwich_norms) {  // Gemma: the attention output is normed before the residual
    RmsNorm(normed, w.post_attention_norm.data(), num_tokens, hidden, eps, normed, pool);
  }
  AddInPlace(x, normed, num_tokens * hidden);
  Mlp(layer, w, batch, num_tokens);
}

ShardedLayerIo CpuBackend::ShardedIo(const ForwardBatch& batch, int64_t num_tokens) {
  return ShardedLayerIo{&batch, num_tokens, scratch_.normed.data(), scratch_.normed.data(), pool_.get(),
                        &scratch_.activations};
}

void CpuBackend::AttentionBlock(int64_t layer, const CpuLayerWeights& w, const ForwardBatch& batch,
                                int64_t num_tokens) {
  const int64_t q_dim = config_.q_dim();
  const int64_t kv_dim = config_.kv_dim();
  const double eps = config_.rms_norm_eps;
  ThreadPool* pool = pool_.get();
  float* normed = scratch_.normed.data();
  float* q = scratch_.q.data();
  float* k = scratch_.k.data();
  float* v = scratch_.v.data();
  auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
  MatMul(w.q_proj, normed, bias(w.q_bias), num_tokens, q, pool, &scratch_.activations);
  MatMul(w.k_proj, normed, bias(w.k_bias), num_tokens, k, pool, &scratch_.activations);
  MatMul(w.v_proj, normed, bias(w.v_bias), num_tokens, v, pool, &scratch_.activations);
  if (config_.qk_norm) {  // Qwen3, Gemma 3: per-head RMSNorm before RoPE
    RmsNorm(q, w.q_norm.data(), num_tokens * config_.num_heads, config_.head_dim, eps, q, pool);
    RmsNorm(k, w.k_norm.data(), num_tokens * config_.num_kv_heads, config_.head_dim, eps, k,
            pool);
  }
  ApplyLayerRope(layer, q, num_tokens, config_.num_heads);
  ApplyLayerRope(layer, k, num_tokens, config_.num_kv_heads);
  AttentionOptions attention;
  attention.scale = static_cast<float>(config_.AttentionScale());
  if (config_.attn_logit_softcap) attention.logit_softcap = static_cast<float>(*config_.attn_logit_softcap);
  attention.window = config_.LayerWindow(layer);
  int64_t row = 0;
  for (const SequenceChunk& chunk : batch.chunks) {
    const int64_t len = static_cast<int64_t>(chunk.tokens.size());
    KvBlockView kv{&layout_, kv_pool_.get(), chunk.block_table, chunk.host_kv, std::nullopt};
    int64_t kv_layer = layer;  // the layer's index inside the blocks it reads
    if (grouping_.enabled()) {
      const GroupKvTable& table = chunk.group_tables[static_cast<size_t>(grouping_.group_of_layer[static_cast<size_t>(layer)])];
      kv.block_table = table.blocks;
      kv.host = table.host;
      kv.first_block = table.first_block;
      kv_layer = grouping_.index_in_group[static_cast<size_t>(layer)];
    }
    WriteKv(kv, kv_layer, chunk.start_position, len, k + row * kv_dim, v + row * kv_dim);
    PagedAttention(kv, kv_layer, chunk.start_position, len, config_.num_heads, q + row * q_dim,
                   scratch_.attention.data() + row * q_dim, pool, attention);
    row += len;
  }
  MatMul(w.o_proj, scratch_.attention.data(), bias(w.o_bias), num_tokens, normed, pool, &scratch_.activations);
}

void CpuBackend::Mlp(int64_t layer, const CpuLayerWeights& w, const ForwardBatch& batch, int64_t num_tokens) {
  const int64_t hidden = config_.hidden_size;
  const double eps = config_.rms_norm_eps;
  ThreadPool* pool = pool_.get();
  float* x = scratch_.hidden.data();
  float* normed = scratch_.normed.data();
  const std::vector<float>& pre_norm = config_.gemma.sandwich_norms ? w.pre_feedforward_norm : w.post_attention_norm;
  RmsNorm(x, pre_norm.data(), num_tokens, hidden, eps, normed, pool);
  if (config_.IsMoeLayer(layer)) {
    AddInPlace(x, MoeMlp(w.moe, config_.moe, normed, num_tokens, hidden, pool, &moe_scratch_, &scratch_.activations),
               num_tokens * hidden);
    return;
  }
  if (sharded_ != nullptr) {
    sharded_->Mlp(layer, ShardedIo(batch, num_tokens));
  } else {
    DenseMlp(w, num_tokens);
  }
  if (config_.gemma.sandwich_norms) {
    RmsNorm(normed, w.post_feedforward_norm.data(), num_tokens, hidden, eps, normed, pool);
  }
  AddInPlace(x, normed, num_tokens * hidden);
}

void CpuBackend::DenseMlp(const CpuLayerWeights& w, int64_t num_tokens) {
  const int64_t inter = config_.intermediate_size;
  ThreadPool* pool = pool_.get();
  float* normed = scratch_.normed.data();
  float* gate = scratch_.gate.data();
  MatMul(w.gate_proj, normed, nullptr, num_tokens, gate, pool, &scratch_.activations);
  MatMul(w.up_proj, normed, nullptr, num_tokens, scratch_.up.data(), pool, &scratch_.activations);
  if (config_.activation == Activation::kGeluTanh) {
    GeluTanhMul(gate, scratch_.up.data(), num_tokens * inter, gate);
  } else {
    SiluMul(gate, scratch_.up.data(), num_tokens * inter, gate);
  }
  MatMul(w.down_proj, gate, nullptr, num_tokens, normed, pool, &scratch_.activations);
}

void CpuBackend::ApplyLayerRope(int64_t layer, float* x, int64_t rows, int64_t num_heads) const {
  const int64_t* positions = scratch_.positions.data();
  const int64_t head_dim = config_.head_dim;
  if (!local_inv_freq_.empty() && config_.LayerWindow(layer)) {
    ApplyRope(x, positions, rows, num_heads, head_dim, local_inv_freq_.data());
    return;
  }
  if (!config_.long_rope) {
    ApplyRope(x, positions, rows, num_heads, head_dim, inv_freq_.data());
    return;
  }
  // LongRoPE: each position its own table (config.h says why per position).
  const float scaling = static_cast<float>(config_.long_rope->attention_factor);
  const int64_t original = config_.long_rope->original_max_position_embeddings;
  for (int64_t r = 0; r < rows; ++r) {
    const float* table = positions[r] >= original ? long_inv_freq_.data() : inv_freq_.data();
    ApplyRope(x + r * num_heads * head_dim, positions + r, 1, num_heads, head_dim, table, scaling);
  }
}

void CpuBackend::ComputeLogits(const ForwardBatch& batch, std::vector<float>* logits) {
  const int64_t hidden = config_.hidden_size;
  // Gather the rows that want logits (each chunk's last, or all of an all_logits chunk's);
  // norm and project only those.
  int64_t num_rows = 0;
  int64_t row_end = 0;
  for (const SequenceChunk& chunk : batch.chunks) {
    row_end += static_cast<int64_t>(chunk.tokens.size());
    const int64_t rows = static_cast<int64_t>(chunk.num_logit_rows());
    if (rows == 0) continue;
    std::memcpy(scratch_.normed.data() + num_rows * hidden,
                scratch_.hidden.data() + (row_end - rows) * hidden, rows * hidden * sizeof(float));
    num_rows += rows;
  }
  logits->resize(static_cast<size_t>(num_rows * config_.vocab_size));
  if (num_rows == 0) return;
  float* normed = scratch_.normed.data();
  RmsNorm(normed, weights_.final_norm.data(), num_rows, hidden, config_.rms_norm_eps, normed,
          pool_.get());
  if (weights_.lm_head.empty()) {
    MatMulTransposed(normed, weights_.embed_tokens.data(), nullptr, num_rows, hidden, config_.vocab_size,
                     logits->data(), pool_.get());
  } else {
    MatMul(weights_.lm_head, normed, nullptr, num_rows, logits->data(), pool_.get(), &scratch_.activations);
  }
  if (config_.final_logit_softcap) {
    SoftCap(logits->data(), num_rows * config_.vocab_size, static_cast<float>(*config_.final_logit_softcap));
  }
}

absl::Status CpuBackend::CopyBlocksToHost(std::span<const BlockCopy> copies) {
  for (const BlockCopy& copy : copies) {
    RETURN_IF_ERROR(ValidateBlock(copy.device_block, "CopyBlocksToHost"));
    if (copy.host == nullptr) return absl::InvalidArgumentError("CopyBlocksToHost: null host");
  }
  for (const BlockCopy& copy : copies) {
    std::memcpy(copy.host, BlockData(copy.device_block), layout_.BlockBytes());
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyBlocksFromHost(std::span<const BlockCopy> copies) {
  for (const BlockCopy& copy : copies) {
    RETURN_IF_ERROR(ValidateBlock(copy.device_block, "CopyBlocksFromHost"));
    if (copy.host == nullptr) return absl::InvalidArgumentError("CopyBlocksFromHost: null host");
  }
  for (const BlockCopy& copy : copies) {
    std::memcpy(MutableBlockData(copy.device_block), copy.host, layout_.BlockBytes());
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyBlock(int32_t src_block, int32_t dst_block) {
  RETURN_IF_ERROR(ValidateBlock(src_block, "CopyBlock source"));
  RETURN_IF_ERROR(ValidateBlock(dst_block, "CopyBlock destination"));
  if (src_block == dst_block) return absl::OkStatus();
  std::memcpy(MutableBlockData(dst_block), BlockData(src_block), layout_.BlockBytes());
  return absl::OkStatus();
}

const float* CpuBackend::BlockData(int32_t block) const {
  return kv_pool_.get() + static_cast<size_t>(block) * (layout_.BlockBytes() / sizeof(float));
}

float* CpuBackend::MutableBlockData(int32_t block) {
  return kv_pool_.get() + static_cast<size_t>(block) * (layout_.BlockBytes() / sizeof(float));
}

int64_t CpuBackend::device_bytes_in_use() const {
  return weights_.Bytes() + num_blocks_ * static_cast<int64_t>(layout_.BlockBytes()) + scratch_.Bytes() +
         moe_scratch_.Bytes() + (sharded_ != nullptr ? sharded_->Bytes() : 0);
}

}  // namespace kvtier
