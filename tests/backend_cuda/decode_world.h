// DecodeWorld: the decode-attention setup the DecodeAttention test and its timings share:
// decode rows over shuffled paged block tables (host), and DeviceDecode, its device copy
// with the kernel's parameters. No gtest; not thread-safe.
#ifndef KVTIER_TESTS_BACKEND_CUDA_DECODE_WORLD_H_
#define KVTIER_TESTS_BACKEND_CUDA_DECODE_WORLD_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "backend/cuda/decode_attention.h"
#include "backend/cuda/kernels.h"
#include "backend/kv_layout.h"
#include "cuda_test_data.h"

namespace kvtier::cuda_test {

// Decode rows, row i in chunk i with a shuffled block table of `capacity` positions (at
// least its context), plus `extra` step tokens that are not decode rows, at shuffled step
// token indices.
struct DecodeWorld {
  KvLayout layout;
  int num_heads = 0;
  std::vector<int> contexts;
  std::vector<int32_t> rows, token_chunk, token_pos, indptr, indices;
  int64_t num_blocks = 0;
  int num_tokens = 0;

  DecodeWorld(int heads, int kv_heads, int head_dim, int block_tokens, int num_layers,
              std::vector<int> ctx, int extra, int capacity, std::mt19937& rng)
      : num_heads(heads), contexts(std::move(ctx)) {
    layout.num_layers = num_layers;
    layout.num_kv_heads = kv_heads;
    layout.head_dim = head_dim;
    layout.block_tokens = block_tokens;
    layout.dtype = DType::kBF16;
    const int n = static_cast<int>(contexts.size());
    indptr.push_back(0);
    for (int i = 0; i < n; ++i) {
      indptr.push_back(indptr.back() + TableSize(std::max(capacity, contexts[i])));
    }
    num_blocks = indptr.back() + 3;
    num_tokens = n + extra;
    std::vector<int32_t> perm(num_tokens);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    rows.assign(perm.begin(), perm.begin() + n);
    token_chunk.assign(num_tokens, 0);
    token_pos.assign(num_tokens, 0);
    Reassign(contexts, rng);
  }

  int TableSize(int positions) const {
    return static_cast<int>((positions + layout.block_tokens - 1) / layout.block_tokens);
  }
  // New contexts (within capacity) and freshly shuffled block ids.
  void Reassign(const std::vector<int>& ctx, std::mt19937& rng) {
    contexts = ctx;
    std::vector<int32_t> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    indices.assign(ids.begin(), ids.begin() + indptr.back());
    for (size_t i = 0; i < rows.size(); ++i) {
      token_chunk[rows[i]] = static_cast<int32_t>(i);
      token_pos[rows[i]] = contexts[i] - 1;
    }
  }
  bool IsRow(int token) const { return std::find(rows.begin(), rows.end(), token) != rows.end(); }
};

// Device copies of a world's metadata, pool, q, out and split buffers.
struct DeviceDecode {
  DeviceArray<uint16_t> pool, q, out;
  DeviceArray<int32_t> rows, chunk, pos, indptr, indices;
  DeviceArray<float> partial_out, partial_ml;
  DeviceArray<uint32_t> counters;

  DeviceDecode(const DecodeWorld& w, int max_splits)
      : pool(w.num_blocks * w.layout.ElementsPerBlock()),
        q(static_cast<size_t>(w.num_tokens) * w.num_heads * w.layout.head_dim),
        out(q.size()),
        rows(w.rows.size()),
        chunk(w.num_tokens),
        pos(w.num_tokens),
        indptr(w.indptr.size()),
        indices(w.indices.size()),
        partial_out(cuda::DecodePartialFloats(static_cast<int32_t>(w.rows.size()), max_splits,
                                              w.num_heads,
                                              static_cast<int32_t>(w.layout.head_dim))),
        partial_ml(cuda::DecodePartialMlFloats(static_cast<int32_t>(w.rows.size()), max_splits,
                                               w.num_heads)),
        counters(cuda::DecodeCounterInts(static_cast<int32_t>(w.rows.size()),
                                         static_cast<int32_t>(w.layout.num_kv_heads))) {
    cudaMemset(counters.get(), 0, counters.size() * sizeof(uint32_t));  // once, at allocation
    rows.Upload(w.rows);
    indptr.Upload(w.indptr);
    UploadStep(w);
  }
  void UploadStep(const DecodeWorld& w) {
    chunk.Upload(w.token_chunk);
    pos.Upload(w.token_pos);
    indices.Upload(w.indices);
  }
  template <typename T>
  cuda::PagedKv<T> Kv(const DecodeWorld& w) const {
    return PagedKvOf(w.layout, reinterpret_cast<T*>(pool.get()), indices.get(), indptr.get());
  }
  template <typename T>
  cuda::DecodeAttentionParams<T> Params(const DecodeWorld& w, int layer, int max_splits) const {
    cuda::DecodeAttentionParams<T> p;
    p.q = reinterpret_cast<const T*>(q.get());
    p.out = reinterpret_cast<T*>(out.get());
    p.rows = rows.get();
    p.num_rows = static_cast<int32_t>(w.rows.size());
    p.num_heads = w.num_heads;
    p.layer = layer;
    p.max_splits = max_splits;
    p.partial_out = partial_out.get();
    p.partial_ml = partial_ml.get();
    p.split_counters = counters.get();
    return p;
  }
  cuda::StepTokens Tokens(const DecodeWorld& w) const {
    return cuda::StepTokens{chunk.get(), pos.get(), w.num_tokens};
  }
};

// SM count of device 0 (132, an H200's, when it cannot be read).
inline int SmCount() {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, 0) != cudaSuccess) return 132;
  return props.multiProcessorCount;
}

// The wave of resident decode-attention CTAs the backend plans splits for (KernelSelection::
// decode_wave_ctas) on this device, for bf16 compute.
inline int DecodeWave(int head_dim, bool fp8_kv, int block_tokens, int fp8_pair_tiles = -1) {
  return SmCount() * cuda::DecodeResidentCtasPerSm<cuda::bf16>(head_dim, fp8_kv, block_tokens, fp8_pair_tiles);
}

}  // namespace kvtier::cuda_test

#endif  // KVTIER_TESTS_BACKEND_CUDA_DECODE_WORLD_H_
