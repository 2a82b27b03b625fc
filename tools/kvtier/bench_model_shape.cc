// ModelShape (bench_model_shape.h).
#include "bench_model_shape.h"

#include <algorithm>
#include <cmath>

namespace kvtier::cli::bench {
namespace {

double Num(const nlohmann::json& j, const char* key, double otherwise) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : otherwise;
}

}  // namespace

ModelShape ModelShape::FromInfo(const nlohmann::json& info) {
  ModelShape s;
  if (!info.is_object() || !info.contains("num_layers")) return s;
  const double layers = Num(info, "num_layers", 0), hidden = Num(info, "hidden_size", 0);
  const double heads = Num(info, "num_heads", 0), kv_heads = Num(info, "num_kv_heads", 0);
  const double head_dim = Num(info, "head_dim", 0), intermediate = Num(info, "intermediate_size", 0);
  const double q_dim = heads * head_dim, kv_dim = kv_heads * head_dim;
  const double attention = hidden * (q_dim + 2 * kv_dim) + q_dim * hidden;  // qkv and o
  s.architecture = info.value("architecture", s.architecture);
  s.parameters = Num(info, "num_parameters", s.parameters);
  s.kv_bytes_per_token = Num(info, "kv_bytes_per_token_bf16", s.kv_bytes_per_token);
  s.fp8_kv_bytes_per_token = layers * 2 * kv_heads * (head_dim + 4);
  s.query_width = layers * q_dim;
  s.active_parameters = s.parameters;
  double moe_layers = 0;
  if (auto e = info.find("experts"); e != info.end() && e->is_object()) {
    s.experts = static_cast<int64_t>(Num(*e, "count", 0));
    s.experts_per_token = static_cast<int64_t>(Num(*e, "per_token", 0));
    moe_layers = e->contains("layers") && (*e)["layers"].is_array() ? static_cast<double>((*e)["layers"].size()) : 0;
    s.expert_parameters = moe_layers * s.experts * 3 * hidden * Num(*e, "intermediate_size", 0);
    s.active_parameters = Num(*e, "active_parameters", s.active_parameters);
  }
  // Dense layers' gate, up and down; an MoE layer's experts instead (its router stays 16-bit).
  s.projection_parameters = layers * attention + (layers - moe_layers) * 3 * hidden * intermediate + s.expert_parameters;
  return s;
}

double ModelShape::ExpertFractionRead(int64_t rows) const {
  if (!IsMoe()) return 1.0;
  const double unchosen = 1.0 - static_cast<double>(experts_per_token) / static_cast<double>(experts);
  return 1.0 - std::pow(unchosen, static_cast<double>(rows));
}

double ModelShape::WeightBytesPerStep(int64_t rows, bool fp8_weights) const {
  const double experts_unread = expert_parameters * (1.0 - ExpertFractionRead(rows));
  const double read = parameters - experts_unread;
  const double projections_read = projection_parameters - experts_unread;
  return 2 * read - (fp8_weights ? projections_read : 0);
}

bool ModelShape::IsTargetsModel() const { return !IsMoe() && std::abs(parameters - 8.03e9) < 0.01 * 8.03e9; }

double ModelShape::FlopsPerToken() const { return 2 * active_parameters; }

double ModelShape::PrefillTokS(int64_t step_tokens, bool fp8_weights, double projection_flops, double hbm_Bps) const {
  const double tokens = static_cast<double>(step_tokens);
  const double compute_s = tokens * FlopsPerToken() / projection_flops;
  const double weights_s = WeightBytesPerStep(step_tokens, fp8_weights) / hbm_Bps;
  return tokens / std::max(compute_s, weights_s);
}

}  // namespace kvtier::cli::bench
