// The CPU backend's mixture-of-experts MLP (cpu_moe.h). Thread-compatible.
#include "backend/cpu/cpu_moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"

namespace kvtier {
namespace {

template <typename T>
void Grow(std::vector<T>* v, int64_t size) {
  if (static_cast<int64_t>(v->size()) < size) v->resize(static_cast<size_t>(size));
}

template <typename T>
int64_t BytesOf(const std::vector<T>& v) {
  return static_cast<int64_t>(v.size() * sizeof(T));
}

}  // namespace

int64_t CpuMoeWeights::Bytes() const {
  int64_t bytes = router.Bytes();
  for (const CpuExpert& e : experts) bytes += e.gate.Bytes() + e.up.Bytes() + e.down.Bytes();
  return bytes;
}

void RouteTopK(const float* logits, int64_t rows, int64_t num_experts, int64_t top_k, bool renormalize,
               int32_t* experts, float* weights) {
  std::vector<float> probs(static_cast<size_t>(num_experts));
  std::vector<bool> taken(static_cast<size_t>(num_experts));
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * num_experts;
    // torch.softmax in fp32: exp(l - max) / sum.
    const float max = *std::max_element(l, l + num_experts);
    float sum = 0.0f;
    for (int64_t e = 0; e < num_experts; ++e) {
      probs[static_cast<size_t>(e)] = std::exp(l[e] - max);
      sum += probs[static_cast<size_t>(e)];
    }
    for (float& p : probs) p /= sum;
    std::fill(taken.begin(), taken.end(), false);
    int32_t* chosen = experts + r * top_k;
    float* w = weights + r * top_k;
    float total = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < num_experts; ++e) {  // strict >: equal probabilities keep the lower index
        if (!taken[static_cast<size_t>(e)] && (best < 0 || probs[static_cast<size_t>(e)] > probs[static_cast<size_t>(best)])) {
          best = e;
        }
      }
      taken[static_cast<size_t>(best)] = true;
      chosen[j] = static_cast<int32_t>(best);
      w[j] = probs[static_cast<size_t>(best)];
      total += w[j];
    }
    if (renormalize) {
      for (int64_t j = 0; j < top_k; ++j) w[j] /= total;
    }
  }
}

void CpuMoeScratch::Reserve(const ModelConfig& c, int64_t tokens) {
  if (c.moe.num_experts == 0) return;
  const int64_t routes = tokens * c.moe.top_k;
  Grow(&logits, tokens * c.moe.num_experts);
  Grow(&chosen, routes);
  Grow(&weights, routes);
  Grow(&offsets, c.moe.num_experts + 1);
  Grow(&order, routes);
  Grow(&gathered, tokens * c.hidden_size);
  Grow(&gate, tokens * c.moe.expert_intermediate_size);
  Grow(&up, tokens * c.moe.expert_intermediate_size);
  Grow(&expert_out, tokens * c.hidden_size);
  Grow(&out, tokens * c.hidden_size);
}

int64_t CpuMoeScratch::Bytes() const {
  return BytesOf(logits) + BytesOf(chosen) + BytesOf(weights) + BytesOf(offsets) +
         BytesOf(order) + BytesOf(gathered) + BytesOf(gate) + BytesOf(up) + BytesOf(expert_out) +
         BytesOf(out);
}

const float* MoeMlp(const CpuMoeWeights& w, const MoeConfig& moe, const float* x, int64_t rows, int64_t hidden,
                    ThreadPool* pool, CpuMoeScratch* s, std::vector<uint8_t>* activations) {
  const int64_t num_experts = moe.num_experts;
  const int64_t top_k = moe.top_k;
  const int64_t inter = moe.expert_intermediate_size;
  MatMul(w.router, x, nullptr, rows, s->logits.data(), pool, activations);
  RouteTopK(s->logits.data(), rows, num_experts, top_k, moe.norm_topk_prob, s->chosen.data(), s->weights.data());

  // Group the routes by expert (counting sort; each expert's rows stay in token order).
  std::fill(s->offsets.begin(), s->offsets.begin() + num_experts + 1, 0);
  const int64_t routes = rows * top_k;
  for (int64_t i = 0; i < routes; ++i) ++s->offsets[static_cast<size_t>(s->chosen[i]) + 1];
  for (int64_t e = 0; e < num_experts; ++e) s->offsets[e + 1] += s->offsets[e];
  std::vector<int64_t> next(s->offsets.begin(), s->offsets.begin() + num_experts);
  for (int64_t i = 0; i < routes; ++i) s->order[static_cast<size_t>(next[s->chosen[i]]++)] = i;

  float* out = s->out.data();
  std::fill(out, out + rows * hidden, 0.0f);
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t first = s->offsets[e];
    const int64_t count = s->offsets[e + 1] - first;
    if (count == 0) continue;  // not chosen: its weights are not read
    for (int64_t i = 0; i < count; ++i) {
      const int64_t token = s->order[first + i] / top_k;
      std::memcpy(s->gathered.data() + i * hidden, x + token * hidden, static_cast<size_t>(hidden) * sizeof(float));
    }
    const CpuExpert& expert = w.experts[static_cast<size_t>(e)];
    MatMul(expert.gate, s->gathered.data(), nullptr, count, s->gate.data(), pool, activations);
    MatMul(expert.up, s->gathered.data(), nullptr, count, s->up.data(), pool, activations);
    SiluMul(s->gate.data(), s->up.data(), count * inter, s->gate.data());
    MatMul(expert.down, s->gate.data(), nullptr, count, s->expert_out.data(), pool, activations);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t route = s->order[first + i];
      const float weight = s->weights[route];
      float* dst = out + (route / top_k) * hidden;
      const float* src = s->expert_out.data() + i * hidden;
      for (int64_t d = 0; d < hidden; ++d) dst[d] += src[d] * weight;
    }
  }
  return out;
}

}  // namespace kvtier
