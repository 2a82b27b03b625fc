// The experts of a mixture-of-experts MLP on the grouped skinny tensor-core kernel
// (MoeTile::kSkinny; skinny_gemm.h SkinnyGemmGrouped), for prefill-sized steps on compute
// capability 9.0. A prefill step gives each of many experts (Qwen3-MoE: 128) tens of routes:
// too few rows for a library GEMM per expert to pay for its launch, and a 64-row tile of the
// grouped tiles (moe_kernels.h) is half padding at 32 routes, with its weights converted and
// multiplied on WMMA. Here every expert's routes are one problem (or several of up to 128 rows)
// of one stream-K launch per projection: every SM streams the same share of the chosen experts'
// weights through the wgmma pipeline, each expert's weights read once per 128 of its routes.
//
// After the routing and grouping (MoeGroupRoutes) the experts' slot offsets are read back to
// the host (one copy and a stream synchronization per layer, as the library path does), so
// the path is not capturable: EnqueueMoeMlp takes it only on a stream that is not capturing,
// with bf16 compute and the buffers' `wide` and `problems` allocated. Steps:
//   1. the problems (expert, first slot, rows) built on the host and copied up;
//   2. the routes' rows gathered in slot order into buffers.expert_out (MoeGatherSlotRows);
//   3. gate|up for every problem in one launch into buffers.wide, in slot order;
//   4. GatedMul (SiLU) into buffers.act;
//   5. down for every problem in one launch into buffers.expert_out, in slot order;
// then MoeCombine as on the grouped path. fp8 experts are W8A16 (the codes converted to bf16 in
// shared memory, the per-row scales on the fp32 result), as on the grouped tiles.
#ifndef KVTIER_BACKEND_CUDA_MOE_SKINNY_H_
#define KVTIER_BACKEND_CUDA_MOE_SKINNY_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "backend/cuda/moe_layer.h"

namespace kvtier::cuda {

// The problems of one grouped launch per expert with routes: {expert, first slot, rows, 0},
// an expert's routes cut into pieces of at most `tile_rows` rows. offsets: the experts' first
// slots and the total (num_experts + 1).
std::vector<int4> MoeSkinnyProblems(const std::vector<int32_t>& offsets, int tile_rows);

// The token tile for these offsets: the smallest of 16, 32, 64 and 128 rows that holds every
// expert's routes, else 128 (the busiest experts then take several problems).
int MoeSkinnyTileRows(const std::vector<int32_t>& offsets);

// The most problems a step of `routes` routes over `num_experts` experts can make (the size of
// MoeBuffers::problems): every piece but an expert's last holds at least 16 rows.
int64_t MoeSkinnyMaxProblems(int64_t routes, int64_t num_experts);

// Whether `run` can take the skinny path for these experts and buffers on `stream` now.
bool MoeSkinnyPathAvailable(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& buffers,
                            cudaStream_t stream);

// Steps 1-5 above for `rows` rows of x, after MoeGroupRoutes filled buffers.grouping; leaves
// each route's expert output in buffers.expert_out (slot order) for MoeCombine.
absl::Status EnqueueMoeExpertsOnSkinny(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& buffers,
                                       const bf16* x, int rows, cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_MOE_SKINNY_H_
