// Row selection on the device, shared by the sampler (sampling.cu) and the
// log-probability kernels (sampler_chain.cu): every token of a logits row gets a 64-bit key
// that orders tokens as the host reference sorts them (logit descending, then id
// ascending), and a radix select finds the key where a running count or probability mass,
// taken in descending key order, reaches a target (sampling.cu's opening comment says how).
// One CTA of kThreads per row; device code only.
#ifndef KVTIER_BACKEND_CUDA_ROW_SELECT_CUH_
#define KVTIER_BACKEND_CUDA_ROW_SELECT_CUH_

#include <cfloat>
#include <cstdint>

namespace kvtier::cuda::row_select {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr int kHistograms = 8;  // warps w and w + 8k share one: less atomic contention
// top_k up to this many: the kept candidates are sorted in shared memory and the cut and
// the draw walk them in order (SampleRow's own arithmetic), instead of two more selects
// over the whole row, which make a sampled decode step noticeably slower than a greedy one
// (kvtier_cuda_bench times sampled against greedy steps).
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

__device__ inline uint64_t BlockMaxKey(uint64_t v, SelectState& s) {
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

__device__ inline double BlockSum(double v, SelectState& s) {
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
__device__ inline double KeptMass(const RowView& row, uint64_t floor, SelectState& s) {
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
__device__ inline uint64_t Select(const RowView& row, uint64_t floor, double target, bool strict,
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

}  // namespace kvtier::cuda::row_select

#endif  // KVTIER_BACKEND_CUDA_ROW_SELECT_CUH_
