// The named presets of random checkpoints (random_checkpoint.h): tiny ones of every
// architecture for tests, and the shapes of released models. Stateless; thread-safe.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/random_checkpoint.h"

namespace kvtier {
namespace {

RandomCheckpointSpec Tiny(Architecture arch) {
  RandomCheckpointSpec s;
  s.arch = arch;
  if (arch == Architecture::kQwen3) s.tie_embeddings = true;
  if (arch == Architecture::kGemma2 || arch == Architecture::kGemma3) {
    s.tie_embeddings = true;
    s.sliding_window = 16;
    s.query_pre_attn_scalar = 24;
    s.rms_norm_eps = 1e-6;
    if (arch == Architecture::kGemma2) {
      s.attn_logit_softcap = 20.0;
      s.final_logit_softcap = 10.0;
    } else {
      s.rope_theta = 1e6;
    }
  }
  if (arch == Architecture::kPhi3) {
    s.sliding_window = 24;
    s.longrope_original_max_positions = 64;
  }
  if (arch == Architecture::kQwen3Moe) s.moe.expert_intermediate = 48;
  return s;
}

RandomCheckpointSpec Real(Architecture arch, int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads,
                          int64_t head_dim, int64_t intermediate, int64_t vocab, int64_t max_positions,
                          double rope_theta, bool tie) {
  RandomCheckpointSpec s;
  s.arch = arch;
  s.hidden = hidden;
  s.layers = layers;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.intermediate = intermediate;
  s.vocab = vocab;
  s.max_positions = max_positions;
  s.rope_theta = rope_theta;
  s.tie_embeddings = tie;
  s.dtype = DType::kBF16;
  s.max_shard_bytes = int64_t{5} << 30;  // HF's default 5 GB shards
  return s;
}

std::vector<std::pair<std::string, RandomCheckpointSpec>> Presets() {
  std::vector<std::pair<std::string, RandomCheckpointSpec>> presets;
  presets.emplace_back("tiny-llama", Tiny(Architecture::kLlama));
  presets.emplace_back("tiny-mistral", Tiny(Architecture::kMistral));
  presets.emplace_back("tiny-qwen2", Tiny(Architecture::kQwen2));
  presets.emplace_back("tiny-qwen3", Tiny(Architecture::kQwen3));
  presets.emplace_back("tiny-gemma2", Tiny(Architecture::kGemma2));
  presets.emplace_back("tiny-gemma3", Tiny(Architecture::kGemma3));
  presets.emplace_back("tiny-phi3", Tiny(Architecture::kPhi3));
  presets.emplace_back("tiny-mixtral", Tiny(Architecture::kMixtral));
  presets.emplace_back("tiny-qwen3moe", Tiny(Architecture::kQwen3Moe));
  RandomCheckpointSpec small = Tiny(Architecture::kLlama);
  small.hidden = 256;
  small.layers = 4;
  small.heads = 8;
  small.kv_heads = 2;
  small.head_dim = 32;
  small.intermediate = 768;
  small.vocab = 4096;
  presets.emplace_back("small-llama", small);

  RandomCheckpointSpec l3_8b =
      Real(Architecture::kLlama, 4096, 32, 32, 8, 128, 14336, 128256, 131072, 500000.0, false);
  l3_8b.rope_scaling = Llama3RopeScaling{8.0, 1.0, 4.0, 8192};
  l3_8b.bos_token_id = 128000;
  l3_8b.eos_token_ids = {128001};
  presets.emplace_back("llama3-8b", l3_8b);
  RandomCheckpointSpec l32_1b =
      Real(Architecture::kLlama, 2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0, true);
  l32_1b.rope_scaling = Llama3RopeScaling{32.0, 1.0, 4.0, 8192};
  l32_1b.bos_token_id = 128000;
  l32_1b.eos_token_ids = {128001, 128008, 128009};
  presets.emplace_back("llama3.2-1b", l32_1b);
  RandomCheckpointSpec mistral =
      Real(Architecture::kMistral, 4096, 32, 32, 8, 128, 14336, 32768, 32768, 1000000.0, false);
  presets.emplace_back("mistral-7b", mistral);
  RandomCheckpointSpec qwen25 =
      Real(Architecture::kQwen2, 896, 24, 14, 2, 64, 4864, 151936, 32768, 1000000.0, true);
  qwen25.bos_token_id = 151643;
  qwen25.eos_token_ids = {151643};
  qwen25.rms_norm_eps = 1e-6;
  presets.emplace_back("qwen2.5-0.5b", qwen25);
  RandomCheckpointSpec qwen3 =
      Real(Architecture::kQwen3, 1024, 28, 16, 8, 128, 3072, 151936, 40960, 1000000.0, true);
  qwen3.bos_token_id = 151643;
  qwen3.eos_token_ids = {151645};
  qwen3.rms_norm_eps = 1e-6;
  presets.emplace_back("qwen3-0.6b", qwen3);
  RandomCheckpointSpec gemma2 =
      Real(Architecture::kGemma2, 2304, 26, 8, 4, 256, 9216, 256000, 8192, 10000.0, true);
  gemma2.sliding_window = 4096;
  gemma2.query_pre_attn_scalar = 256;
  gemma2.attn_logit_softcap = 50.0;
  gemma2.final_logit_softcap = 30.0;
  gemma2.rms_norm_eps = 1e-6;
  gemma2.bos_token_id = 2;
  gemma2.eos_token_ids = {1, 107};
  presets.emplace_back("gemma2-2b", gemma2);
  RandomCheckpointSpec gemma3 =
      Real(Architecture::kGemma3, 1152, 26, 4, 1, 256, 6912, 262144, 32768, 1000000.0, true);
  gemma3.sliding_window = 512;
  gemma3.sliding_window_pattern = 6;
  gemma3.query_pre_attn_scalar = 256;
  gemma3.rms_norm_eps = 1e-6;
  gemma3.bos_token_id = 2;
  gemma3.eos_token_ids = {1, 106};
  presets.emplace_back("gemma3-1b", gemma3);
  RandomCheckpointSpec phi35 =
      Real(Architecture::kPhi3, 3072, 32, 32, 32, 96, 8192, 32064, 131072, 10000.0, false);
  phi35.sliding_window = 262144;
  phi35.longrope_original_max_positions = 4096;
  phi35.eos_token_ids = {32000, 32001, 32007};
  presets.emplace_back("phi3.5-mini", phi35);
  RandomCheckpointSpec mixtral =
      Real(Architecture::kMixtral, 4096, 32, 32, 8, 128, 14336, 32000, 32768, 1000000.0, false);
  mixtral.moe.experts = 8;
  mixtral.moe.top_k = 2;
  presets.emplace_back("mixtral-8x7b", mixtral);
  RandomCheckpointSpec qwen3moe =
      Real(Architecture::kQwen3Moe, 2048, 48, 32, 4, 128, 6144, 151936, 40960, 1000000.0, false);
  qwen3moe.moe.experts = 128;
  qwen3moe.moe.top_k = 8;
  qwen3moe.moe.expert_intermediate = 768;
  qwen3moe.rms_norm_eps = 1e-6;
  qwen3moe.bos_token_id = 151643;
  qwen3moe.eos_token_ids = {151645};
  presets.emplace_back("qwen3-30b-a3b", qwen3moe);
  return presets;
}

}  // namespace

absl::StatusOr<RandomCheckpointSpec> RandomCheckpointPreset(std::string_view name) {
  for (auto& [preset, spec] : Presets()) {
    if (preset == name) return spec;
  }
  return absl::NotFoundError(absl::StrCat("unknown model preset '", std::string(name), "' (known: ",
                                          absl::StrJoin(RandomCheckpointPresetNames(), ", "), ")"));
}

std::vector<std::string> RandomCheckpointPresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, spec] : Presets()) names.push_back(name);
  return names;
}

}  // namespace kvtier
