// `kvtier mkmodel`: writes a random-weight HF checkpoint (a preset, optionally with shapes
// overridden by flags), or the same model as one GGUF file. It refuses a non-empty output directory unless --force, and even
// then deletes nothing: it replaces only the files it writes. It shows the writing's progress
// on stderr. Runs once per process; not thread-safe.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "command.h"
#include "command_line.h"
#include "gguf_output.h"
#include "model/gguf_export.h"
#include "model/random_checkpoint.h"
#include "progress_bar.h"
#include "tokenizer/byte_tokenizer_writer.h"
#include "tokenizer/gguf_tokenizer.h"

namespace kvtier::cli {
namespace {

struct MkmodelFlags {
  std::string out, preset = "tiny-llama", arch, dtype, rope_scaling, tokenizer = "none", fp8 = "none";
  std::string format = "safetensors";
  bool force = false, tie = false, untie = false, attention_bias = false;
  // Shape overrides; each applies only when its flag is given (CLI::App::count).
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  int64_t max_positions = 0, seed = 0, shard_bytes = 0, bos_id = 0;
  std::vector<int32_t> eos_ids;
  double rope_theta = 0, rms_norm_eps = 0;
  // Gemma / Phi-3 (0 = none).
  int64_t sliding_window = 0, sliding_pattern = 0, longrope = 0;
  double attn_softcap = 0, final_softcap = 0, query_pre_attn_scalar = 0, rope_local_theta = 0, rope_linear = 0;
  // Mixtral / Qwen3-MoE.
  int64_t experts = 0, experts_per_token = 0, expert_intermediate = 0;
  std::string norm_topk_prob;
  std::vector<int64_t> dense_layers;
  int32_t threads = 0;
};

std::string Description() {
  return absl::StrCat(
      "Writes config.json, generation_config.json and random safetensors weights (and with\n"
      "--tokenizer bytes a tokenizer.json). Weights depend only on the seed and the tensor names.\n"
      "A non-empty DIR is refused unless --force; mkmodel never deletes a file, and with --force\n"
      "replaces only the files it writes. With --format gguf, --out is one GGUF file instead\n"
      "(its folder created; the same weights, as `kvtier convert --to gguf` would write them; an\n"
      "existing file is replaced only with --force). Presets: ",
      absl::StrJoin(RandomCheckpointPresetNames(), ", "), ".");
}

void AddFlags(CommandLine* cl, MkmodelFlags* f) {
  constexpr int64_t kMaxDim = INT32_MAX;
  cl->AddString("--out", &f->out, "output directory (created; must be empty unless --force), or the .gguf file",
                "DIR|FILE")
      ->required();
  cl->AddChoice("--format", &f->format, {"safetensors", "gguf"},
                "an HF checkpoint directory (default) or one GGUF file llama.cpp loads");
  cl->AddSwitch("--force", &f->force, "write into a non-empty DIR, replacing only the files mkmodel writes");
  cl->AddChoice("--preset", &f->preset, RandomCheckpointPresetNames(), "starting point (default tiny-llama)");
  cl->AddChoice("--arch", &f->arch, {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "mixtral", "qwen3moe"},
                "architecture");
  cl->AddInt("--hidden", &f->hidden, 1, kMaxDim, "hidden size");
  cl->AddInt("--layers", &f->layers, 1, kMaxDim, "transformer layers");
  cl->AddInt("--heads", &f->heads, 1, kMaxDim, "attention heads");
  cl->AddInt("--kv-heads", &f->kv_heads, 1, kMaxDim, "key/value heads");
  cl->AddInt("--head-dim", &f->head_dim, 1, kMaxDim, "dimension of one head");
  cl->AddInt("--intermediate", &f->intermediate, 1, kMaxDim, "MLP width");
  cl->AddInt("--vocab", &f->vocab, 1, kMaxDim, "vocabulary size");
  cl->AddInt("--max-positions", &f->max_positions, 1, kMaxDim, "context length");
  cl->AddChoice("--dtype", &f->dtype, {"bf16", "fp16", "fp32"}, "stored weight type");
  cl->AddChoice("--fp8", &f->fp8, {"none", "per-tensor", "block", "ct-tensor", "ct-channel"},
                "store the linear projections as FP8 E4M3 checkpoints in the wild do: quant_method fp8 with a "
                "per-tensor weight_scale (per-tensor) or 128x128 weight_scale_inv (block), compressed-tensors "
                "float-quantized per tensor (ct-tensor) or channel (ct-channel); default none");
  cl->AddInt("--seed", &f->seed, 0, INT64_MAX, "weight seed (default 1)", "S");
  cl->AddReal("--rope-theta", &f->rope_theta, 0, 1e12, "RoPE base", true);
  cl->AddChoice("--rope-scaling", &f->rope_scaling, {"llama3", "none"},
                "llama3 (factor 8, low 1, high 4, original 8192) or none");
  cl->AddReal("--rms-norm-eps", &f->rms_norm_eps, 0, 1, "RMSNorm epsilon", true);
  CLI::Option* tie = cl->AddSwitch("--tie-embeddings", &f->tie, "share embed_tokens and lm_head");
  CLI::Option* untie = cl->AddSwitch("--untie-embeddings", &f->untie, "separate embed_tokens and lm_head");
  tie->excludes(untie);
  cl->AddSwitch("--attention-bias", &f->attention_bias, "q/k/v/o biases (llama, qwen3)");
  cl->AddBytes("--shard-bytes", &f->shard_bytes, 0, INT64_MAX, "shard the weights (e.g. 64MiB); 0 = one file");
  cl->AddInt("--bos-id", &f->bos_id, 0, INT32_MAX, "beginning-of-sequence token id");
  cl->AddInts("--eos-id", &f->eos_ids, 0, INT32_MAX, "end-of-sequence token id (repeatable)");
  cl->AddChoice("--tokenizer", &f->tokenizer, {"none", "bytes"},
                "bytes: also write a byte-level tokenizer.json (ids 0..255 = bytes, 256 = bos, 257 = eos; "
                "needs --vocab >= 258)");
  cl->AddInt("--sliding-window", &f->sliding_window, 0, kMaxDim,
             "every family but llama: window of the sliding layers (all layers but gemma's full ones), 0 = none");
  cl->AddInt("--sliding-pattern", &f->sliding_pattern, 1, kMaxDim,
             "gemma2/gemma3: every N-th layer attends fully, the others in the window");
  cl->AddReal("--attn-softcap", &f->attn_softcap, 0, 1e6, "gemma2/gemma3: attention logit soft-cap, 0 = none", true);
  cl->AddReal("--final-softcap", &f->final_softcap, 0, 1e6, "gemma2/gemma3: final logit soft-cap, 0 = none", true);
  cl->AddReal("--query-pre-attn-scalar", &f->query_pre_attn_scalar, 0, 1e9,
              "gemma2/gemma3: attention scale is this ^ -0.5", true);
  cl->AddReal("--rope-local-theta", &f->rope_local_theta, 0, 1e12, "gemma3: RoPE base of the sliding layers", true);
  cl->AddReal("--rope-linear-factor", &f->rope_linear, 0, 1e6,
              "gemma3: linear RoPE scaling of the full-attention layers (as Gemma 3 4B+)", true);
  cl->AddInt("--longrope", &f->longrope, 0, kMaxDim,
             "phi3: longrope scaling over this original context (fixed factors), 0 = none");
  cl->AddInt("--experts", &f->experts, 1, kMaxDim, "mixtral/qwen3moe: experts per sparse layer");
  cl->AddInt("--experts-per-token", &f->experts_per_token, 1, kMaxDim,
             "mixtral/qwen3moe: experts each token is routed to (top-k)");
  cl->AddInt("--expert-intermediate", &f->expert_intermediate, 1, kMaxDim,
             "qwen3moe: one expert's MLP width (moe_intermediate_size; mixtral's is --intermediate)");
  cl->AddChoice("--norm-topk-prob", &f->norm_topk_prob, {"true", "false"},
                "qwen3moe: renormalize the top-k routing weights to sum 1 (mixtral always does)");
  cl->AddInts("--dense-layers", &f->dense_layers, 0, kMaxDim,
              "qwen3moe: a layer with a dense MLP instead of experts (mlp_only_layers; repeatable)");
  cl->AddInt("--threads", &f->threads, 0, 4096, "writer threads, 0 = every core (default 0)");
}

absl::StatusOr<RandomCheckpointSpec> SpecFromFlags(const MkmodelFlags& f, const CLI::App& app) {
  auto given = [&app](const char* flag) { return app.count(flag) > 0; };
  absl::StatusOr<RandomCheckpointSpec> spec = RandomCheckpointPreset(f.preset);
  if (!spec.ok()) return spec.status();
  if (f.arch == "llama") spec->arch = Architecture::kLlama;
  if (f.arch == "mistral") spec->arch = Architecture::kMistral;
  if (f.arch == "qwen2") spec->arch = Architecture::kQwen2;
  if (f.arch == "qwen3") spec->arch = Architecture::kQwen3;
  if (f.arch == "gemma2") spec->arch = Architecture::kGemma2;
  if (f.arch == "gemma3") spec->arch = Architecture::kGemma3;
  if (f.arch == "phi3") spec->arch = Architecture::kPhi3;
  if (f.arch == "mixtral") spec->arch = Architecture::kMixtral;
  if (f.arch == "qwen3moe") spec->arch = Architecture::kQwen3Moe;
  if (given("--experts")) spec->moe.experts = f.experts;
  if (given("--experts-per-token")) spec->moe.top_k = f.experts_per_token;
  if (given("--expert-intermediate")) spec->moe.expert_intermediate = f.expert_intermediate;
  if (given("--norm-topk-prob")) spec->moe.norm_topk_prob = f.norm_topk_prob == "true";
  if (given("--dense-layers")) spec->moe.dense_layers = f.dense_layers;
  auto optional_positive = [](double v) { return v > 0 ? std::optional<double>(v) : std::nullopt; };
  if (given("--sliding-window")) {
    spec->sliding_window = f.sliding_window > 0 ? std::optional<int64_t>(f.sliding_window) : std::nullopt;
  }
  if (given("--sliding-pattern")) spec->sliding_window_pattern = f.sliding_pattern;
  if (given("--attn-softcap")) spec->attn_logit_softcap = optional_positive(f.attn_softcap);
  if (given("--final-softcap")) spec->final_logit_softcap = optional_positive(f.final_softcap);
  if (given("--query-pre-attn-scalar")) spec->query_pre_attn_scalar = optional_positive(f.query_pre_attn_scalar);
  if (given("--rope-local-theta")) spec->rope_local_theta = f.rope_local_theta;
  if (given("--rope-linear-factor")) spec->rope_linear_factor = f.rope_linear;
  if (given("--longrope")) {
    spec->longrope_original_max_positions = f.longrope > 0 ? std::optional<int64_t>(f.longrope) : std::nullopt;
  }
  const std::pair<const char*, std::pair<int64_t, int64_t*>> shape[] = {
      {"--hidden", {f.hidden, &spec->hidden}},         {"--layers", {f.layers, &spec->layers}},
      {"--heads", {f.heads, &spec->heads}},            {"--kv-heads", {f.kv_heads, &spec->kv_heads}},
      {"--head-dim", {f.head_dim, &spec->head_dim}},   {"--intermediate", {f.intermediate, &spec->intermediate}},
      {"--vocab", {f.vocab, &spec->vocab}},            {"--max-positions", {f.max_positions, &spec->max_positions}}};
  for (const auto& [flag, value] : shape) {
    if (given(flag)) *value.second = value.first;
  }
  if (f.dtype == "bf16") spec->dtype = DType::kBF16;
  if (f.dtype == "fp16") spec->dtype = DType::kF16;
  if (f.dtype == "fp32") spec->dtype = DType::kF32;
  if (f.fp8 != "none") {
    WeightQuantization& q = spec->quantization;
    q.activation_scheme = "dynamic";
    if (f.fp8 == "per-tensor") q.format = WeightQuantizationFormat::kFp8PerTensor;
    if (f.fp8 == "block") {
      q.format = WeightQuantizationFormat::kFp8Blockwise;
      q.block_rows = q.block_cols = 128;
    }
    if (f.fp8 == "ct-tensor" || f.fp8 == "ct-channel") q.format = WeightQuantizationFormat::kCompressedTensorsFloat;
    q.per_channel = f.fp8 == "ct-channel";
  }
  if (given("--seed")) spec->seed = static_cast<uint64_t>(f.seed);
  if (given("--rope-theta")) spec->rope_theta = f.rope_theta;
  if (given("--rms-norm-eps")) spec->rms_norm_eps = f.rms_norm_eps;
  if (f.rope_scaling == "llama3") spec->rope_scaling = Llama3RopeScaling{};
  if (f.rope_scaling == "none") spec->rope_scaling.reset();
  if (f.tie) spec->tie_embeddings = true;
  if (f.untie) spec->tie_embeddings = false;
  if (f.attention_bias) spec->attention_bias = true;
  if (given("--shard-bytes")) spec->max_shard_bytes = f.shard_bytes;
  if (given("--bos-id")) spec->bos_token_id = static_cast<int32_t>(f.bos_id);
  if (!f.eos_ids.empty()) spec->eos_token_ids = f.eos_ids;
  if (f.tokenizer == "bytes") {
    if (spec->vocab < tokenizer::kByteTokenizerVocabSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tokenizer bytes needs --vocab >= ", tokenizer::kByteTokenizerVocabSize));
    }
    if (!given("--bos-id")) spec->bos_token_id = tokenizer::kByteTokenizerBosId;
    if (f.eos_ids.empty()) spec->eos_token_ids = {tokenizer::kByteTokenizerEosId};
  }
  spec->num_threads = f.threads;
  return spec;
}

// Refuses an --out that is not a directory, or a non-empty one without --force. With
// --force, says which existing files are replaced. "" or the reason to stop.
std::string CheckOutput(const MkmodelFlags& f, const std::vector<std::string>& files) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(f.out, ec);
  if (!fs::exists(st)) return "";
  if (!fs::is_directory(st)) return absl::StrCat("--out: ", f.out, " exists and is not a directory");
  const bool empty = fs::is_empty(f.out, ec);
  if (ec) return absl::StrCat("--out: cannot read ", f.out, ": ", ec.message());
  if (empty) return "";
  if (!f.force) {
    return absl::StrCat("--out: ", f.out,
                        " is not empty; pass --force to write into it (only the files mkmodel writes are "
                        "replaced, nothing is deleted)");
  }
  for (const std::string& name : files) {
    if (fs::exists(fs::symlink_status(fs::path(f.out) / name, ec))) {
      std::fprintf(stderr, "kvtier mkmodel: replacing %s\n", (fs::path(f.out) / name).c_str());
    }
  }
  return "";
}

// --format gguf: the spec's tensors, renamed and interleaved for llama.cpp, in one file.
int WriteGguf(const CommandLine& cl, const MkmodelFlags& f, const RandomCheckpointSpec& spec,
              const ModelConfig& config) {
  if (std::string refusal = PrepareGgufOutput(f.out, f.force); !refusal.empty()) return cl.Fail(kExitFailure, refusal);
  absl::StatusOr<std::vector<TensorToWrite>> tensors = RandomCheckpointTensors(spec);
  if (!tensors.ok()) return cl.UsageError(tensors.status().message());
  GgufExportOptions options;
  options.name = f.preset;
  if (f.tokenizer == "bytes") {
    absl::StatusOr<GgufMetadata> keys = tokenizer::GgufTokenizerMetadata(
        tokenizer::ByteTokenizerJson(), tokenizer::ByteTokenizerConfigJson(), spec.vocab);
    if (!keys.ok()) return cl.Fail(kExitFailure, keys.status().message());
    options.extra = *std::move(keys);
  } else {
    options.extra = {{"tokenizer.ggml.model", GgufValue::String("no_vocab")}};
  }
  const auto start = std::chrono::steady_clock::now();
  ProgressBar writing("writing " + f.out);
  options.progress = [&writing](std::string_view stage, int64_t done, int64_t total) {
    writing.Update(std::string(stage), done, total);
    return true;
  };
  absl::Status written = WriteGgufModel(config, *tensors, f.out, options);
  writing.Finish();
  if (!written.ok()) return cl.Fail(kExitFailure, written.message());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::error_code ec;
  std::printf("wrote %s: %s, %lld parameters, %.2f GB GGUF, %.1f s\n", f.out.c_str(),
              std::string(ArchitectureName(config.architecture)).c_str(),
              static_cast<long long>(config.NumParameters()),
              static_cast<double>(std::filesystem::file_size(f.out, ec)) / 1e9, seconds);
  return kExitOk;
}

int MkmodelMain(int argc, char** argv) {
  CommandLine cl("mkmodel", Description());
  MkmodelFlags f;
  AddFlags(&cl, &f);
  if (auto status = cl.Parse(argc, argv)) return *status;
  absl::StatusOr<RandomCheckpointSpec> spec = SpecFromFlags(f, cl.app());
  if (!spec.ok()) return cl.UsageError(spec.status().message());
  auto config = RandomCheckpointConfig(*spec);
  if (!config.ok()) return cl.UsageError(config.status().message());
  if (f.format == "gguf") {
    if (cl.app().count("--shard-bytes") > 0) return cl.UsageError("--shard-bytes: a GGUF file is not sharded");
    if (f.fp8 != "none") return cl.UsageError("--fp8: GGUF has no FP8 type (use kvtier convert --type q8_0)");
    return WriteGguf(cl, f, *spec, *config);
  }
  absl::StatusOr<std::vector<std::string>> files = RandomCheckpointFiles(*spec);
  if (!files.ok()) return cl.UsageError(files.status().message());
  if (f.tokenizer == "bytes") {
    files->push_back("tokenizer.json");
    files->push_back("tokenizer_config.json");
  }
  if (std::string refusal = CheckOutput(f, *files); !refusal.empty()) return cl.Fail(kExitFailure, refusal);

  const auto start = std::chrono::steady_clock::now();
  ProgressBar writing("writing " + f.out);
  int64_t weight_bytes = 0;  // as written: fp8 projections take one byte a parameter
  absl::Status written = WriteRandomCheckpoint(
      *spec, f.out, [&writing, &weight_bytes](std::string_view stage, int64_t done, int64_t total) {
        if (stage == "weights") weight_bytes = total;
        writing.Update(std::string(stage), done, total);
        return true;
      });
  writing.Finish();
  if (!written.ok()) return cl.Fail(kExitFailure, written.message());
  if (f.tokenizer == "bytes") {
    if (absl::Status s = tokenizer::WriteByteTokenizer(f.out); !s.ok()) return cl.Fail(kExitFailure, s.message());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t params = config->NumParameters();
  std::printf("wrote %s: %s, %lld parameters, %.2f GB weights, %.1f s\n", f.out.c_str(),
              std::string(ArchitectureName(config->architecture)).c_str(), static_cast<long long>(params),
              static_cast<double>(weight_bytes) / 1e9, seconds);
  return kExitOk;
}

}  // namespace

KVTIER_REGISTER_COMMAND("mkmodel", "write a random-weight checkpoint", MkmodelMain);

}  // namespace kvtier::cli
