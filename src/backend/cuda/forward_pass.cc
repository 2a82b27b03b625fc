// ForwardPass (see forward_pass.h): the layer loop.
#include "backend/cuda/forward_pass.h"

#include <cmath>
#include <optional>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/fp8_activations.h"
#include "backend/cuda/kernel_selection.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/prefill_attention.h"
#include "common/status_macros.h"

namespace kvtier::cuda {

absl::Status ForwardPass::Enqueue(const StepLaunch& step, float* logits_out) {
  return parts_.dtype == DType::kF16 ? EnqueueAs<f16>(step, logits_out) : EnqueueAs<bf16>(step, logits_out);
}

template <typename T>
absl::Status ForwardPass::EnqueueAs(const StepLaunch& step, float* logits_out) {
  const ModelConfig& config = *parts_.config;
  const KvLayout& layout = *parts_.layout;
  const CudaWeights& weights = *parts_.weights;
  const Workspace& ws = *parts_.ws;
  Projections& projections = *parts_.projections;
  HostKvStreamer& host_kv = *parts_.host_kv;
  const cudaStream_t stream = parts_.stream;
  auto dev = [&](size_t offset) { return reinterpret_cast<int32_t*>(ws.meta + offset); };
  // The 16-bit arrays as the element type of this backend (Parts::dtype).
  auto as = [](CudaWeights::Raw16* p) { return reinterpret_cast<T*>(p); };
  const MetaLayout& m = step.meta;
  const KvGrouping& grouping = *parts_.grouping;
  const bool grouped = grouping.enabled();
  StepTokens step_tokens{dev(m.chunk), dev(m.pos), step.rows};
  PagedKv<T> kv;
  kv.pool = static_cast<T*>(parts_.pool->base);
  kv.indices = dev(m.indices);
  kv.indptr = dev(m.indptr);
  kv.block_elements = layout.ElementsPerBlock();
  kv.num_kv_heads = static_cast<int32_t>(config.num_kv_heads);
  kv.head_dim = static_cast<int32_t>(config.head_dim);
  kv.block_tokens = static_cast<int32_t>(layout.block_tokens);
  kv.fp8 = layout.dtype == DType::kF8E4M3;
  kv.block_bytes = static_cast<int64_t>(layout.BlockBytes());

  const int rows = step.rows;
  const int h = static_cast<int>(config.hidden_size);
  const int inter = static_cast<int>(config.intermediate_size);
  const int q_dim = static_cast<int>(config.q_dim());
  const int qkv = static_cast<int>(config.q_dim() + 2 * config.kv_dim());
  const float eps = static_cast<float>(config.rms_norm_eps);
  const int32_t num_heads = static_cast<int32_t>(config.num_heads);

  const CudaLaunchOptions& launch = parts_.launch;
  const int l2_prefetch = L2PrefetchParts(launch, rows);
  // A projection's weights as one stretch of memory, for L2Prefetch: n rows of k.
  auto weights_of = [&](const CudaWeights::Raw16* w16, const CudaWeights::Fp8Matrix& w8, int64_t n, int64_t k) {
    return weights.fp8 ? L2Prefetch{w8.codes, n * k} : L2Prefetch{w16, n * k * static_cast<int64_t>(sizeof(T))};
  };
  const W8A8Path w8a8_path = projections.W8A8PathFor(rows);
  const bool w8a8 = w8a8_path != W8A8Path::kNone;
  const GateActivation activation =
      config.activation == Activation::kGeluTanh ? GateActivation::kGeluTanh : GateActivation::kSilu;
  const bool sandwich = config.gemma.sandwich_norms;
  MoeRun moe_run = MoeRun::Of(config);
  moe_run.launch = launch;
  if (launch.moe_decode_fused >= 0) moe_run.fused_decode = launch.moe_decode_fused == 1;
  moe_run.cublas = parts_.moe_cublas;
  moe_run.fp8_gemm = parts_.moe_cublas != nullptr ? projections.fp8_gemm() : nullptr;  // fp8 experts' W8A8
  moe_run.skinny = MoeSkinnyWanted(launch);
  if (moe_run.skinny && ws.skinny != nullptr) {  // the path checks the buffers too (MoeSkinnyPathAvailable)
    moe_run.skinny_workspace = ws.skinny;
    moe_run.sm_count = projections.sm_count();
  }
  // Gemma's embedding normalizer sqrt(hidden), rounded to fp32 as the CPU backend does.
  const float embed_scale =
      config.gemma.scale_embeddings ? static_cast<float>(std::sqrt(static_cast<double>(config.hidden_size))) : 1.0f;
  CUDA_RETURN_IF_ERROR(
      EmbeddingGather(dev(m.ids), as(weights.embed), rows, h, embed_scale, ws.residual, stream, launch));
  // The step's prefill attention on cuDNN when it takes every chunk (host-side planning
  // only), else on prefill_kernel.
  bool cudnn_prefill = false;
  if constexpr (std::is_same_v<T, bf16>) {
    // cuDNN reads one table with every layer (its gather); grouped models never take it
    // (their windowed layers' scores are not plain), checked here all the same.
    cudnn_prefill = parts_.cudnn != nullptr && !grouped && step.path == AttentionPath::kFast && step.prefill_tiles > 0 &&
                    parts_.cudnn->PrepareStep(step.prefill_chunks);
  }
  // Decode and prefill attention side by side: only where the step has both.
  const bool overlap = parts_.fork != nullptr && step.path == AttentionPath::kFast && step.decode_rows > 0 &&
                       (cudnn_prefill || step.prefill_tiles > 0);
  RETURN_IF_ERROR(host_kv.StageFirstLayer(step));
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const CudaWeights::Layer& w = weights.layers[layer];
    const T* residual_add = layer == 0 ? nullptr : as(ws.proj);
    if (sandwich && layer > 0) {  // the previous layer's MLP output, normed before its residual add
      CUDA_RETURN_IF_ERROR(
          RmsNormRows(as(ws.proj), weights.layers[layer - 1].post_ffn_norm, rows, h, eps, as(ws.proj), stream));
    }
    const std::optional<int64_t> window = config.LayerWindow(layer);
    // The layer's index inside the blocks it reads, through its group's table.
    const int32_t kv_layer = static_cast<int32_t>(grouped ? grouping.index_in_group[layer] : layer);
    kv.indptr = dev(m.GroupIndptr(grouped ? grouping.group_of_layer[layer] : 0));
    if (w8a8) {
      CUDA_RETURN_IF_ERROR(
          AddRmsNormFp8(ws.residual, residual_add, w.input_norm, rows, h, eps, ws.x8, ws.x8_scales, stream, launch));
      RETURN_IF_ERROR(projections.ProjectW8A8<T>(w8a8_path, w.qkv8, rows, h, qkv, ws.wide));
    } else {
      CUDA_RETURN_IF_ERROR(
          AddRmsNorm(ws.residual, residual_add, w.input_norm, nullptr, rows, h, eps, as(ws.normed), stream, launch));
      RETURN_IF_ERROR(projections.Project(as(ws.normed), w.qkv, w.qkv8, rows, h, qkv, ws.wide));
    }
    QkvPostParams<T> post;
    post.qkv = as(ws.wide);
    post.bias = w.qkv_bias;
    post.q_norm = w.q_norm;
    post.k_norm = w.k_norm;
    post.inv_freq = weights.local_inv_freq != nullptr && window ? weights.local_inv_freq : weights.inv_freq;
    post.long_inv_freq = weights.long_inv_freq;
    post.long_from_position = weights.long_from_position;
    post.rope_scale = weights.rope_scale;
    post.norm_eps = eps;
    post.num_heads = num_heads;
    post.layer = kv_layer;
    post.q_out = as(ws.q);
    if ((l2_prefetch & kL2PrefetchO) != 0) post.prefetch = weights_of(w.o, w.o8, h, q_dim);
    CUDA_RETURN_IF_ERROR(QkvPost(post, step_tokens, kv, stream, launch));
    const AttentionScores scores = AttentionScoresOf(config, layer);
    ASSIGN_OR_RETURN(const void* staged, host_kv.StageLayer(step, layer));
    kv.staged = static_cast<const T*>(staged);
    if (step.path == AttentionPath::kFast) {
      cudaStream_t decode_stream = stream;
      if (overlap) CUDA_RETURN_IF_ERROR(parts_.fork->Fork(stream, &decode_stream));
      if (step.decode_rows > 0) {
        DecodeAttentionParams<T> attn;
        attn.q = as(ws.q);
        attn.out = as(ws.attn);
        attn.rows = dev(m.rows);
        attn.num_rows = step.decode_rows;
        attn.num_heads = num_heads;
        attn.layer = kv_layer;
        attn.max_splits = step.decode_splits;
        attn.partial_out = ws.decode_partial_out;
        attn.partial_ml = ws.decode_partial_ml;
        attn.split_counters = ws.decode_split_counters;
        attn.fp8_pair_tiles = launch.decode_fp8_pair_tiles;
        attn.scores = scores;
        CUDA_RETURN_IF_ERROR(DecodeAttention(attn, step_tokens, kv, decode_stream, launch));
      }
      if (cudnn_prefill) {
        if constexpr (std::is_same_v<T, bf16>) {
          RETURN_IF_ERROR(parts_.cudnn->EnqueueLayer(step.prefill_chunks, static_cast<int32_t>(layer), as(ws.q),
                                                     as(ws.attn), kv));
        }
      } else if (step.prefill_tiles > 0) {
        PrefillAttentionParams<T> attn;
        attn.q = as(ws.q);
        attn.out = as(ws.attn);
        attn.tiles = reinterpret_cast<const PrefillTile*>(ws.meta + m.tiles);
        attn.num_tiles = step.prefill_tiles;
        attn.num_heads = num_heads;
        attn.layer = kv_layer;
        attn.kernel = parts_.prefill_kernel;
        attn.wgmma_variant = launch.prefill_wgmma_variant;
        attn.scores = scores;
        CUDA_RETURN_IF_ERROR(PrefillAttention(attn, kv, stream));
      }
      if (overlap) CUDA_RETURN_IF_ERROR(parts_.fork->Join(stream));
    } else {
      AttentionSplits splits{dev(m.num_splits), dev(m.partial_base), ws.partial_out, ws.partial_ml};
      AttentionParams<T> attn;
      attn.q = as(ws.q);
      attn.out = as(ws.attn);
      attn.items = reinterpret_cast<const AttentionItem*>(ws.meta + m.items);
      attn.num_items = step.generic_items;
      attn.num_heads = num_heads;
      attn.layer = kv_layer;
      attn.max_rows = step.generic_max_rows;
      attn.any_split = step.generic_any_split;
      attn.scores = scores;
      CUDA_RETURN_IF_ERROR(PagedAttention(attn, step_tokens, kv, splits, stream));
    }
    RETURN_IF_ERROR(host_kv.ReleaseLayer(step, layer));
    // Sandwich norms: post_norm norms the attention output and pre_ffn_norm comes before the
    // MLP; otherwise post_norm is the norm before the MLP.
    const float* mlp_norm = sandwich ? w.pre_ffn_norm : w.post_norm;
    if (w8a8) {
      CUDA_RETURN_IF_ERROR(QuantizeActivationsFp8(as(ws.attn), rows, q_dim, ws.x8, ws.x8_scales, stream, launch));
      RETURN_IF_ERROR(projections.ProjectW8A8<T>(w8a8_path, w.o8, rows, q_dim, h, ws.proj));
    } else {
      RETURN_IF_ERROR(projections.Project(as(ws.attn), w.o, w.o8, rows, q_dim, h, ws.proj));
    }
    if (sandwich) CUDA_RETURN_IF_ERROR(RmsNormRows(as(ws.proj), w.post_norm, rows, h, eps, as(ws.proj), stream));
    // The experts take 16-bit activations, with fp8 weights too: the tiles run W8A16, the library
    // path quantizes them itself (W8A8, moe_library.h).
    if (config.IsMoeLayer(layer)) {
      const MoeInputNorm<T> norm{ws.residual, as(ws.proj), mlp_norm, eps, as(ws.normed)};
      moe_run.router_prefetch = {};
      if ((l2_prefetch & kL2PrefetchNextQkv) != 0 && layer + 1 < config.num_layers) {
        const CudaWeights::Layer& next = weights.layers[layer + 1];
        moe_run.router_prefetch = weights_of(next.qkv, next.qkv8, qkv, h);
      }
      RETURN_IF_ERROR(EnqueueMoeMlp(moe_run, w.moe, ws.moe, norm, rows, as(ws.proj), stream));
      continue;
    }
    if (w8a8) {
      CUDA_RETURN_IF_ERROR(
          AddRmsNormFp8(ws.residual, as(ws.proj), mlp_norm, rows, h, eps, ws.x8, ws.x8_scales, stream, launch));
      RETURN_IF_ERROR(projections.ProjectW8A8<T>(w8a8_path, w.gate_up8, rows, h, 2 * inter, ws.wide));
      CUDA_RETURN_IF_ERROR(GatedMulFp8(as(ws.wide), rows, inter, activation, ws.x8, ws.x8_scales, stream, launch));
      RETURN_IF_ERROR(projections.ProjectW8A8<T>(w8a8_path, w.down8, rows, inter, h, ws.proj));
      continue;
    }
    CUDA_RETURN_IF_ERROR(
        AddRmsNorm(ws.residual, as(ws.proj), mlp_norm, nullptr, rows, h, eps, as(ws.normed), stream, launch));
    RETURN_IF_ERROR(
        projections.GateUpActivation(as(ws.normed), w, rows, h, inter, activation, as(ws.wide), as(ws.act)));
    RETURN_IF_ERROR(projections.Project(as(ws.act), w.down, w.down8, rows, inter, h, ws.proj));
  }
  if (step.logit_rows == 0) return absl::OkStatus();
  const int n = step.logit_rows;
  if (sandwich) {  // the last layer's MLP output, normed before its residual add
    CUDA_RETURN_IF_ERROR(
        RmsNormRows(as(ws.proj), weights.layers.back().post_ffn_norm, rows, h, eps, as(ws.proj), stream));
  }
  CUDA_RETURN_IF_ERROR(AddRmsNorm(ws.residual, as(ws.proj), weights.final_norm, dev(m.logit_rows), n, h, eps,
                                  as(ws.normed), stream, launch));
  const int vocab = static_cast<int>(config.vocab_size);
  RETURN_IF_ERROR(projections.Gemm(as(ws.normed), as(weights.lm_head), n, h, vocab, ws.logits, true));
  if (config.final_logit_softcap) {
    CUDA_RETURN_IF_ERROR(SoftCapRows(ws.logits, n, vocab, static_cast<float>(*config.final_logit_softcap), stream));
  }
  if (step.masks != nullptr) {
    // Grammar masks, before anything picks from the logits. Computed on the host during
    // the forward enqueued above; waiting here blocks the host only, while the GPU runs.
    step.masks->Wait();
    const int words = step.masks->words_per_row;
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(ws.masks, step.masks->words + static_cast<size_t>(step.first_slot) * static_cast<size_t>(words),
                        static_cast<size_t>(step.num_slots) * static_cast<size_t>(words) * sizeof(uint32_t),
                        cudaMemcpyHostToDevice, stream));
    CUDA_RETURN_IF_ERROR(ApplyTokenMasks(ws.logits, n, vocab, dev(m.mask_slots), ws.masks, words, stream));
  }
  if (step.greedy) {  // token ids picked on the device (sampled or argmax); only they come back
    if (step.sampled) {
      CUDA_RETURN_IF_ERROR(SampleRows(ws.logits, n, vocab, reinterpret_cast<const SampleParams*>(ws.meta + m.sampling),
                                      ws.token_ids, stream, launch));
    } else {
      CUDA_RETURN_IF_ERROR(ArgmaxRows(ws.logits, n, vocab, ws.argmax_scratch, ws.token_ids, stream, launch));
    }
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(ws.ids_host, ws.token_ids, n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  } else if (logits_out != nullptr) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits_out, ws.logits, static_cast<size_t>(n) * vocab * sizeof(float),
                                         cudaMemcpyDeviceToHost, stream));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::cuda
