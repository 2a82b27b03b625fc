// The kernels of a mixture-of-experts MLP on the GPU (Mixtral, Qwen3-MoE), in the order a
// layer runs them: the router logits, top-k routing, the routes grouped by expert, the two
// grouped expert GEMMs (gate|up with SiLU, then down; one launch each for all experts of a
// layer) and the weighted combine. The semantics are the CPU backend's (cpu_moe.h) step by
// step; moe_layer.h chains them. Every launcher enqueues on `stream`, never waits, and sizes
// its grid from its arguments alone (row counts, not routing results), so a decode step that
// runs them is capturable as a CUDA graph. Stateless; thread-safe for distinct buffers.
#ifndef KVTIER_BACKEND_CUDA_MOE_KERNELS_H_
#define KVTIER_BACKEND_CUDA_MOE_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace kvtier::cuda {

// Limits of the routing kernels (a warp holds one row's experts in registers; the combine
// sorts one row's routes in registers). Mixtral has 8 experts and top 2, Qwen3-MoE 128 and 8.
inline constexpr int kMoeMaxExperts = 256;
inline constexpr int kMoeMaxTopK = 16;

// The tile shapes of the grouped expert GEMMs (rows of routes x output columns per CTA). A
// tile holds the routes of one expert only, so a decode step's tiles are mostly padding rows
// and its time is the weight stream: narrow tiles there spread each expert's weights over more
// CTAs; k16x16Deep streams twice the K per step (more bytes in flight per CTA, fewer CTAs per
// SM). kGemv is no tile: the decode GEMV (gemv_kernel.cuh) per route, one warp per output
// column on the CUDA cores, for steps of a row or two, where every route has an expert of its
// own and the tensor cores would only multiply padding. kGemvFused is the same GEMV in the MLP's
// decode path (moe_decode.h): three PDL-launched kernels in route order instead of six, since at
// a row or two the fixed cost of each launch and of the grouping is most of the MLP's time; to
// MoeExpertGemm it is kGemv. kLibrary is no tile either: a cuBLAS GEMM per expert
// (moe_library.h) for prefill-sized steps of few-expert models; to MoeTileFor and
// MoeExpertGemm it is kAuto. kSkinny is no tile either: the grouped skinny tensor-core kernel
// over every expert's routes in one launch per projection (moe_skinny.h), for prefill-sized
// steps on compute capability 9.0; to MoeTileFor and MoeExpertGemm it is kAuto. kAuto picks by
// the routes each expert gets on average (MoeTileFor); whether a step takes the decode path,
// the library or the skinny path instead is the MLP's choice (MoeTileRun, moe_layer.h).
enum class MoeTile { kAuto, kGemv, kGemvFused, k16x16, k16x16Deep, k16x64, k64x64, kLibrary, kSkinny };

// The tile kAuto stands for at `routes` routes over `num_experts` experts; other tiles as given.
MoeTile MoeTileFor(MoeTile tile, int64_t routes, int64_t num_experts);
int MoeTileRows(MoeTile tile);  // a concrete tile's route rows (16 or 64)
const char* MoeTileName(MoeTile tile);

// Upper bound of the tiles `routes` routes over `num_experts` experts make at `tile_rows`
// rows per tile, whatever the routing: sum_e ceil(c_e / r) <= routes / r + min(E, routes).
// The grouped GEMMs launch this many tile slots; those past the real count exit at once.
int64_t MoeMaxTiles(int64_t routes, int64_t num_experts, int tile_rows);

// logits (rows, num_experts) fp32 = x (rows, hidden) times router (num_experts, hidden)^T:
// the router held in fp32 as the CPU backend holds it (the choices hang on these logits).
// hidden a multiple of 4; x and router 16-byte aligned.
template <typename T>
cudaError_t MoeRouterLogits(const T* x, const float* router, int rows, int hidden, int num_experts, float* logits,
                            cudaStream_t stream);

// cpu_moe.h RouteTopK: softmax over all experts in fp32, the top_k largest probabilities
// (equal ones to the lower expert index), renormalized to sum 1 when `renormalize`.
// chosen and weights: (rows, top_k), each row in descending probability.
cudaError_t MoeRouteTopK(const float* logits, int rows, int num_experts, int top_k, bool renormalize,
                         int32_t* chosen, float* weights, cudaStream_t stream);

// The routes (rows * top_k, route i = token i / top_k) grouped by expert, as device buffers.
struct MoeGrouping {
  int32_t* expert_offsets = nullptr;  // (num_experts + 1): expert e's slots [offsets[e], offsets[e+1])
  int32_t* route_slot = nullptr;      // (routes): the slot of route i
  int32_t* slot_token = nullptr;      // (routes): the token of each slot
  int32_t* slot_expert = nullptr;     // (routes): the expert of each slot
  int2* tiles = nullptr;              // (MoeMaxTiles): (expert, first row of the tile within it)
  int32_t* num_tiles = nullptr;       // (1): tiles filled
};

// Counts the routes of each expert, their offsets, every route's slot and the tile list of
// `tile_rows`-row tiles (one CTA: routes are few thousand at most). The order of an expert's
// slots is not fixed; nothing computed from a slot depends on it.
cudaError_t MoeGroupRoutes(const int32_t* chosen, int rows, int top_k, int num_experts, int tile_rows,
                           const MoeGrouping& grouping, cudaStream_t stream);

// One grouped expert GEMM over all experts of a layer: for every tile (expert e, its rows),
// out[slot] = a_row(slot) times expert e's matrix^T. Weights are stacked per expert, 16-bit in
// the compute dtype or E4M3 codes with one fp32 scale per output row (the dense fp8 weights'
// format). gated: each expert's matrix is (2n, k), gate rows then up rows, and out is
// silu(gate) * up; else (n, k). Only the experts some route chose have tiles, so only their
// weights are read.
template <typename T>
struct MoeGemmParams {
  const T* a = nullptr;                   // (a rows, k) activations
  const int32_t* a_row_of_slot = nullptr;  // gather: a's row for each slot (slot_token); null: slot s is row s
  const void* weights = nullptr;          // (num_experts, gated ? 2n : n, k) T or E4M3 codes
  const float* scales = nullptr;          // fp8: (num_experts, gated ? 2n : n)
  bool fp8 = false;
  bool gated = false;
  int k = 0;
  int n = 0;
  int num_experts = 0;
  int routes = 0;  // rows * top_k: sizes the launch
  const MoeGrouping* grouping = nullptr;
  MoeTile tile = MoeTile::kAuto;  // must be the tile MoeGroupRoutes was given the rows of
  T* out = nullptr;               // (routes, n) in slot order
};
// Requires k a multiple of 8 (16 with fp8), a and weights 16-byte aligned.
// MoeExpertGemmInit must have run once in the process before a launch is captured in a graph
// (it raises the kernels' shared-memory limit, which a capture may not).
template <typename T>
cudaError_t MoeExpertGemm(const MoeGemmParams<T>& params, cudaStream_t stream);
cudaError_t MoeExpertGemmInit();

// out[row] = sum over the row's routes, in ascending expert order (cpu_moe.cc's order), of
// weight * expert_out[slot of the route], in fp32. expert_out: (routes, hidden) slot order.
template <typename T>
cudaError_t MoeCombine(const T* expert_out, const int32_t* chosen, const float* weights, const int32_t* route_slot,
                       int rows, int top_k, int hidden, T* out, cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_MOE_KERNELS_H_
