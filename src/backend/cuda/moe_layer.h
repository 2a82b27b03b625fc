// The mixture-of-experts MLP of one layer on the GPU, chained from moe_kernels.h: router
// logits, top-k routing, routes grouped by expert, gate|up with SiLU and down as grouped GEMMs
// over all experts (only the chosen experts' weights read), and the weighted combine into the
// MLP's output; or, for a row or two (MoeTile::kGemvFused), the three kernels of moe_decode.h,
// which give the same bits. The semantics are cpu_moe.h's MoeMlp. Capturable: no host sync,
// every launch sized by the row count, the per-expert offsets and tiles in buffers of fixed size.
#ifndef KVTIER_BACKEND_CUDA_MOE_LAYER_H_
#define KVTIER_BACKEND_CUDA_MOE_LAYER_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/moe_weights.h"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda_options.h"
#include "model/config.h"

namespace kvtier::cuda {

// The device buffers of the MoE MLP for up to max_tokens rows, shared by every MoE layer (one
// runs at a time). Plain value: the memory is the DeviceMemoryAccount's.
struct MoeBuffers {
  int64_t max_tokens = 0;
  float* logits = nullptr;         // (tokens, num_experts)
  int32_t* chosen = nullptr;       // (tokens, top_k)
  float* weights = nullptr;        // (tokens, top_k)
  MoeGrouping grouping;            // offsets (num_experts + 1), slots (tokens * top_k), tiles
  uint32_t* arrivals = nullptr;    // (1) the decode path's router CTAs done; zero between launches
  uint16_t* act = nullptr;         // (tokens * top_k, expert_inter) silu(gate) * up, slot (decode: route) order
  uint16_t* expert_out = nullptr;  // (tokens * top_k, hidden) each route's expert output, slot order
  // (tokens * top_k, 2 * expert_inter) gate|up in slot order, for the library path
  // (moe_library.h); null unless allocated with `library`.
  uint16_t* wide = nullptr;
  // (6 * num_experts) the grouped library GEMMs' device pointer arrays (MoeRun::library_grouped);
  // null unless allocated with `library`.
  const void** gemm_pointers = nullptr;
  // (MoeSkinnyMaxProblems) the skinny path's problems (moe_skinny.h); null unless allocated
  // with `library`.
  int4* problems = nullptr;
  // The library path with fp8 experts (W8A8), null unless allocated with `library_fp8`: x's
  // rows quantized per token, and each GEMM's per-row scales in slot order with every
  // expert's first one 16-byte aligned (MoeScaleSlot). The gathered codes go to expert_out and
  // the gated product's codes to act, both free at that point.
  uint8_t* x8 = nullptr;          // (tokens, hidden) E4M3 codes
  float* x8_scales = nullptr;     // (tokens)
  float* slot_scales = nullptr;   // (tokens * top_k + 4 * (num_experts + 1)), MoeScaleSlot's layout
  float* act_scales = nullptr;    // (tokens * top_k) the gated product's, slot order

  // Device bytes for `max_tokens` rows (with `library`, `wide` too; with `library_fp8` the
  // buffers above); 0 for a dense model.
  static int64_t Bytes(const ModelConfig& config, int64_t max_tokens, bool library = false, bool library_fp8 = false);
  // Also readies the kernels for graph capture (MoeExpertGemmInit).
  static absl::StatusOr<MoeBuffers> Allocate(const ModelConfig& config, int64_t max_tokens,
                                             DeviceMemoryAccount& memory, bool library = false,
                                             bool library_fp8 = false);
};

// How one MoE MLP runs: the shape from the config, the tile of the grouped GEMMs (kAuto in the
// forward; the benchmark sweeps the others), and how the decode path's kernels are launched.
// The fused decode path runs one-row steps where CudaLaunchOptions::moe_decode_fused leaves the
// choice to the library (bench/results/2026-12-06-moe-decode).
inline constexpr bool kMoeDecodeFusedByDefault = true;
// Whether the decode path's router also computes the norm before the MLP (MoeDecodeRoute's
// fused norm) where EnqueueMoeMlp is given that norm.
inline constexpr bool kMoeDecodeNormFusedByDefault = true;
// Whether kAuto runs prefill-sized steps' experts on the grouped skinny kernel where it can
// (MoeSkinnyPathAvailable) and the library is not taken, and from how many routes per expert on
// average: it beat the tiles from 32 (Qwen3-MoE's 512- and 2,048-row chunks, bf16 and fp8
// experts; bench/results/2026-12-07-moe-prompts); at 4 the tiles were faster, and between the two
// the tiles stay until measured.
inline constexpr bool kMoeSkinnyByDefault = true;
inline constexpr int64_t kMoeSkinnyMinRoutesPerExpert = 32;
inline bool MoeSkinnyWanted(const CudaLaunchOptions& launch) {
  return launch.moe_skinny == 1 || (launch.moe_skinny < 0 && kMoeSkinnyByDefault);
}

struct MoeRun {
  int hidden = 0;
  int num_experts = 0;
  int top_k = 0;
  int expert_inter = 0;
  bool renormalize = true;
  MoeTile tile = MoeTile::kAuto;
  CudaLaunchOptions launch;  // the decode path's (kGemvFused); the grouped path launches plainly
  // kAuto's decode pick: the fused decode path, or the grouped path's per-route GEMV (kGemv).
  bool fused_decode = kMoeDecodeFusedByDefault;
  bool fused_norm = kMoeDecodeNormFusedByDefault;  // on the decode path only
  // Weights the decode path's router asks L2 for as it starts (the next layer's qkv projection:
  // CudaLaunchOptions::l2_prefetch); null base: none.
  L2Prefetch router_prefetch;
  // The library path's GEMMs (tile kLibrary; moe_library.h); null: that path is never taken.
  cublasHandle_t cublas = nullptr;
  // Its fp8 x fp8 GEMMs for fp8 experts (W8A8); null: fp8 experts never take that path.
  Fp8Gemm* fp8_gemm = nullptr;
  // 16-bit experts on the library path: each projection as one grouped GEMM over the experts
  // (cublasGemmGroupedBatchedEx) instead of a cublasGemmEx per expert. Of sets it for models
  // of more than kMoeLibraryLoopMaxExperts experts.
  bool library_grouped = false;
  // The experts of prefill-sized steps on the grouped skinny kernel (MoeTile::kSkinny,
  // moe_skinny.h): SkinnyGemm's workspace (for 128 rows) and the SMs its launches spread over;
  // null: that path is never taken. With `skinny` (CudaLaunchOptions::moe_skinny) kAuto takes
  // it from kMoeSkinnyMinRoutesPerExpert routes per expert on, where the library is not taken.
  void* skinny_workspace = nullptr;
  int sm_count = 0;
  bool skinny = kMoeSkinnyByDefault;
  // Its pipeline (kOverlapped; the bench sweeps kSerial too; a 128-row token tile runs serial).
  SkinnyPipeline skinny_pipeline = SkinnyPipeline::kOverlapped;

  static MoeRun Of(const ModelConfig& config);
};

// Whether a model's experts take the library path (moe_library.h) for steps with enough routes
// per expert. Few experts (at most kMoeLibraryLoopMaxExperts: Mixtral's 8) each get many routes
// in a prefill step and run a GEMM per expert, 16-bit or fp8; fp8 experts only with fp8
// activations (`fp8_activations`: the W8A8 GEMMs of Fp8Gemm) and where hidden and the
// experts' intermediate size are multiples of 16 (cuBLASLt's fp8 K). Many experts
// (Qwen3-MoE's 128) make GEMMs too small to pay for a launch each: 16-bit ones run one grouped
// GEMM per projection (MoeRun::library_grouped), fp8 ones keep the tiles (cuBLAS groups no fp8
// GEMMs). bench/results/2026-12-07-moe-library and -moe-fp8-library have the measurements.
inline constexpr int64_t kMoeLibraryLoopMaxExperts = 16;
// The fewest routes per expert (on average) at which kAuto takes the library path: per expert
// and grouped.
inline constexpr int64_t kMoeLibraryMinRoutesPerExpert = 16;
inline constexpr int64_t kMoeLibraryGroupedMinRoutesPerExpert = 64;
bool MoeLibraryPathSuits(const ModelConfig& config, bool fp8_weights, bool fp8_activations);

// The tile EnqueueMoeMlp runs `routes` routes on: with kAuto, the fused decode path for one row
// where run.fused_decode; the library where run.cublas is set and the experts get
// kMoeLibraryMinRoutesPerExpert routes each on average (kMoeLibraryGroupedMinRoutesPerExpert
// with run.library_grouped); else the skinny path where run.skinny and run.skinny_workspace are
// set and the experts get kMoeSkinnyMinRoutesPerExpert routes each on average; kLibrary and
// kSkinny as given; otherwise MoeTileFor's. Where the library or skinny path is picked but not
// available (MoeLibraryPathAvailable, MoeSkinnyPathAvailable: a capturing stream; fp8 experts
// without run.fp8_gemm or the fp8 buffers; 16-bit compute for the skinny kernels),
// EnqueueMoeMlp runs MoeTileFor's tile instead.
MoeTile MoeTileRun(const MoeRun& run, int64_t routes);
// The same for these experts: kAuto keeps fp8 experts of a grouped-library model (more than
// kMoeLibraryLoopMaxExperts) off the library, as cuBLAS groups no fp8 GEMMs: the skinny path or
// the tiles as above.
MoeTile MoeTileRun(const MoeRun& run, int64_t routes, const MoeExperts& experts);

// out (rows, hidden) = the MoE MLP of x (rows, hidden), both in T, rows <= buffers.max_tokens.
// The experts' weights are 16-bit (T) or fp8, as loaded.
template <typename T>
absl::Status EnqueueMoeMlp(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& buffers, const T* x,
                           int rows, T* out, cudaStream_t stream);

// The AddRmsNorm (kernels.h) that makes the MLP's input: residual += add, then normed =
// weight * residual / rms(residual), rows of run.hidden.
template <typename T>
struct MoeInputNorm {
  float* residual = nullptr;
  const T* add = nullptr;
  const float* weight = nullptr;
  float eps = 0.0f;
  T* normed = nullptr;
};

// The same MLP of norm.normed, the norm run first: on the decode path fused into the router
// where run.fused_norm (MoeDecodeRoute: one dependent kernel less per layer), as a kernel of
// its own otherwise. The same bits either way.
template <typename T>
absl::Status EnqueueMoeMlp(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& buffers,
                           const MoeInputNorm<T>& norm, int rows, T* out, cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_MOE_LAYER_H_
