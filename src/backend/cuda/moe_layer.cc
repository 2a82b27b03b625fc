// The MoE MLP on the GPU (see moe_layer.h).
#include "backend/cuda/moe_layer.h"

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_decode.h"
#include "backend/cuda/moe_library.h"
#include "backend/cuda/moe_skinny.h"
#include "common/status_macros.h"

namespace kvtier::cuda {
namespace {

// Tiles of the finest grouping (16 rows) bound every tile's count.
constexpr int kFinestTileRows = 16;

int64_t Align(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// The gate|up product of `routes` routes of x into b.act (no gather or grouping set).
template <typename T>
MoeGemmParams<T> GateUpParams(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& b, const T* x,
                              int routes, MoeTile tile) {
  MoeGemmParams<T> p;
  p.a = x;
  p.fp8 = experts.gate_up == nullptr;
  p.weights = p.fp8 ? static_cast<const void*>(experts.gate_up_codes) : experts.gate_up;
  p.scales = experts.gate_up_scales;
  p.gated = true;
  p.k = run.hidden;
  p.n = run.expert_inter;
  p.num_experts = run.num_experts;
  p.routes = routes;
  p.tile = tile;
  p.out = reinterpret_cast<T*>(b.act);
  return p;
}

absl::Status CheckMoeMlpRows(const MoeExperts& experts, const MoeBuffers& b, int rows) {
  if (experts.empty() || rows < 1 || rows > b.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("moe mlp: ", rows, " rows for buffers of ", b.max_tokens,
                                                   experts.empty() ? ", and the layer has no experts" : ""));
  }
  return absl::OkStatus();
}

// MoeTile::kGemvFused: the decode path's three kernels (moe_decode.h), in route order.
template <typename T>
absl::Status EnqueueMoeDecode(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& b, const T* x, int rows,
                              T* out, cudaStream_t stream, const MoeInputNorm<T>* norm = nullptr) {
  MoeDecodeRouteParams<T> route;
  route.x = x;
  if (norm != nullptr) {
    route.residual = norm->residual;
    route.add = norm->add;
    route.norm_weight = norm->weight;
    route.eps = norm->eps;
    route.normed = norm->normed;
  }
  route.router = experts.router;
  route.rows = rows;
  route.hidden = run.hidden;
  route.num_experts = run.num_experts;
  route.top_k = run.top_k;
  route.renormalize = run.renormalize;
  route.logits = b.logits;
  route.arrivals = b.arrivals;
  route.chosen = b.chosen;
  route.weights = b.weights;
  route.prefetch = run.router_prefetch;
  CUDA_RETURN_IF_ERROR(MoeDecodeRoute(route, stream, run.launch));
  const MoeGemmParams<T> gate_up = GateUpParams(run, experts, b, x, rows * run.top_k, MoeTile::kGemvFused);
  CUDA_RETURN_IF_ERROR(MoeDecodeGateUp(gate_up, b.chosen, run.top_k, stream, run.launch));
  const bool fp8 = gate_up.fp8;
  MoeDownCombineParams<T> down;
  down.act = reinterpret_cast<const T*>(b.act);
  down.chosen = b.chosen;
  down.weights = b.weights;
  down.down = fp8 ? static_cast<const void*>(experts.down_codes) : experts.down;
  down.scales = experts.down_scales;
  down.fp8 = fp8;
  down.rows = rows;
  down.top_k = run.top_k;
  down.k = run.expert_inter;
  down.n = run.hidden;
  down.out = out;
  // The copy engine where asked, or by default for 16-bit experts: with fp8 codes the register
  // form measured faster (bench/results/2026-12-07-moe-down-bulk).
  down.bulk = run.launch.moe_down_bulk == 1 || (run.launch.moe_down_bulk < 0 && !fp8);
  CUDA_RETURN_IF_ERROR(MoeDecodeDownCombine(down, stream, run.launch));
  return absl::OkStatus();
}

}  // namespace

int64_t MoeBuffers::Bytes(const ModelConfig& c, int64_t max_tokens, bool library, bool library_fp8) {
  if (c.moe.num_experts == 0) return 0;
  const int64_t e = c.moe.num_experts, routes = max_tokens * c.moe.top_k;
  const int64_t fp8 = Align(max_tokens * c.hidden_size) + Align(4 * max_tokens) + Align(4 * (routes + 4 * (e + 1))) +
                      Align(4 * routes);
  return Align(4 * max_tokens * e) + 2 * Align(4 * routes) + Align(4 * (e + 1)) + 3 * Align(4 * routes) +
         Align(8 * MoeMaxTiles(routes, e, kFinestTileRows)) + Align(4) + Align(4) +
         Align(2 * routes * c.moe.expert_intermediate_size) + Align(2 * routes * c.hidden_size) +
         (library ? Align(4 * routes * c.moe.expert_intermediate_size) + Align(8 * 6 * e) +
                        Align(16 * MoeSkinnyMaxProblems(routes, e))
                  : 0) +
         (library && library_fp8 ? fp8 : 0);
}

absl::StatusOr<MoeBuffers> MoeBuffers::Allocate(const ModelConfig& c, int64_t max_tokens,
                                                DeviceMemoryAccount& memory, bool library, bool library_fp8) {
  MoeBuffers b;
  if (c.moe.num_experts == 0) return b;
  if (max_tokens < 1 || c.moe.top_k < 1 || c.moe.num_experts > kMoeMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat("moe buffers: ", max_tokens, " tokens, ", c.moe.num_experts,
                                                   " experts, top ", c.moe.top_k));
  }
  b.max_tokens = max_tokens;
  CUDA_RETURN_IF_ERROR(MoeExpertGemmInit());
  const int64_t e = c.moe.num_experts, routes = max_tokens * c.moe.top_k;
  auto alloc = [&](int64_t bytes, const char* what) {
    return memory.Allocate(static_cast<size_t>(Align(bytes)), what);
  };
  ASSIGN_OR_RETURN(void* logits, alloc(4 * max_tokens * e, "router logits"));
  b.logits = static_cast<float*>(logits);
  ASSIGN_OR_RETURN(void* chosen, alloc(4 * routes, "chosen experts"));
  b.chosen = static_cast<int32_t*>(chosen);
  ASSIGN_OR_RETURN(void* weights, alloc(4 * routes, "routing weights"));
  b.weights = static_cast<float*>(weights);
  ASSIGN_OR_RETURN(void* offsets, alloc(4 * (e + 1), "expert offsets"));
  b.grouping.expert_offsets = static_cast<int32_t*>(offsets);
  ASSIGN_OR_RETURN(void* route_slot, alloc(4 * routes, "route slots"));
  b.grouping.route_slot = static_cast<int32_t*>(route_slot);
  ASSIGN_OR_RETURN(void* slot_token, alloc(4 * routes, "slot tokens"));
  b.grouping.slot_token = static_cast<int32_t*>(slot_token);
  ASSIGN_OR_RETURN(void* slot_expert, alloc(4 * routes, "slot experts"));
  b.grouping.slot_expert = static_cast<int32_t*>(slot_expert);
  ASSIGN_OR_RETURN(void* tiles, alloc(8 * MoeMaxTiles(routes, e, kFinestTileRows), "expert tiles"));
  b.grouping.tiles = static_cast<int2*>(tiles);
  ASSIGN_OR_RETURN(void* num_tiles, alloc(4, "expert tile count"));
  b.grouping.num_tiles = static_cast<int32_t*>(num_tiles);
  ASSIGN_OR_RETURN(void* arrivals, alloc(4, "moe router arrivals"));
  b.arrivals = static_cast<uint32_t*>(arrivals);
  CUDA_RETURN_IF_ERROR(cudaMemset(b.arrivals, 0, 4));
  ASSIGN_OR_RETURN(void* act, alloc(2 * routes * c.moe.expert_intermediate_size, "expert activations"));
  b.act = static_cast<uint16_t*>(act);
  ASSIGN_OR_RETURN(void* expert_out, alloc(2 * routes * c.hidden_size, "expert outputs"));
  b.expert_out = static_cast<uint16_t*>(expert_out);
  if (library) {
    ASSIGN_OR_RETURN(void* wide, alloc(4 * routes * c.moe.expert_intermediate_size, "expert gate|up (library)"));
    b.wide = static_cast<uint16_t*>(wide);
    ASSIGN_OR_RETURN(void* pointers, alloc(8 * 6 * e, "expert GEMM pointers (library)"));
    b.gemm_pointers = static_cast<const void**>(pointers);
    ASSIGN_OR_RETURN(void* problems, alloc(16 * MoeSkinnyMaxProblems(routes, e), "expert problems (skinny)"));
    b.problems = static_cast<int4*>(problems);
  }
  if (library && library_fp8) {
    ASSIGN_OR_RETURN(void* x8, alloc(max_tokens * c.hidden_size, "expert input codes (library)"));
    b.x8 = static_cast<uint8_t*>(x8);
    ASSIGN_OR_RETURN(void* x8_scales, alloc(4 * max_tokens, "expert input scales (library)"));
    b.x8_scales = static_cast<float*>(x8_scales);
    ASSIGN_OR_RETURN(void* slot_scales, alloc(4 * (routes + 4 * (e + 1)), "expert slot scales (library)"));
    b.slot_scales = static_cast<float*>(slot_scales);
    ASSIGN_OR_RETURN(void* act_scales, alloc(4 * routes, "expert activation scales (library)"));
    b.act_scales = static_cast<float*>(act_scales);
  }
  return b;
}

MoeRun MoeRun::Of(const ModelConfig& c) {
  MoeRun run;
  run.hidden = static_cast<int>(c.hidden_size);
  run.num_experts = static_cast<int>(c.moe.num_experts);
  run.top_k = static_cast<int>(c.moe.top_k);
  run.expert_inter = static_cast<int>(c.moe.expert_intermediate_size);
  run.renormalize = c.moe.norm_topk_prob;
  run.library_grouped = c.moe.num_experts > kMoeLibraryLoopMaxExperts;
  return run;
}

bool MoeLibraryPathSuits(const ModelConfig& config, bool fp8_weights, bool fp8_activations) {
  if (config.moe.num_experts == 0) return false;
  if (config.moe.num_experts > kMoeLibraryLoopMaxExperts) return !fp8_weights;  // grouped, 16-bit only
  return !fp8_weights || (fp8_activations && config.hidden_size % 16 == 0 &&
                          config.moe.expert_intermediate_size % 16 == 0);
}

namespace {

// kAuto's pick where the library is not taken: the skinny kernel where the run has it and the
// experts get enough routes, else the tiles.
MoeTile SkinnyOrTiles(const MoeRun& run, int64_t routes) {
  if (run.skinny && run.skinny_workspace != nullptr && routes >= kMoeSkinnyMinRoutesPerExpert * run.num_experts) {
    return MoeTile::kSkinny;
  }
  return MoeTileFor(MoeTile::kAuto, routes, run.num_experts);
}

}  // namespace

MoeTile MoeTileRun(const MoeRun& run, int64_t routes) {
  // One row: the fused path (its routes are distinct experts). Two rows may share experts, which
  // the fused path streams once per route: the grouped per-route GEMV was as fast or faster there
  // on both shapes kvtier_cuda_moe_bench sweeps.
  if (run.tile == MoeTile::kAuto && run.fused_decode && routes <= run.top_k) return MoeTile::kGemvFused;
  if (run.tile == MoeTile::kLibrary || run.tile == MoeTile::kSkinny) return run.tile;
  if (run.tile != MoeTile::kAuto) return MoeTileFor(run.tile, routes, run.num_experts);
  // The library before the skinny kernel: where the library's GEMMs are big enough to be taken
  // they beat it (Mixtral from 64 rows, Qwen3-MoE's 16-bit experts from 1,024).
  const int64_t min_routes =
      run.library_grouped ? kMoeLibraryGroupedMinRoutesPerExpert : kMoeLibraryMinRoutesPerExpert;
  if (run.cublas != nullptr && routes >= min_routes * run.num_experts) return MoeTile::kLibrary;
  return SkinnyOrTiles(run, routes);
}

MoeTile MoeTileRun(const MoeRun& run, int64_t routes, const MoeExperts& experts) {
  const MoeTile tile = MoeTileRun(run, routes);
  const bool fp8_experts = experts.gate_up == nullptr;
  if (tile == MoeTile::kLibrary && run.tile == MoeTile::kAuto && fp8_experts && run.library_grouped) {
    return SkinnyOrTiles(run, routes);
  }
  return tile;
}

template <typename T>
absl::Status EnqueueMoeMlp(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& b, const T* x, int rows,
                           T* out, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckMoeMlpRows(experts, b, rows));
  const int routes = rows * run.top_k;
  MoeTile tile = MoeTileRun(run, routes, experts);
  if (tile == MoeTile::kGemvFused) return EnqueueMoeDecode(run, experts, b, x, rows, out, stream);
  // fp8 experts' library path computes in bf16 only, as the dense W8A8 projections do.
  const bool fp8_in_f16 = experts.gate_up == nullptr && !std::is_same_v<T, bf16>;
  if (tile == MoeTile::kLibrary && (fp8_in_f16 || !MoeLibraryPathAvailable(run, experts, b, stream))) {
    tile = MoeTileFor(MoeTile::kAuto, routes, run.num_experts);
  }
  // The skinny kernels compute in bf16 only.
  if (tile == MoeTile::kSkinny && (!std::is_same_v<T, bf16> || !MoeSkinnyPathAvailable(run, experts, b, stream))) {
    tile = MoeTileFor(MoeTile::kAuto, routes, run.num_experts);
  }
  CUDA_RETURN_IF_ERROR(MoeRouterLogits(x, experts.router, rows, run.hidden, run.num_experts, b.logits, stream));
  CUDA_RETURN_IF_ERROR(
      MoeRouteTopK(b.logits, rows, run.num_experts, run.top_k, run.renormalize, b.chosen, b.weights, stream));
  CUDA_RETURN_IF_ERROR(
      MoeGroupRoutes(b.chosen, rows, run.top_k, run.num_experts, MoeTileRows(tile), b.grouping, stream));
  if (tile == MoeTile::kLibrary || tile == MoeTile::kSkinny) {
    if (tile == MoeTile::kLibrary && experts.gate_up != nullptr) {
      RETURN_IF_ERROR(EnqueueMoeExpertsOnLibrary(run, experts, b, x, rows, stream));
    } else if constexpr (std::is_same_v<T, bf16>) {  // fp8 library experts and the skinny path (others took the tiles)
      RETURN_IF_ERROR(tile == MoeTile::kSkinny ? EnqueueMoeExpertsOnSkinny(run, experts, b, x, rows, stream)
                                               : EnqueueMoeFp8ExpertsOnLibrary(run, experts, b, x, rows, stream));
    }
    CUDA_RETURN_IF_ERROR(MoeCombine(reinterpret_cast<const T*>(b.expert_out), b.chosen, b.weights,
                                    b.grouping.route_slot, rows, run.top_k, run.hidden, out, stream));
    return absl::OkStatus();
  }
  MoeGemmParams<T> gate_up = GateUpParams(run, experts, b, x, routes, tile);
  gate_up.a_row_of_slot = b.grouping.slot_token;
  gate_up.grouping = &b.grouping;
  CUDA_RETURN_IF_ERROR(MoeExpertGemm(gate_up, stream));
  MoeGemmParams<T> down = gate_up;
  down.a = reinterpret_cast<const T*>(b.act);
  down.a_row_of_slot = nullptr;
  down.weights = gate_up.fp8 ? static_cast<const void*>(experts.down_codes) : experts.down;
  down.scales = experts.down_scales;
  down.gated = false;
  down.k = run.expert_inter;
  down.n = run.hidden;
  down.out = reinterpret_cast<T*>(b.expert_out);
  CUDA_RETURN_IF_ERROR(MoeExpertGemm(down, stream));
  CUDA_RETURN_IF_ERROR(MoeCombine(reinterpret_cast<const T*>(b.expert_out), b.chosen, b.weights,
                                  b.grouping.route_slot, rows, run.top_k, run.hidden, out, stream));
  return absl::OkStatus();
}

template <typename T>
absl::Status EnqueueMoeMlp(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& b,
                           const MoeInputNorm<T>& norm, int rows, T* out, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckMoeMlpRows(experts, b, rows));
  if (run.fused_norm && MoeTileRun(run, static_cast<int64_t>(rows) * run.top_k) == MoeTile::kGemvFused &&
      MoeDecodeRouteNormFits(rows, run.hidden, sizeof(T))) {
    return EnqueueMoeDecode(run, experts, b, norm.normed, rows, out, stream, &norm);
  }
  CUDA_RETURN_IF_ERROR(
      AddRmsNorm(norm.residual, norm.add, norm.weight, nullptr, rows, run.hidden, norm.eps, norm.normed, stream,
                 run.launch));
  return EnqueueMoeMlp(run, experts, b, static_cast<const T*>(norm.normed), rows, out, stream);
}

template absl::Status EnqueueMoeMlp<bf16>(const MoeRun&, const MoeExperts&, const MoeBuffers&, const bf16*, int, bf16*,
                                          cudaStream_t);
template absl::Status EnqueueMoeMlp<f16>(const MoeRun&, const MoeExperts&, const MoeBuffers&, const f16*, int, f16*,
                                         cudaStream_t);
template absl::Status EnqueueMoeMlp<bf16>(const MoeRun&, const MoeExperts&, const MoeBuffers&,
                                          const MoeInputNorm<bf16>&, int, bf16*, cudaStream_t);
template absl::Status EnqueueMoeMlp<f16>(const MoeRun&, const MoeExperts&, const MoeBuffers&,
                                         const MoeInputNorm<f16>&, int, f16*, cudaStream_t);

}  // namespace kvtier::cuda
