// ModelShape: what the bench's hardware limits need to know of the checkpoint it runs (its
// parameters, which of them a token's forward multiplies, its KV bytes per token), read from
// kvt_model_info_json so that a limit is the one of the model that ran, not of Llama-3-8B.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_MODEL_SHAPE_H_
#define KVTIER_TOOLS_KVTIER_BENCH_MODEL_SHAPE_H_

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace kvtier::cli::bench {

struct ModelShape {
  // Defaults: Llama-3-8B, the shape `kvtier bench` writes when given no --model.
  double parameters = 8.03e9;                       // every parameter, embeddings included
  double projection_parameters = 32 * 218.1e6;      // the layers' linear weights (all experts)
  double expert_parameters = 0;                     // of those, the experts' (every MoE layer)
  int64_t experts = 0;                              // per MoE layer; 0 for a dense model
  int64_t experts_per_token = 0;                    // top-k
  double active_parameters = 8.03e9;                // those a token's forward multiplies
  double kv_bytes_per_token = 131072;               // 16-bit K and V of every layer
  double fp8_kv_bytes_per_token = 32 * 2 * 8 * (128 + 4);  // e4m3 codes + one fp32 scale per row
  double query_width = 32 * 32 * 128;               // layers x query heads x head_dim: attention's
                                                     // FLOPs per (query, key) pair are 4 x this
  std::string architecture = "llama";

  // Reads kvt_model_info_json's object; fields it lacks keep the defaults.
  static ModelShape FromInfo(const nlohmann::json& info);

  // The expected fraction of one layer's experts a step of `rows` tokens reads, each token
  // routed to experts_per_token of them uniformly (random weights route near-uniformly):
  // 1 - (1 - k/E)^rows. 1 for a dense model.
  double ExpertFractionRead(int64_t rows) const;
  // Bytes of weights a step of `rows` tokens reads: 2 per parameter (the embedding table
  // counted whole, as the W1 limit always has), with fp8 weights 1 per projection parameter,
  // and of the experts only the expected fraction chosen.
  double WeightBytesPerStep(int64_t rows, bool fp8_weights) const;
  // FLOPs of one token's forward through the linear layers: 2 per parameter it multiplies.
  double FlopsPerToken() const;
  // Tokens/s a prompt reaches at best in steps of `step_tokens` tokens: each step's linear
  // layers at `projection_flops` or its weights (WeightBytesPerStep) at `hbm_Bps`, whichever takes
  // longer. A dense model's prefill is bound by its FLOPs; a mixture of experts' step reads
  // every expert its tokens choose, most of them in a prompt of a few hundred tokens, for few
  // FLOPs a token.
  double PrefillTokS(int64_t step_tokens, bool fp8_weights, double projection_flops, double hbm_Bps) const;
  bool IsMoe() const { return experts > 0 && experts_per_token > 0; }
  // Whether this is Llama-3-8B's shape (dense, 8.03 B parameters within 1%), the model
  // docs/WORKLOADS.md's absolute targets (tokens/s, seconds) are set for.
  bool IsTargetsModel() const;
};

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_MODEL_SHAPE_H_
