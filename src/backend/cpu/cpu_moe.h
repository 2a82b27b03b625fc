// The mixture-of-experts MLP of the CPU backend (Mixtral, Qwen3-MoE): the router, top-k
// routing as transformers defines it, and the experts run grouped: the rows routed to each
// expert gathered, that expert's three products run on them, the results added back
// weighted. An expert no row chose is not read, so a decode step reads only the chosen
// experts' weights. Functions are thread-compatible (the scratch is the caller's).
#ifndef KVTIER_BACKEND_CPU_CPU_MOE_H_
#define KVTIER_BACKEND_CPU_CPU_MOE_H_

#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_matrix.h"
#include "model/config.h"

namespace kvtier {

class ThreadPool;

// One expert: SwiGLU, down(silu(gate x) * up x). HF layout as CpuMatrix.
struct CpuExpert {
  CpuMatrix gate;  // (expert_intermediate, hidden): Mixtral's w1
  CpuMatrix up;    // (expert_intermediate, hidden): Mixtral's w3
  CpuMatrix down;  // (hidden, expert_intermediate): Mixtral's w2
};

struct CpuMoeWeights {
  CpuMatrix router;  // (num_experts, hidden), fp32
  std::vector<CpuExpert> experts;

  bool empty() const { return experts.empty(); }
  int64_t Bytes() const;
};

// Top-k routing of `rows` tokens from their router logits (rows, num_experts): the softmax
// over all experts in fp32, the top_k largest probabilities (equal ones to the lower expert
// index), renormalized to sum 1 when `renormalize`. experts and weights: (rows, top_k),
// each row in descending probability. top_k in [1, num_experts].
void RouteTopK(const float* logits, int64_t rows, int64_t num_experts, int64_t top_k, bool renormalize,
               int32_t* experts, float* weights);

// The buffers of one MoE MLP, grown to the largest batch seen (never shrunk).
struct CpuMoeScratch {
  std::vector<float> logits;     // (tokens, num_experts)
  std::vector<int32_t> chosen;   // (tokens, top_k)
  std::vector<float> weights;    // (tokens, top_k)
  std::vector<int64_t> offsets;  // (num_experts + 1): expert e's routes at order[offsets[e] ..)
  std::vector<int64_t> order;    // (tokens * top_k): route indices (token * top_k + j) by expert
  std::vector<float> gathered;   // (tokens, hidden): the rows of one expert
  std::vector<float> gate;       // (tokens, expert_intermediate)
  std::vector<float> up;         // (tokens, expert_intermediate)
  std::vector<float> expert_out; // (tokens, hidden)
  std::vector<float> out;        // (tokens, hidden): the MLP's output

  void Reserve(const ModelConfig& config, int64_t tokens);
  int64_t Bytes() const;
};

// out (scratch->out, returned) = sum over each row's top_k experts of weight * expert(x[row]),
// added in ascending expert order (as transformers' index_add_ does). x: (rows, hidden).
const float* MoeMlp(const CpuMoeWeights& w, const MoeConfig& moe, const float* x, int64_t rows, int64_t hidden,
                    ThreadPool* pool, CpuMoeScratch* scratch, std::vector<uint8_t>* activations);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_CPU_MOE_H_
