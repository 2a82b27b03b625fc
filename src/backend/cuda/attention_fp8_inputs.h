// Fp8 inputs and output of a library's fp8 attention (cudnn_graph.h
// BuildCausalAttentionGraphFp8), which takes Q, K and V as E4M3 codes with one scale per tensor
// and writes O as E4M3 codes: QuantizeQueriesFp8 turns a chunk's bf16 query rows into codes
// at one scale (its amax over 448); KvGatherFp8 gathers one
// sequence's fp8 K and V of one layer from the paged pool (kv_fp8.cuh: codes with one scale
// per row) into contiguous codes at one scale per side, the largest row scale of the positions
// gathered, each value rounded once more to E4M3 (value * row scale / that scale). Each runs
// two kernels in stream order, a maximum into Fp8AttentionFactors then the codes, and leaves
// the descale (the value a code of 1 stands for) in the factors the graph reads; no host
// synchronization. KvGatherFp8 also sets O's scale from V's: O is a weighted mean of V rows,
// so |O| <= max |V| = 448 descale_v, and scale_o = 1 / (2 descale_v) keeps O's codes within
// 224 (headroom for probabilities rounded up in E4M3); DequantizeOutputFp8 turns them back
// into bf16. Stateless launchers; one factors block per chunk in flight.
#ifndef KVTIER_BACKEND_CUDA_ATTENTION_FP8_INPUTS_H_
#define KVTIER_BACKEND_CUDA_ATTENTION_FP8_INPUTS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_gather.h"

namespace kvtier::cuda {

// What the fp8 graph reads and writes (fp32, device memory), in the order of its uids
// kUidDescaleQ .. kUidAmaxO, then the launchers' maxima.
struct Fp8AttentionFactors {
  float descale_q, descale_k, descale_v;
  float descale_s, scale_s;  // the probabilities' E4M3 scale (InitFp8AttentionFactors)
  float scale_o;             // O's codes = O * scale_o (KvGatherFp8: 1 / (2 descale_v))
  float amax_s, amax_o;      // written by the graph, not read
  float amax_q, amax_k, amax_v;
  float descale_o;  // what an O code of 1 stands for: 2 descale_v
};

// The constant factors (descale_s 1/448, scale_s 448, scale_o and descale_o 1), and the rest
// zero.
cudaError_t InitFp8AttentionFactors(Fp8AttentionFactors* factors, cudaStream_t stream);

// codes[i] = E4M3(q[i] * 448 / amax(q)) for i < elements (a multiple of 8, q and codes
// 16-byte aligned); factors->descale_q = amax / 448 (1 for all zeros).
cudaError_t QuantizeQueriesFp8(const bf16* q, int64_t elements, uint8_t* codes, Fp8AttentionFactors* factors,
                               cudaStream_t stream);

using KvGatherFp8Params = KvGatherInto<uint8_t>;  // k_out, v_out: E4M3 codes

// kv must be an fp8 pool (kv.fp8), head_dim 64 or 128; else, or with padded_positions <
// num_positions or a null output, cudaErrorInvalidValue. factors->descale_k and descale_v:
// the largest row scale of K and of V over the positions (1 where all are zero); scale_o
// 0.5 / descale_v and descale_o 2 descale_v.
cudaError_t KvGatherFp8(const KvGatherFp8Params& params, const PagedKv<bf16>& kv, Fp8AttentionFactors* factors,
                        cudaStream_t stream);

// out[i] = bf16(decode(codes[i]) * factors->descale_o) for i < elements (a multiple of 8;
// codes 8-byte and out 16-byte aligned): the graph's fp8 O as the rows the o-projection reads.
cudaError_t DequantizeOutputFp8(const uint8_t* codes, int64_t elements, const Fp8AttentionFactors* factors, bf16* out,
                                cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_ATTENTION_FP8_INPUTS_H_
