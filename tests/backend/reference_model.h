// ReferenceModel: a dense, causal, double-precision forward written from transformers'
// modeling code (Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3, Mixtral, Qwen3-MoE: every token
// through its top-k experts one by one), reading a checkpoint's tensors
// directly (not CpuWeights), for the CPU backend's tests. Not thread-safe.
#ifndef KVTIER_TESTS_BACKEND_REFERENCE_MODEL_H_
#define KVTIER_TESTS_BACKEND_REFERENCE_MODEL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/tensor.h"

namespace kvtier {

class ReferenceModel {
 public:
  explicit ReferenceModel(const Checkpoint& checkpoint) : checkpoint_(checkpoint), c_(checkpoint.config()) {}

  // The last token's logits after the whole sequence, positions 0.. (LongRoPE per position,
  // as config.h defines it).
  std::vector<double> LastLogits(const std::vector<int32_t>& tokens) {
    const int64_t n = tokens.size(), hidden = c_.hidden_size;
    std::vector<double> embed = W("model.embed_tokens.weight");
    const double embed_scale = c_.gemma.scale_embeddings ? std::sqrt(double(hidden)) : 1.0;
    Matrix x(n, std::vector<double>(hidden));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < hidden; ++i) x[t][i] = embed[tokens[t] * hidden + i] * embed_scale;
    }
    for (int64_t layer = 0; layer < c_.num_layers; ++layer) {
      const std::string p = absl::StrCat("model.layers.", layer, ".");
      Matrix h = Norm(x, NormWeight(p + "input_layernorm.weight"));
      const bool bias = c_.attention_bias;
      Matrix q, k, v;
      if (c_.fused_projections) {
        const Matrix qkv = Linear(h, p + "self_attn.qkv_proj", false);
        q = Columns(qkv, 0, c_.q_dim());
        k = Columns(qkv, c_.q_dim(), c_.kv_dim());
        v = Columns(qkv, c_.q_dim() + c_.kv_dim(), c_.kv_dim());
      } else {
        q = Linear(h, p + "self_attn.q_proj", bias);
        k = Linear(h, p + "self_attn.k_proj", bias);
        v = Linear(h, p + "self_attn.v_proj", bias);
      }
      if (c_.qk_norm) {
        q = HeadNorm(q, NormWeight(p + "self_attn.q_norm.weight"));
        k = HeadNorm(k, NormWeight(p + "self_attn.k_norm.weight"));
      }
      Rope(layer, q);
      Rope(layer, k);
      Matrix attn = Attention(layer, q, k, v);
      Matrix out = Linear(attn, p + "self_attn.o_proj", bias && c_.architecture != Architecture::kQwen2);
      if (c_.gemma.sandwich_norms) out = Norm(out, NormWeight(p + "post_attention_layernorm.weight"));
      Add(x, out);
      h = Norm(x, NormWeight(p + (c_.gemma.sandwich_norms ? "pre_feedforward_layernorm.weight"
                                                    : "post_attention_layernorm.weight")));
      if (c_.IsMoeLayer(layer)) {
        Add(x, Experts(h, p));
        continue;
      }
      Matrix gate, up;
      if (c_.fused_projections) {
        const Matrix gate_up = Linear(h, p + "mlp.gate_up_proj", false);
        gate = Columns(gate_up, 0, c_.intermediate_size);
        up = Columns(gate_up, c_.intermediate_size, c_.intermediate_size);
      } else {
        gate = Linear(h, p + "mlp.gate_proj", false);
        up = Linear(h, p + "mlp.up_proj", false);
      }
      for (int64_t t = 0; t < n; ++t) {
        for (size_t i = 0; i < gate[t].size(); ++i) gate[t][i] = Activate(gate[t][i]) * up[t][i];
      }
      out = Linear(gate, p + "mlp.down_proj", false);
      if (c_.gemma.sandwich_norms) out = Norm(out, NormWeight(p + "post_feedforward_layernorm.weight"));
      Add(x, out);
    }
    const Matrix last = Norm({x.back()}, NormWeight("model.norm.weight"));
    const std::string head = c_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    std::vector<double> logits = MatVec(W(head), last[0], c_.vocab_size);
    if (c_.final_logit_softcap) {
      for (double& l : logits) l = std::tanh(l / *c_.final_logit_softcap) * *c_.final_logit_softcap;
    }
    return logits;
  }

 private:
  using Matrix = std::vector<std::vector<double>>;

  std::vector<double> W(const std::string& name) {
    absl::StatusOr<TensorView> tensor = checkpoint_.Tensor(name);
    EXPECT_TRUE(tensor.ok()) << tensor.status();
    std::vector<double> out(tensor->num_elements());
    for (int64_t i = 0; i < tensor->num_elements(); ++i) out[i] = tensor->ElementAsFloat(i);
    return out;
  }
  // Gemma's RMSNorm scales by (1 + w).
  std::vector<double> NormWeight(const std::string& name) {
    std::vector<double> w = W(name);
    if (c_.gemma.norm_plus_one) {
      for (double& e : w) e += 1.0;
    }
    return w;
  }
  static std::vector<double> MatVec(const std::vector<double>& w, const std::vector<double>& x, int64_t rows) {
    std::vector<double> y(rows);
    for (int64_t r = 0; r < rows; ++r) {
      for (size_t i = 0; i < x.size(); ++i) y[r] += w[r * x.size() + i] * x[i];
    }
    return y;
  }
  Matrix Linear(const Matrix& x, const std::string& prefix, bool bias) {
    const std::vector<double> w = W(prefix + ".weight");
    const std::vector<double> b = bias ? W(prefix + ".bias") : std::vector<double>();
    const int64_t out_dim = w.size() / x[0].size();
    Matrix y;
    for (const std::vector<double>& row : x) {
      y.push_back(MatVec(w, row, out_dim));
      for (size_t i = 0; i < b.size(); ++i) y.back()[i] += b[i];
    }
    return y;
  }
  static Matrix Columns(const Matrix& x, int64_t first, int64_t count) {
    Matrix y;
    for (const std::vector<double>& row : x) y.emplace_back(row.begin() + first, row.begin() + first + count);
    return y;
  }
  Matrix Norm(const Matrix& x, const std::vector<double>& w) const {
    Matrix y = x;
    for (std::vector<double>& row : y) {
      double ms = 0;
      for (double e : row) ms += e * e;
      const double s = 1 / std::sqrt(ms / row.size() + c_.rms_norm_eps);
      for (size_t i = 0; i < row.size(); ++i) row[i] *= s * w[i];
    }
    return y;
  }
  Matrix HeadNorm(const Matrix& x, const std::vector<double>& w) const {
    Matrix y;
    for (const std::vector<double>& row : x) {
      y.emplace_back();
      for (size_t h0 = 0; h0 < row.size(); h0 += c_.head_dim) {
        const Matrix head = Norm({std::vector<double>(row.begin() + h0, row.begin() + h0 + c_.head_dim)}, w);
        y.back().insert(y.back().end(), head[0].begin(), head[0].end());
      }
    }
    return y;
  }
  double Activate(double g) const {
    if (c_.activation == Activation::kGeluTanh) {
      return 0.5 * g * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (g + 0.044715 * g * g * g)));
    }
    return g / (1 + std::exp(-g));
  }
  Matrix Attention(int64_t layer, const Matrix& q, const Matrix& k, const Matrix& v) const {
    const int64_t n = q.size(), hd = c_.head_dim;
    const int64_t group = c_.num_heads / c_.num_kv_heads;
    const double scale = c_.query_pre_attn_scalar ? 1 / std::sqrt(*c_.query_pre_attn_scalar) : 1 / std::sqrt(double(hd));
    const std::optional<int64_t> window = c_.LayerWindow(layer);
    Matrix attn(n, std::vector<double>(c_.q_dim()));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t first = window ? std::max<int64_t>(0, t - *window + 1) : 0;
      for (int64_t head = 0; head < c_.num_heads; ++head) {
        const int64_t kvh = head / group;
        std::vector<double> w(t + 1);
        double mx = -1e300, sum = 0;
        for (int64_t j = first; j <= t; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += q[t][head * hd + d] * k[j][kvh * hd + d];
          w[j] = dot * scale;
          if (c_.attn_logit_softcap) w[j] = std::tanh(w[j] / *c_.attn_logit_softcap) * *c_.attn_logit_softcap;
          mx = std::max(mx, w[j]);
        }
        for (int64_t j = first; j <= t; ++j) sum += (w[j] = std::exp(w[j] - mx));
        for (int64_t j = first; j <= t; ++j) {
          for (int64_t d = 0; d < hd; ++d) attn[t][head * hd + d] += w[j] / sum * v[j][kvh * hd + d];
        }
      }
    }
    return attn;
  }
  // Inverse frequencies of layer `layer` at position `position`.
  std::vector<double> InvFreq(int64_t layer, int64_t position) const {
    const bool local = c_.gemma3_rope.local_theta && c_.LayerWindow(layer);
    const double theta = local ? *c_.gemma3_rope.local_theta : c_.rope_theta;
    std::vector<double> inv;
    for (int64_t i = 0; i < c_.head_dim; i += 2) {
      double f = 1.0 / std::pow(theta, double(i) / c_.head_dim);
      if (c_.long_rope) {
        const LongRopeScaling& s = *c_.long_rope;
        f /= (position >= s.original_max_position_embeddings ? s.long_factor : s.short_factor)[i / 2];
      } else if (!local && c_.gemma3_rope.linear_factor != 1.0) {
        f /= c_.gemma3_rope.linear_factor;
      } else if (c_.rope_scaling && !local) {
        const Llama3RopeScaling& s = *c_.rope_scaling;
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen > s.original_max_position_embeddings / s.low_freq_factor) {
          f /= s.factor;
        } else if (wavelen >= s.original_max_position_embeddings / s.high_freq_factor) {
          const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                                (s.high_freq_factor - s.low_freq_factor);
          f = (1 - smooth) * f / s.factor + smooth * f;
        }
      }
      inv.push_back(f);
    }
    return inv;
  }
  void Rope(int64_t layer, Matrix& x) const {
    const int64_t half = c_.head_dim / 2;
    const double m = c_.long_rope ? c_.long_rope->attention_factor : 1.0;
    for (size_t t = 0; t < x.size(); ++t) {
      const std::vector<double> inv = InvFreq(layer, static_cast<int64_t>(t));
      for (size_t h0 = 0; h0 < x[t].size(); h0 += c_.head_dim) {
        for (int64_t i = 0; i < half; ++i) {
          const double a = inv[i] * t, x1 = x[t][h0 + i], x2 = x[t][h0 + i + half];
          x[t][h0 + i] = m * (x1 * std::cos(a) - x2 * std::sin(a));
          x[t][h0 + i + half] = m * (x2 * std::cos(a) + x1 * std::sin(a));
        }
      }
    }
  }
  // A sparse layer's MLP, token by token: the router's softmax, the top_k experts by
  // probability (equal ones to the lower index), renormalized when norm_topk_prob.
  Matrix Experts(const Matrix& h, const std::string& p) {
    const ExpertTensorNames names = ExpertNames(c_.architecture);
    // Linear takes the name without ".weight".
    const auto strip = [](const char* name) { return std::string(name).substr(0, std::string(name).size() - 7); };
    const Matrix logits = Linear(h, p + strip(names.router), false);
    Matrix out(h.size(), std::vector<double>(h[0].size()));
    for (size_t t = 0; t < h.size(); ++t) {
      std::vector<double> probs = logits[t];
      const double mx = *std::max_element(probs.begin(), probs.end());
      double sum = 0;
      for (double& v : probs) sum += (v = std::exp(v - mx));
      for (double& v : probs) v /= sum;
      std::vector<int64_t> order(probs.size());
      for (size_t e = 0; e < order.size(); ++e) order[e] = static_cast<int64_t>(e);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return probs[a] > probs[b]; });
      double chosen_sum = 0;
      for (int64_t j = 0; j < c_.moe.top_k; ++j) chosen_sum += probs[order[j]];
      for (int64_t j = 0; j < c_.moe.top_k; ++j) {
        const std::string e = absl::StrCat(p, names.experts, order[j], ".");
        Matrix gate = Linear({h[t]}, e + strip(names.gate), false);
        const Matrix up = Linear({h[t]}, e + strip(names.up), false);
        for (size_t i = 0; i < gate[0].size(); ++i) gate[0][i] = Activate(gate[0][i]) * up[0][i];
        const Matrix down = Linear(gate, e + strip(names.down), false);
        const double weight = probs[order[j]] / (c_.moe.norm_topk_prob ? chosen_sum : 1.0);
        for (size_t i = 0; i < out[t].size(); ++i) out[t][i] += weight * down[0][i];
      }
    }
    return out;
  }
  static void Add(Matrix& x, const Matrix& y) {
    for (size_t t = 0; t < x.size(); ++t) {
      for (size_t i = 0; i < x[t].size(); ++i) x[t][i] += y[t][i];
    }
  }

  const Checkpoint& checkpoint_;
  const ModelConfig& c_;
};

}  // namespace kvtier

#endif  // KVTIER_TESTS_BACKEND_REFERENCE_MODEL_H_
