// CudaOptions: the CUDA backend's switches between equivalent ways of running the same
// forward (same tokens, logits equal up to rounding). The defaults are the fast path; each
// switch exists to measure what its feature gives, or to rule the feature out when chasing
// a problem. Plain values, part of BackendOptions; the CPU backend ignores them. Kept free
// of C++20 headers because the kernels (nvcc, C++17) take CudaLaunchOptions directly.
#ifndef KVTIER_BACKEND_CUDA_OPTIONS_H_
#define KVTIER_BACKEND_CUDA_OPTIONS_H_

#include <cstdint>

namespace kvtier {

// How the kernel launchers (backend/cuda/kernels.h) enqueue their kernels.
struct CudaLaunchOptions {
  // Programmatic dependent launch (backend/cuda/pdl.h): a kernel may start while the one
  // before it on the stream is still finishing. false launches every kernel plainly.
  bool pdl = true;
  // With pdl: the short kernels between two projections let the next kernel start before
  // their own wait. false keeps every kernel to "wait, then trigger".
  bool pdl_early_trigger = true;
  // 16-byte weight pieces per lane the decode GEMV loads before its PDL wait: 2, 4 or 8
  // (other values round down to one of these; below 2 gives 2).
  int32_t gemv_prefetch = 4;
  // The decode GEMV reading its weights through the copy engine where the whole matrix fits in
  // the SMs' shared memory (backend/cuda/gemv_bulk.cuh): -1 the library's choice (16-bit
  // weights, and one row's fp8 codes in matrices of up to 12 MiB), 0 off, 1 on (fp8 codes too).
  int32_t gemv_bulk = -1;
  // The wgmma prefill attention's variant (PrefillAttentionWgmma: 0 the default tiles, 1-3
  // other KV tiles and pipeline depths, 4-6 softmax overlapped with the next tile's MMAs; fp8
  // KV takes variants 0-3 and runs 0 for the others). For the timing sweep and A/B runs.
  int32_t prefill_wgmma_variant = 0;
  // fp8 KV decode attention in rounds of 32 positions (DecodeAttentionParams::fp8_pair_tiles):
  // -1 the library's choice, 0 off, 1 on where the shape allows it, 2 on with f16 products.
  int32_t decode_fp8_pair_tiles = -1;
  // Mixture-of-experts decode steps of one row on the three-kernel decode path
  // (MoeTile::kGemvFused, cuda/moe_decode.h) instead of the six grouped kernels: -1 the
  // library's choice (kMoeDecodeFusedByDefault: on), 0 off, 1 on.
  int32_t moe_decode_fused = -1;
  // That path's down+combine reading its weights through the copy engine where they fit
  // (MoeDownCombineParams::bulk): -1 the library's choice (16-bit experts), 0 off (through
  // registers), 1 on (fp8 experts too).
  int32_t moe_down_bulk = -1;
  // Mixture-of-experts prefill-sized steps (from kMoeSkinnyMinRoutesPerExpert routes per expert
  // on) with their experts on the grouped skinny tensor-core kernel (MoeTile::kSkinny,
  // cuda/moe_skinny.h; compute capability 9.0, bf16 compute): -1 the library's choice
  // (kMoeSkinnyByDefault), 0 off (the grouped tiles or the library GEMMs), 1 on. Steps big
  // enough for the library GEMMs run on those either way (MoeTileRun).
  int32_t moe_skinny = -1;
  // One- and two-row decode steps asking L2 for a projection's weights while the latency-bound
  // kernels before it run (backend/cuda/kernels.h L2Prefetch), a sum of: 1 the o projection's
  // during QkvPost (and the attention after it); 2 the next layer's qkv projection during a
  // mixture-of-experts layer's router. -1 the library's choice (kL2PrefetchByDefault: both), 0
  // none.
  int32_t l2_prefetch = -1;
};

enum class CudnnPrefillUse : int32_t { kNever = 0, kFullChunks = 1, kEveryChunk = 2 };

struct CudaOptions {
  // Decode steps replayed as CUDA graphs (captured by WarmUp or on first use); false runs
  // every step eagerly.
  bool decode_graphs = true;
  // DecodeAttention + PrefillAttention where the model's shape fits them; false runs every
  // step's attention on the generic PagedAttention kernel.
  bool fast_attention = true;
  // Sequences longer than the device tier (docs/LONG_CONTEXT.md): the number of positions
  // of host-resident KV one step may stream. The backend holds two device staging buffers
  // of one layer of that many positions each (inside gpu_mem_limit), and a long sequence
  // whose whole context exceeds it is refused at admission. 0: no streaming (long
  // sequences refused, as where fast_attention is off or the host tier is not mapped).
  int64_t host_kv_stream_tokens = 0;
  // Decode-batch projections (3..128 rows, bf16 compute, compute capability 9.0) on the
  // stream-K wgmma kernel (backend/cuda/skinny_gemm.h) where it beats cuBLAS / SkinnyFp8 by
  // measurement: 0 off; 1 on, with the pipeline measured faster per weight type (bf16 serial,
  // fp8 overlapped); 2 on, overlapped for both; 3 on for every projection of 3..128 rows,
  // with the TMA pipeline (bf16 and W8A8 operands; W8A16 overlapped).
  int32_t skinny_gemm = 1;
  // fp8 weights: steps of 3 or more rows quantize their activations per token to E4M3 and
  // run fp8 x fp8 tensor-core projections (W8A8): decode batches on the skinny kernel
  // (skinny_gemm.h; where it runs), larger steps through cuBLASLt (fp8_gemm.h; where it has
  // them). false keeps the activations 16-bit (W8A16).
  bool fp8_activations = true;
  // Prefill attention on the Hopper warpgroup-MMA kernel where it runs (bf16 compute,
  // head_dim 128, compute capability 9.0; backend/cuda/prefill_attention.h); false keeps the
  // mma.sync kernel everywhere.
  bool prefill_wgmma = true;
  // Which prefill steps run their attention on cuDNN's fused attention
  // (backend/cuda/cudnn_prefill.h), loaded at run time, where it applies: bf16 compute,
  // head_dim 64 or 128, plain attention scores (no window, soft-cap or other scale), bf16 or
  // fp8 KV. By default the steps whose every chunk fills the step's token budget (a long
  // prompt's): their plans are built at warm-up, and on Hopper cuDNN's engine runs them well
  // ahead of the kernels above (docs/CUDA_BACKEND.md). A chunk of another length would build a
  // plan of its own (over 0.1 s of host time) and runs on the kernels above, which also take a
  // step's many short chunks in one launch. kEveryChunk sends every step to cuDNN (each new
  // chunk length builds its plan). Where cuDNN cannot be loaded or refuses a step, the kernels
  // above run it (compute_path says why).
  CudnnPrefillUse prefill_cudnn = CudnnPrefillUse::kFullChunks;
  // With kv_dtype fp8, true runs the steps on cuDNN on its fp8 attention: each chunk's queries
  // and the context's K and V as E4M3 codes at one scale per tensor (the pool's per-row scales
  // folded into one per layer and side, each value rounded once more), the probabilities in
  // E4M3 for the second product, fp32 accumulation, the output in E4M3 then bf16
  // (backend/cuda/attention_fp8_inputs.h). false gathers the fp8 KV into bf16 for cuDNN's bf16
  // attention. Off until a GPU run measures its speed and quality.
  bool prefill_fp8_attention = false;
  // A step with both decode rows and a prompt chunk runs its decode attention (reading KV
  // from memory) on a second stream beside its prefill attention (on the tensor cores)
  // instead of before it (backend/cuda/attention_fork.h). Off until a GPU run measures it.
  bool overlap_attention = false;
  CudaLaunchOptions launch;
};

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CUDA_OPTIONS_H_
