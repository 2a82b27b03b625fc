// Products of many activation rows with a large BF16 matrix through oneDNN's bf16 matmul
// (Debian's libdnnl), where it is faster than the vdpbf16ps kernel (dot16_bf16pairs.h):
// prefill-sized row counts on matrices too large for the kernel's weight groups to stay in
// cache (docs/CPU_BACKEND.md; the measurement is bench/results/2026-12-05-cpu-onednn-bf16).
//
// The backend's thread pool keeps the threads: each worker runs single-threaded matmuls on
// slices of output columns (weight rows) of a fixed width, so that results do not depend
// on the thread count. This oneDNN is built on OpenMP, whose
// thread count is a per-thread setting, so each call sets it to one for its own duration
// and restores it: oneDNN then runs inline on the calling thread and starts no team.
//
// The weights are read where the CPU backend keeps them, row-major bf16: oneDNN takes them
// as a (cols x rows) matrix in column order, so no second, reordered copy exists. The
// number of activation rows is a run-time dimension, so one primitive per slice shape
// serves every row count (a small cache, keyed by slice width, depth and output stride:
// two entries per matrix shape).
//
// Numerics: the same as dot16_bf16pairs.h (activations rounded to nearest-even bf16, bf16
// products exact in fp32, fp32 accumulation), within its stated bound; oneDNN's order of
// additions is its own, so outputs are not the vdpbf16ps kernel's bits.
//
// Thread-safe: the primitive cache is locked, each execution has its own scratchpad.
#ifndef KVTIER_BACKEND_CPU_ONEDNN_BF16_H_
#define KVTIER_BACKEND_CPU_ONEDNN_BF16_H_

#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_matrix.h"

namespace kvtier {

class ThreadPool;

// Activation rows from which a product goes to oneDNN, and the size (rows x cols of the
// weights) from which a matrix does: below either, the vdpbf16ps kernel is as fast or faster.
inline constexpr int64_t kOnednnBf16MinRows = 128;
inline constexpr int64_t kOnednnBf16MinValues = int64_t{2048} * 2048;

// True when this build has oneDNN and the processor runs its bf16 matmul natively (AVX-512 BF16).
bool OnednnBf16Available();

// True when MatMul computes w with `rows` activation rows through OnednnBf16MatMul: BF16
// weights on the inexact (bf16-rounding) kernel set, at least kOnednnBf16MinRows rows and
// kOnednnBf16MinValues values, and OnednnBf16Available(). Never for the exact kernels.
bool UsesOnednnBf16(const CpuMatrix& w, int64_t rows);

// As MatMul (cpu_matrix.h) for a matrix with UsesOnednnBf16(w, rows). activations: scratch
// for the rows rounded to bf16 (grown as needed). False when oneDNN failed to create or run
// a primitive (the caller then computes all of out with its own kernel).
bool OnednnBf16MatMul(const CpuMatrix& w, const float* x, const float* bias, int64_t rows, float* out,
                      ThreadPool* pool, std::vector<uint8_t>* activations);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_ONEDNN_BF16_H_
