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

namespace kvtier::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr int kHistograms = 8;  // warps w and w + 8k share one: less atomic contention
// top_k up to this many: the kept candidates are sorted in shared memory and the cut and
// the draw walk them in order (SampleRow's own arithmetic), instead of two more selects
// over the whole row, which made a sampled decode step measurably slower than a greedy one
// (bench/results/2026-11-29-h200-gpu-sampling-backend.txt against -compact-backend.txt).
constexpr int kCompactMax = kThreads;

struct SelectState {
  unsigned int count[kHistograms][kBins];
  double mass[kHistograms][kBins];
  uint64_t prefix;     // key bits chosen so far
  double remaining;    // target left within the chosen prefix (count or mass)
  bool take_last;      // rounding left the target unreached: follow the smallest keys
  uint64_t key_max[kWarps];
  double sum[kWarps];
  // The compact path (top_k <= kCompactMax).
  int num_kept;
  int cut;
  int pick;
  uint64_t kept[kCompactMax];
  double cum[kCompactMax];
};

// NaN logits get the smallest keys: they never win (as in SampleRow's greedy scan).
__device__ __forceinline__ uint64_t OrderKey(float logit, int id) {
  uint32_t b = __float_as_uint(logit);
  b = isnan(logit) ? 0u : (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(b) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}

__device__ __forceinline__ int IdOf(uint64_t key) {
  return static_cast<int>(~static_cast<uint32_t>(key));
}

__device__ __forceinline__ float LogitOf(uint64_t key) {
  const uint32_t b = static_cast<uint32_t>(key >> 32);
  return __uint_as_float((b & 0x80000000u) != 0 ? (b & 0x7fffffffu) : ~b);
}

__device__ uint64_t BlockMaxKey(uint64_t v, SelectState& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const uint64_t o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = o > v ? o : v;
  }
  if (lane == 0) s.key_max[warp] = v;
  __syncthreads();
  uint64_t best = 0;
  for (int w = 0; w < kWarps; ++w) best = s.key_max[w] > best ? s.key_max[w] : best;
  __syncthreads();
  return best;
}

__device__ double BlockSum(double v, SelectState& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (lane == 0) s.sum[warp] = v;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < kWarps; ++w) total += s.sum[w];
  __syncthreads();
  return total;
}

struct RowView {
  const float* logits;
  int vocab;
  float max_logit;
  float inv_t;
  __device__ float Prob(float logit) const { return __expf((logit - max_logit) * inv_t); }
};

// Mass of the keys >= floor.
__device__ double KeptMass(const RowView& row, uint64_t floor, SelectState& s) {
  double mass = 0;
  for (int i = threadIdx.x; i < row.vocab; i += kThreads) {
    const float l = row.logits[i];
    if (OrderKey(l, i) >= floor) mass += row.Prob(l);
  }
  return BlockSum(mass, s);
}

// The key, among keys >= floor, at which the running count (kWeighted false) or mass
// (true), taken in descending key order, first reaches `target` (strict: exceeds it).
template <bool kWeighted>
__device__ uint64_t Select(const RowView& row, uint64_t floor, double target, bool strict,
                           SelectState& s) {
  if (threadIdx.x == 0) {
    s.prefix = 0;
    s.remaining = target;
    s.take_last = false;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hist = warp % kHistograms;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < kHistograms * kBins; i += kThreads) {
      (&s.count[0][0])[i] = 0;
      (&s.mass[0][0])[i] = 0.0;
    }
    __syncthreads();
    const uint64_t prefix = s.prefix;
    const uint64_t high = shift == 56 ? 0 : ~uint64_t{0} << (shift + 8);
    for (int i = threadIdx.x; i < row.vocab; i += kThreads) {
      const float l = row.logits[i];
      const uint64_t key = OrderKey(l, i);
      if (key < floor || (key & high) != (prefix & high)) continue;
      const int digit = static_cast<int>((key >> shift) & 0xff);
      atomicAdd(&s.count[hist][digit], 1u);
      if (kWeighted) atomicAdd(&s.mass[hist][digit], static_cast<double>(row.Prob(l)));
    }
    __syncthreads();
    if (threadIdx.x < kBins) {
      unsigned int c = 0;
      double m = 0;
      for (int h = 0; h < kHistograms; ++h) {
        c += s.count[h][threadIdx.x];
        m += s.mass[h][threadIdx.x];
      }
      s.count[0][threadIdx.x] = c;
      s.mass[0][threadIdx.x] = m;
    }
    __syncthreads();
    if (warp == 0) {
      // Lane L holds bins 255 - 8L down to 248 - 8L: lanes in order = bins descending.
      constexpr int kPerLane = kBins / 32;
      double value[kPerLane];
      bool nonempty[kPerLane];
      double lane_total = 0;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int bin = kBins - 1 - (lane * kPerLane + j);
        value[j] = kWeighted ? s.mass[0][bin] : static_cast<double>(s.count[0][bin]);
        nonempty[j] = s.count[0][bin] != 0;
        lane_total += value[j];
      }
      double before = lane_total;  // inclusive scan over lanes, then made exclusive
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const double o = __shfl_up_sync(0xffffffffu, before, offset);
        if (lane >= offset) before += o;
      }
      before -= lane_total;
      const double remaining = s.remaining;
      const bool take_last = s.take_last;
      int found = -1;
      double found_before = 0;
      int last = -1;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const bool hit = strict ? before + value[j] > remaining : before + value[j] >= remaining;
        if (found < 0 && nonempty[j] && !take_last && hit) {
          found = j;
          found_before = before;
        }
        if (nonempty[j]) last = j;
        before += value[j];
      }
      const unsigned hit_lanes = __ballot_sync(0xffffffffu, found >= 0);
      const unsigned last_lanes = __ballot_sync(0xffffffffu, last >= 0);
      if (hit_lanes != 0) {
        if (lane == __ffs(hit_lanes) - 1) {
          const int bin = kBins - 1 - (lane * kPerLane + found);
          s.prefix |= static_cast<uint64_t>(bin) << shift;
          s.remaining = remaining - found_before;
        }
      } else if (last_lanes != 0) {
        // Not reached (rounding, or the fallback already taken): SampleRow then returns its
        // last candidate, i.e. the smallest key; follow the smallest nonempty bin.
        if (lane == 31 - __clz(last_lanes)) {
          const int bin = kBins - 1 - (lane * kPerLane + last);
          s.prefix |= static_cast<uint64_t>(bin) << shift;
          s.take_last = true;
        }
      }
    }
    __syncthreads();
  }
  return s.prefix;
}

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
                             float top_p, double u, SelectState& s) {
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
  const int cut = s.cut;
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
  RowView row;
  row.logits = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  row.vocab = vocab;
  const SampleParams p = params[blockIdx.x];
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
    const int token = SampleCompact(row, floor, p.top_k, p.temperature, p.top_p, p.u, s);
    if (threadIdx.x == 0) ids[blockIdx.x] = token;
    return;
  }
  double total = KeptMass(row, floor, s);
  if (p.top_p < 1.0f) {
    const uint64_t cut = Select<true>(row, floor, static_cast<double>(p.top_p) * total, false, s);
    floor = cut > floor ? cut : floor;
    total = KeptMass(row, floor, s);
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
