// Stream-K tensor-core projection for decode batches of 3..128 rows:
// out(m, n) = x(m, k) * W(n, k)^T, x bf16, W bf16 or fp8 E4M3 codes with one fp32 scale per
// output row (W8A16), or x and W both E4M3 codes with scales per token and per row (W8A8),
// fp32 accumulation, bf16 or fp32 output. At these m the weights are
// nearly all the traffic, so the kernel is built to stream them at HBM bandwidth: every SM
// gets the same share of weight slices whatever the shape (design in skinny_gemm.cu).
// wgmma needs the sm_90a target: the kernels exist only in that code, so the backend uses
// them only on a compute capability 9.0 device (SkinnyGemmDeviceOk) and keeps cuBLAS /
// SkinnyFp8 elsewhere.
#ifndef KVTIER_BACKEND_CUDA_SKINNY_GEMM_H_
#define KVTIER_BACKEND_CUDA_SKINNY_GEMM_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda_options.h"

namespace kvtier::cuda {

constexpr int kSkinnyGemmMaxRows = 128;

// How the weights are pipelined. kSerial waits for each slice's MMAs before the next slice
// (deeper copy ring); kOverlapped lets one slice's MMAs run under the next slice's barrier
// and copies (one ring slot less in flight); both copy with cp.async from every thread.
// kTma has a producer warp issue TMA box copies into a ring of mbarrier-guarded slots that
// the MMA warps give back as they finish (bf16 and W8A8; W8A16 runs it as kOverlapped; a
// driver without tensor maps fails the call with cudaErrorNotSupported: SkinnyTmaAvailable).
// Which is faster is shape-dependent: measured by the skinny bench (skinny_gemm_bench.cc).
enum class SkinnyPipeline { kSerial = 0, kOverlapped = 1, kTma = 2 };

// How the TMA pipeline moves the weights: bytes of each weight row per step for fp8 codes
// (128 or 256; bf16 rows always take 256), the L2 promotion of its copies (0, 128 or 256
// bytes: what L2 fetches from HBM per miss), whether the copies carry eviction hints
// (weights first out, activations last), and how many steps each CTA keeps in flight
// (lookahead; 0: as many as its ring holds; at least 2). A shorter lookahead keeps the memory
// system's queues short, so the loads of a tile's finish do not wait behind every SM's
// prefetched weights; too short leaves HBM idle. Process-wide; the defaults are the measured
// best (docs/CUDA_BACKEND.md), the setter is for the benches' sweeps.
struct SkinnyTmaTuning {
  int code_row_bytes = 256;
  int l2_promotion = 256;
  bool l2_hints = true;
  int lookahead = 3;
};
void SetSkinnyTmaTuning(const SkinnyTmaTuning& tuning);
SkinnyTmaTuning CurrentSkinnyTmaTuning();

// Where the TMA pipeline's time goes, for the trace bench (skinny_gemm_trace_bench.cc): while a
// device buffer is set, each launch's CTA c writes kSkinnyTraceSlots int64 at
// trace + c * kSkinnyTraceSlots (SkinnyTraceSlot), every launch to the same place. Process-
// wide like the tuning; nullptr (the default) turns it off.
enum SkinnyTraceSlot : int {
  kTraceEntryNs = 0,      // %globaltimer as the MMA warps start
  kTracePdlDoneNs,        // ... past their wait on the previous kernel
  kTraceFirstDataNs,      // ... when the first slot's bytes have landed
  kTraceLastStepNs,       // ... when the last step's MMAs are done (before its finish)
  kTraceExitNs,           // ... as they leave
  kTraceFinishNs,         // time spent finishing tiles (partials, reduction, output), summed
  kTraceProducerEntryNs,  // %globaltimer as the producer warp starts
  kTraceSteps,            // steps in the CTA's range
  kTraceArriveNs,         // ... of the finish: storing split tiles' partials and arriving, summed
  kTraceReduceNs,         // ... adding the other contributors' partials where it arrived last
  kTraceOutputNs,         // ... scaling and storing output tiles
  kTraceWholeTiles,       // tiles whose steps the CTA covered whole
  kTraceLastArrivals,     // split tiles it finished, arriving last
  kSkinnyTraceSlots
};
void SetSkinnyTrace(int64_t* device_buffer);
int64_t* CurrentSkinnyTrace();

// True on a device that runs the sm_90a kernels (compute capability 9.0).
bool SkinnyGemmDeviceOk(int device);

// Opts every kernel into the shared memory it needs; once per process before the first
// SkinnyGemm (never while a stream is being captured).
cudaError_t SkinnyGemmInit();

// 1 <= m <= 128; k a positive multiple of 16, n a positive multiple of 8; x, w 16-byte aligned.
bool SkinnyGemmSupported(int m, int64_t k, int64_t n, const void* x, const void* w);

// Bytes of workspace for any m <= max_m on `sm_count` SMs: per-tile arrival counters and
// split partial sums. Allocate once and zero once (cudaMemset); every call leaves the
// counters zero again, so calls can be graph-captured. Calls sharing a workspace must be
// ordered on one stream.
size_t SkinnyGemmWorkspaceBytes(int max_m, int sm_count);

// bf16 weights. out is bf16 (out_f32 false) or fp32.
cudaError_t SkinnyGemm(const bf16* x, const bf16* w, int m, int64_t k, int64_t n, void* out, bool out_f32,
                       void* workspace, int sm_count, SkinnyPipeline pipeline, cudaStream_t stream,
                       const CudaLaunchOptions& launch = CudaLaunchOptions());

// fp8 weights: codes (n, k) E4M3, out[r, c] = bf16(scales[c] * sum_k x[r, k] * code[c, k]).
cudaError_t SkinnyGemmFp8(const bf16* x, const uint8_t* codes, const float* scales, int m, int64_t k, int64_t n,
                          bf16* out, void* workspace, int sm_count, SkinnyPipeline pipeline, cudaStream_t stream,
                          const CudaLaunchOptions& launch = CudaLaunchOptions());

// fp8 weights and fp8 activations (W8A8): x8 (m, k) E4M3 codes with one scale per token
// (fp8_activations.h), codes as SkinnyGemmFp8; out[r, c] = bf16(x_scales[r] * scales[c] *
// sum_k x8[r, k] * code[c, k]), read by the fp8 wgmma with no conversion.
cudaError_t SkinnyGemmW8A8(const uint8_t* x8, const float* x_scales, const uint8_t* codes, const float* scales, int m,
                           int64_t k, int64_t n, bf16* out, void* workspace, int sm_count, SkinnyPipeline pipeline,
                           cudaStream_t stream, const CudaLaunchOptions& launch = CudaLaunchOptions());

// Grouped: `num_problems` products in one launch (a mixture-of-experts layer's experts over
// the rows routed to each). problems (device, num_problems int4) = {expert, first row, rows,
// 0}: out's rows [first, first + rows) = x's same rows times that expert's (n, k) matrix^T,
// the experts' matrices stacked in w (and, fp8 codes, their scales: n per expert). 1 <= rows
// <= max_rows <= 128 (max_rows picks the token tile and sizes the workspace as max_m does);
// num_problems at most SkinnyGroupedMaxProblems(n). The cp.async pipelines only: kTma runs as
// kOverlapped. Problems are read before the wait on the previous kernel (PDL): they must be on
// the device before it was launched.
cudaError_t SkinnyGemmGrouped(const bf16* x, const bf16* w, const int4* problems, int num_problems, int max_rows,
                              int64_t k, int64_t n, bf16* out, void* workspace, int sm_count, SkinnyPipeline pipeline,
                              cudaStream_t stream, const CudaLaunchOptions& launch = CudaLaunchOptions());
cudaError_t SkinnyGemmGroupedFp8(const bf16* x, const uint8_t* codes, const float* scales, const int4* problems,
                                 int num_problems, int max_rows, int64_t k, int64_t n, bf16* out, void* workspace,
                                 int sm_count, SkinnyPipeline pipeline, cudaStream_t stream,
                                 const CudaLaunchOptions& launch = CudaLaunchOptions());
// The most problems of n columns one grouped launch takes (one tile counter per 128 columns
// of each problem); 0 where n is out of range.
int SkinnyGroupedMaxProblems(int64_t n);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_SKINNY_GEMM_H_
