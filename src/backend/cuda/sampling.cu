// Token sampling on the device (semantics: SampleRow in backend/row_sampling.h), so a
// sampled decode step copies back one id per row instead of vocab_size floats.
//
// SampleRow sorts the vocabulary; here no row is sorted. Each token gets a 64-bit key that
// orders tokens exactly as SampleRow's sort does (logit descending, then id ascending):
// the logit's bits made order-preserving, above the bitwise complement of the id. Every
// question SampleRow answers by walking the sorted candidates is then "which key is the
// first, in descending key order, where a running count or mass reaches a target":
//   top-k:  the k-th largest key (count k);
//   top-p:  the key where the cumulative probability first reaches top_p * mass;
//   draw:   the key where it first exceeds u * (kept mass).
// (With top_k <= 1024, only the first select runs: the kept keys are then sorted in shared
// memory and the cut and the draw walk them, as SampleRow does.)
// A radix select answers each in 8 passes over the row, 8 key bits per pass: a histogram
// (count and probability mass) of the next byte among keys that match the bytes chosen so
// far, then the byte where the running total crosses the target. One CTA per row; the row
// (0.5 MB for a 128k vocabulary) stays in L2 across the passes.
//
// Probabilities are exp((logit - max) / T) in float, their sums in double (SampleRow: all
// double), and the sums run in a different order, so a target that falls within rounding
// of a boundary may pick the neighbouring token; tests check the pick against SampleRow's
// interval with that tolerance.
#include <cfloat>
#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.h"
#include "backend/cuda/row_select.cuh"

namespace kvtier::cuda {
namespace {

using namespace row_select;  // NOLINT: this file is row_select's first user

// Inclusive prefix sum over the block (one value per thread, kThreads of them).
__device__ double BlockInclusiveScan(double v, SelectState& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const double o = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += o;
  }
  if (lane == 31) s.sum[warp] = v;
  __syncthreads();
  double before = 0;
  for (int w = 0; w < warp; ++w) before += s.sum[w];
  __syncthreads();
  return before + v;
}

// top_k <= kCompactMax: gathers the keys >= floor (exactly top_k of them), sorts them
// (bitonic, descending = SampleRow's order), then does SampleRow's softmax, top-p cut and
// draw on them in double. Returns the picked token.
__device__ int SampleCompact(const RowView& row, uint64_t floor, int top_k, float temperature,
                             float top_p, float min_p, double u, SelectState& s) {
  if (threadIdx.x == 0) s.num_kept = 0;
  s.kept[threadIdx.x] = 0;  // padding sorts last
  __syncthreads();
  for (int i = threadIdx.x; i < row.vocab; i += kThreads) {
    const uint64_t key = OrderKey(row.logits[i], i);
    if (key >= floor) {
      const int at = atomicAdd(&s.num_kept, 1);
      if (at < kCompactMax) s.kept[at] = key;
    }
  }
  __syncthreads();
  const int n = min(s.num_kept, min(top_k, kCompactMax));
  for (int size = 2; size <= kCompactMax; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const int i = threadIdx.x, j = i ^ stride;
      if (j > i) {
        const bool descending = (i & size) == 0;
        const uint64_t a = s.kept[i], b = s.kept[j];
        if (descending ? a < b : a > b) {
          s.kept[i] = b;
          s.kept[j] = a;
        }
      }
      __syncthreads();
    }
  }
  const int i = threadIdx.x;
  const double max_logit = LogitOf(s.kept[0]);
  const double p =
      i < n ? exp((static_cast<double>(LogitOf(s.kept[i])) - max_logit) / static_cast<double>(temperature))
            : 0.0;
  const double cum = BlockInclusiveScan(p, s);
  s.cum[i] = cum;
  if (i == 0) {
    s.cut = n;
    s.pick = -1;
  }
  __syncthreads();
  const double total = s.cum[n - 1];
  if (top_p < 1.0f && i < n && cum / total >= top_p && (i == 0 || s.cum[i - 1] / total < top_p)) {
    s.cut = i + 1;
  }
  __syncthreads();
  int cut = s.cut;
  if (min_p > 0.0f) {
    // Of the cut, those with probability >= min_p (the first's is 1): a prefix, as the
    // probabilities fall along the sorted keys.
    cut = max(1, __syncthreads_count(i < cut && p >= static_cast<double>(min_p)));
  }
  const double target = u * s.cum[cut - 1];
  if (i < cut && cum > target && (i == 0 || s.cum[i - 1] <= target)) s.pick = i;
  __syncthreads();
  const int pick = s.pick >= 0 ? s.pick : cut - 1;  // rounding: SampleRow's last candidate
  return IdOf(s.kept[pick]);
}

__global__ void __launch_bounds__(kThreads)
    SampleRowsKernel(const float* logits, int vocab, const SampleParams* params, int32_t* ids) {
  __shared__ SelectState s;
  PdlWait();
  PdlLaunchDependents();
  const SampleParams p = params[blockIdx.x];
  RowView row;
  row.logits = logits + static_cast<int64_t>(p.logits_row >= 0 ? p.logits_row : blockIdx.x) * vocab;
  row.vocab = vocab;
  uint64_t best = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t key = OrderKey(row.logits[i], i);
    best = key > best ? key : best;
  }
  best = BlockMaxKey(best, s);
  if (p.temperature == 0.0f || p.top_k == 1) {
    if (threadIdx.x == 0) ids[blockIdx.x] = IdOf(best);
    return;
  }
  row.max_logit = LogitOf(best);
  row.inv_t = static_cast<float>(1.0 / static_cast<double>(p.temperature));
  uint64_t floor = 0;
  if (p.top_k > 0 && p.top_k < vocab) floor = Select<false>(row, 0, p.top_k, false, s);
  if (p.top_k > 0 && p.top_k <= kCompactMax) {
    const int token = SampleCompact(row, floor, p.top_k, p.temperature, p.top_p, p.min_p, p.u, s);
    if (threadIdx.x == 0) ids[blockIdx.x] = token;
    return;
  }
  double total = KeptMass(row, floor, s);
  if (p.top_p < 1.0f) {
    const uint64_t cut = Select<true>(row, floor, static_cast<double>(p.top_p) * total, false, s);
    floor = cut > floor ? cut : floor;
    total = KeptMass(row, floor, s);
  }
  if (p.min_p > 0.0f) {
    // The smallest kept key whose probability, computed as SampleRow does (double), is >=
    // min_p: the kept keys above it form the prefix min-p keeps.
    const double max_logit = row.max_logit;
    const double inv_t = 1.0 / static_cast<double>(p.temperature);
    uint64_t lowest = ~uint64_t{0};
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float l = row.logits[i];
      const uint64_t key = OrderKey(l, i);
      if (key >= floor && key < lowest &&
          exp((static_cast<double>(l) - max_logit) * inv_t) >= static_cast<double>(p.min_p)) {
        lowest = key;
      }
    }
    lowest = ~BlockMaxKey(~lowest, s);
    if (lowest != ~uint64_t{0} && lowest > floor) {
      floor = lowest;
      total = KeptMass(row, floor, s);
    }
  }
  const uint64_t pick = Select<true>(row, floor, p.u * total, true, s);
  if (threadIdx.x == 0) ids[blockIdx.x] = IdOf(pick);
}

}  // namespace

cudaError_t SampleRows(const float* logits, int rows, int vocab, const SampleParams* params,
                       int32_t* ids, cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (rows == 0) return cudaSuccess;
  if (vocab <= 0 || logits == nullptr || params == nullptr || ids == nullptr) {
    return cudaErrorInvalidValue;
  }
  const cudaError_t err =
      LaunchPdl(launch, SampleRowsKernel, dim3(rows), dim3(kThreads), 0, stream, logits, vocab,
                params, ids);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace kvtier::cuda
