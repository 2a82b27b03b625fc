// `kvtier mkmodel`: writes a random-weight HF checkpoint (a preset, optionally with shapes
// overridden by flags). Runs once per process; not thread-safe.
#include <chrono>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "args.h"
#include "command.h"
#include "progress_bar.h"
#include "tokenizer/byte_tokenizer_writer.h"
#include "common/status_macros.h"
#include "model/random_checkpoint.h"

namespace kvtier::cli {
namespace {

void PrintHelp() {
  std::printf(
      "usage: kvtier mkmodel --out DIR [--preset NAME] [flags]\n\n"
      "Writes config.json, generation_config.json and random safetensors weights.\n"
      "Weights depend only on the seed and the tensor names (not on threads or sharding).\n\n"
      "  --out DIR              output directory (created)\n"
      "  --preset NAME          starting point (default tiny-llama): %s\n"
      "  --arch A               llama | mistral | qwen2 | qwen3\n"
      "  --hidden N  --layers N  --heads N  --kv-heads N  --head-dim N\n"
      "  --intermediate N  --vocab N  --max-positions N\n"
      "  --dtype D              bf16 | fp16 | fp32\n"
      "  --seed S               weight seed (default 1)\n"
      "  --rope-theta X         RoPE base\n"
      "  --rope-scaling T       llama3 (factor 8, low 1, high 4, original 8192) | none\n"
      "  --rms-norm-eps X\n"
      "  --tie-embeddings       share embed_tokens and lm_head (--untie-embeddings: don't)\n"
      "  --attention-bias       q/k/v/o biases (llama, qwen3)\n"
      "  --shard-bytes SIZE     shard the weights (e.g. 64MiB); 0 = one file\n"
      "  --bos-id N  --eos-id N (repeatable)\n"
      "  --tokenizer none|bytes   also write a byte-level tokenizer.json (ids 0..255 = bytes,\n"
      "                           256 = bos, 257 = eos; needs --vocab >= 258)\n"
      "  --threads N            writer threads (default: all cores)\n",
      absl::StrJoin(RandomCheckpointPresetNames(), ", ").c_str());
}

absl::StatusOr<Architecture> ParseArch(const std::string& name) {
  if (name == "llama") return Architecture::kLlama;
  if (name == "mistral") return Architecture::kMistral;
  if (name == "qwen2") return Architecture::kQwen2;
  if (name == "qwen3") return Architecture::kQwen3;
  return absl::InvalidArgumentError(absl::StrCat("--arch: unknown architecture '", name,
                                                 "' (llama, mistral, qwen2, qwen3)"));
}

absl::StatusOr<DType> ParseDTypeFlag(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "fp16" || name == "f16" || name == "float16") return DType::kF16;
  if (name == "fp32" || name == "f32" || name == "float32") return DType::kF32;
  return absl::InvalidArgumentError(absl::StrCat("--dtype: unknown dtype '", name, "' (bf16, fp16, fp32)"));
}

absl::Status SetInt(const Args& args, const char* flag, int64_t* value) {
  ASSIGN_OR_RETURN(*value, args.GetInt(flag, *value));
  return absl::OkStatus();
}

absl::StatusOr<RandomCheckpointSpec> SpecFromArgs(const Args& args) {
  ASSIGN_OR_RETURN(RandomCheckpointSpec spec, RandomCheckpointPreset(args.GetOr("preset", "tiny-llama")));
  if (auto arch = args.Get("arch")) {
    ASSIGN_OR_RETURN(spec.arch, ParseArch(*arch));
  }
  RETURN_IF_ERROR(SetInt(args, "hidden", &spec.hidden));
  RETURN_IF_ERROR(SetInt(args, "layers", &spec.layers));
  RETURN_IF_ERROR(SetInt(args, "heads", &spec.heads));
  RETURN_IF_ERROR(SetInt(args, "kv-heads", &spec.kv_heads));
  RETURN_IF_ERROR(SetInt(args, "head-dim", &spec.head_dim));
  RETURN_IF_ERROR(SetInt(args, "intermediate", &spec.intermediate));
  RETURN_IF_ERROR(SetInt(args, "vocab", &spec.vocab));
  RETURN_IF_ERROR(SetInt(args, "max-positions", &spec.max_positions));
  if (auto dtype = args.Get("dtype")) {
    ASSIGN_OR_RETURN(spec.dtype, ParseDTypeFlag(*dtype));
  }
  if (auto seed = args.Get("seed")) {
    if (!absl::SimpleAtoi(*seed, &spec.seed)) {
      return absl::InvalidArgumentError(absl::StrCat("--seed: '", *seed, "' is not a non-negative integer"));
    }
  }
  ASSIGN_OR_RETURN(spec.rope_theta, args.GetDouble("rope-theta", spec.rope_theta));
  ASSIGN_OR_RETURN(spec.rms_norm_eps, args.GetDouble("rms-norm-eps", spec.rms_norm_eps));
  if (auto scaling = args.Get("rope-scaling")) {
    if (*scaling == "llama3") {
      spec.rope_scaling = Llama3RopeScaling{};
    } else if (*scaling == "none") {
      spec.rope_scaling.reset();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--rope-scaling: unsupported type '", *scaling, "' (llama3 or none)"));
    }
  }
  if (args.Has("tie-embeddings")) spec.tie_embeddings = args.GetOr("tie-embeddings", "true") != "false";
  if (args.Has("untie-embeddings")) spec.tie_embeddings = false;
  if (args.Has("attention-bias")) spec.attention_bias = args.GetOr("attention-bias", "true") != "false";
  ASSIGN_OR_RETURN(spec.max_shard_bytes, args.GetBytes("shard-bytes", spec.max_shard_bytes));
  if (args.Has("bos-id")) {
    ASSIGN_OR_RETURN(int64_t bos, args.GetInt("bos-id", 0));
    spec.bos_token_id = static_cast<int32_t>(bos);
  }
  if (args.Has("eos-id")) {
    spec.eos_token_ids.clear();
    for (const std::string& text : args.GetAll("eos-id")) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(text, &id)) {
        return absl::InvalidArgumentError(absl::StrCat("--eos-id: '", text, "' is not an integer"));
      }
      spec.eos_token_ids.push_back(id);
    }
  }
  ASSIGN_OR_RETURN(int64_t threads, args.GetInt("threads", 0));
  spec.num_threads = static_cast<int>(threads);
  return spec;
}

int MkmodelMain(int argc, char** argv) {
  auto args = Args::Parse(argc, argv,
                          {"out", "preset", "arch", "hidden", "layers", "heads", "kv-heads", "head-dim",
                           "intermediate", "vocab", "max-positions", "dtype", "seed", "rope-theta",
                           "rope-scaling", "rms-norm-eps", "shard-bytes", "bos-id", "eos-id", "threads", "tokenizer"},
                          {"help", "tie-embeddings", "untie-embeddings", "attention-bias"});
  if (!args.ok()) {
    std::fprintf(stderr, "kvtier mkmodel: %s\n", std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->Has("help")) {
    PrintHelp();
    return 0;
  }
  if (!args->positional().empty()) {
    std::fprintf(stderr, "kvtier mkmodel: unexpected argument '%s'\n", args->positional()[0].c_str());
    return 2;
  }
  auto out = args->Get("out");
  if (!out) {
    std::fprintf(stderr, "kvtier mkmodel: --out DIR is required (see --help)\n");
    return 2;
  }
  auto spec = SpecFromArgs(*args);
  if (!spec.ok()) {
    std::fprintf(stderr, "kvtier mkmodel: %s\n", std::string(spec.status().message()).c_str());
    return spec.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  const std::string tokenizer = args->GetOr("tokenizer", "none");
  if (tokenizer != "none" && tokenizer != "bytes") {
    std::fprintf(stderr, "kvtier mkmodel: --tokenizer must be none or bytes, got '%s'\n", tokenizer.c_str());
    return 2;
  }
  if (tokenizer == "bytes") {
    if (spec->vocab < tokenizer::kByteTokenizerVocabSize) {
      std::fprintf(stderr, "kvtier mkmodel: --tokenizer bytes needs --vocab >= %d\n", tokenizer::kByteTokenizerVocabSize);
      return 2;
    }
    if (!args->Has("bos-id")) spec->bos_token_id = tokenizer::kByteTokenizerBosId;
    if (!args->Has("eos-id")) spec->eos_token_ids = {tokenizer::kByteTokenizerEosId};
  }
  auto config = RandomCheckpointConfig(*spec);
  if (!config.ok()) {
    std::fprintf(stderr, "kvtier mkmodel: %s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  ProgressBar writing("writing " + *out);
  absl::Status status = WriteRandomCheckpoint(*spec, *out, [&writing](std::string_view stage, int64_t done, int64_t total) {
    writing.Update(std::string(stage), done, total);
    return true;
  });
  writing.Finish();
  if (!status.ok()) {
    std::fprintf(stderr, "kvtier mkmodel: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  if (tokenizer == "bytes") {
    if (absl::Status t = tokenizer::WriteByteTokenizer(*out); !t.ok()) {
      std::fprintf(stderr, "kvtier mkmodel: %s\n", std::string(t.message()).c_str());
      return 1;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t params = config->NumParameters();
  std::printf("wrote %s: %s, %lld parameters, %.2f GB weights, %.1f s\n", out->c_str(),
              std::string(ArchitectureName(config->architecture)).c_str(), static_cast<long long>(params),
              static_cast<double>(params) * static_cast<double>(DTypeSize(spec->dtype)) / 1e9, seconds);
  return 0;
}

}  // namespace

KVTIER_REGISTER_COMMAND("mkmodel", "write a random-weight checkpoint", MkmodelMain);

}  // namespace kvtier::cli
