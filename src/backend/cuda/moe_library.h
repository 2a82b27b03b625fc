// The experts of a mixture-of-experts MLP on cuBLAS (MoeTile::kLibrary), for prefill-sized
// steps: each expert gets tens to hundreds of routes there, and a library GEMM per expert runs
// those rows near the tensor cores' rate, which the grouped tiles (moe_kernels.h) do not. After
// the routing and grouping (MoeGroupRoutes), the experts' slot offsets are read back to the host
// (one copy and a stream synchronization per layer), so the path is not capturable: EnqueueMoeMlp
// takes it only on a stream that is not capturing, with the buffers' `wide` allocated (and for
// fp8 experts run.fp8_gemm and the fp8 buffers); otherwise the grouped tiles run. Steps with
// 16-bit experts:
//   1. the routes' rows gathered in slot order into buffers.expert_out (MoeGatherSlotRows);
//   2. per expert with routes: gate|up = rows times its (2 * inter, hidden) matrix^T
//      (cublasGemmEx, fp32 accumulation) into buffers.wide, in slot order;
//   3. GatedMul (SiLU) into buffers.act;
//   4. per expert: down into buffers.expert_out, in slot order;
// then MoeCombine as on the grouped path. The products are cuBLAS's, rounded to T between the
// steps as the dense MLP's are; the tests hold them to the CPU within the 16-bit bounds.
//
// With fp8 experts the same steps run fp8 x fp8 (W8A8, as the dense fp8 projections of
// prefill-sized steps do): x quantized per token (QuantizeActivationsFp8), its codes gathered
// in slot order and its scales laid out per expert (MoeSlotScales); gate|up per expert on
// Fp8Gemm with the experts' per-channel scales; GatedMulFp8 quantizes the gated product per
// slot; down per expert on Fp8Gemm. The activations' rounding to E4M3 is the difference from
// the tiles (W8A16); the tests hold it to the CPU within the W8A8 bound.
#ifndef KVTIER_BACKEND_CUDA_MOE_LIBRARY_H_
#define KVTIER_BACKEND_CUDA_MOE_LIBRARY_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cuda/moe_layer.h"

namespace kvtier::cuda {

// out (routes, row) = rows[slot_token[s]] for every slot s, rows of `row_bytes` bytes (a
// multiple of 16) whatever their element type; rows and out 16-byte aligned.
cudaError_t MoeGatherSlotRows(const void* rows, const int32_t* slot_token, int routes, int64_t row_bytes, void* out,
                              cudaStream_t stream);

// Where an expert's first per-row scale lies in MoeBuffers::slot_scales: its first slot
// rounded up to 4 floats (a 16-byte boundary, as cuBLASLt reads its scale vectors), plus 4 per
// expert before it, so an expert's scales never reach the next one's.
constexpr int64_t MoeScaleSlot(int64_t first_slot, int64_t expert) { return (first_slot + 3) / 4 * 4 + 4 * expert; }

// out[MoeScaleSlot(offsets[e], e) + s - offsets[e]] = scales[slot_token[s]] for every slot s
// of expert e = slot_expert[s]; with slot_token null, scales[s] (scales already in slot order).
cudaError_t MoeSlotScales(const float* scales, const int32_t* slot_token, const int32_t* slot_expert,
                          const int32_t* expert_offsets, int routes, float* out, cudaStream_t stream);

// Each expert's first slot and the total (num_experts + 1), known to the host only after the
// grouping ran: one copy and a synchronization of `stream`.
absl::StatusOr<std::vector<int32_t>> MoeExpertOffsetsOnHost(const MoeRun& run, const MoeBuffers& buffers,
                                                            cudaStream_t stream);

// Whether `run` can take the library path for these experts and buffers on `stream` now.
bool MoeLibraryPathAvailable(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& buffers,
                             cudaStream_t stream);

// Steps 1-4 above for `rows` rows of x, after MoeGroupRoutes filled buffers.grouping; leaves
// each route's expert output in buffers.expert_out (slot order) for MoeCombine.
template <typename T>
absl::Status EnqueueMoeExpertsOnLibrary(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& buffers,
                                        const T* x, int rows, cudaStream_t stream);
// The same with fp8 experts (W8A8, above), in bf16 as the dense W8A8 projections.
absl::Status EnqueueMoeFp8ExpertsOnLibrary(const MoeRun& run, const MoeExperts& experts, const MoeBuffers& buffers,
                                           const bf16* x, int rows, cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_MOE_LIBRARY_H_
