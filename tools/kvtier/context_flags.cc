// Implementation of ContextFlags (context_flags.h). The table mirrors the option list of
// kvtier.h; tests/cli checks that every key documented there has its flag.
#include "context_flags.h"

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace kvtier::cli {
namespace {

enum class Kind { kInt, kBytes, kChoice, kPath, kUrl, kList };

struct ContextOption {
  const char* key;
  Kind kind;
  int64_t min;
  int64_t max;
  const char* choices;  // kChoice: "a|b|c"
  const char* help;
};

constexpr int64_t kNoLimit = INT64_MAX;

constexpr ContextOption kOptions[] = {
    {"backend", Kind::kChoice, 0, 0, "auto|cpu|cpu-reference|cuda",
     "compute backend (default auto: CUDA when a GPU is usable, else the CPU; cpu-reference: the CPU with every "
     "weight widened to fp32)"},
    {"threads", Kind::kInt, 0, 4096, nullptr, "CPU backend threads, 0 = every core (default 0)"},
    {"gpu_kv_bytes", Kind::kBytes, 0, kNoLimit, nullptr,
     "device-tier KV budget; 0 = all that --gpu-mem-limit leaves (default: sized from the model's context and "
     "--max-running)"},
    {"host_kv_bytes", Kind::kBytes, 0, kNoLimit, nullptr, "host-tier KV budget, 0 = no host tier (default 0)"},
    {"disk_kv_bytes", Kind::kBytes, 0, kNoLimit, nullptr,
     "disk-tier KV budget, 0 = no disk tier (default 0; needs --disk-path)"},
    {"disk_path", Kind::kPath, 0, 0, nullptr, "file backing the disk tier; later runs reuse its cached prefixes"},
    {"block_tokens", Kind::kInt, 1, 1024, nullptr, "tokens per KV block (default 16)"},
    {"max_tokens_per_step", Kind::kInt, 1, 1 << 20, nullptr, "token budget of one step (default 512)"},
    {"max_running", Kind::kInt, 1, 65536, nullptr, "sequences in one batch (default 256)"},
    {"max_waiting", Kind::kInt, 1, 1 << 24, nullptr, "bound of the waiting queue (default 1024)"},
    {"preemption", Kind::kChoice, 0, 0, "auto|swap|recompute",
     "how a paused sequence gives up its device blocks (default auto: by measured cost)"},
    {"gpu_mem_limit", Kind::kBytes, 0, kNoLimit, nullptr,
     "cap on device memory: weights + KV + workspace, 0 = none (default 0)"},
    {"load_or_recompute", Kind::kInt, 0, 1, nullptr,
     "a prefix only on disk or in the remote tier is partly recomputed while the rest loads, split by "
     "measured cost (default 1)"},
    {"prefix_cache", Kind::kInt, 0, 1, nullptr,
     "keep computed full blocks as prefix-cache entries for later prompts (default 1)"},
    {"kv_layer_groups", Kind::kInt, 0, 1, nullptr,
     "a model with sliding-window layers keeps each window's layers in blocks of their own, given back once no "
     "query reads them, and swaps to the host or disk tier move only those kept; prefix entries go to every tier "
     "under their group's key; cpu and cuda backends at --tensor-parallel 1 only (default 1)"},
    {"remote_kv_url", Kind::kUrl, 0, 0, nullptr,
     "remote KV tier shared by every process naming it: redis://host:port, or a Redis Cluster's seeds "
     "redis://host:port,host:port (default none)"},
    {"remote_kv_ttl_seconds", Kind::kInt, 0, kNoLimit, nullptr,
     "expiry of each block stored in the remote tier, 0 = none: Redis's maxmemory policy evicts (default 0)"},
    {"remote_kv_max_bytes_in_flight", Kind::kBytes, 1, kNoLimit, nullptr,
     "bytes of remote-tier puts and lookups queued at once; more are not shared (default 64MiB)"},
    {"remote_kv_timeout_ms", Kind::kInt, 1, 600000, nullptr,
     "bound on a remote-tier connect, read or write, and on a step's wait for a lookup (default 100)"},
    {"remote_kv_retry_ms", Kind::kInt, 0, 86400000, nullptr,
     "after a remote-tier failure the tier is off this long, then tried again (default 5000)"},
    {"remote_kv_connections", Kind::kInt, 1, 64, nullptr,
     "remote-tier lookups run in parallel on this many connections (threads) per node (default 4)"},
    {"weight_dtype", Kind::kChoice, 0, 0, "auto|bf16|fp16|fp8|q8_0|q4_k",
     "format the weights are held in; fp8: E4M3, one scale per output channel; q8_0, q4_k (cpu backend): GGUF's "
     "blocks, quantized at load as llama.cpp quantizes (default auto)"},
    {"kv_dtype", Kind::kChoice, 0, 0, "auto|bf16|fp16|fp8", "format of the KV cache on every tier (default auto)"},
    {"tensor_parallel", Kind::kChoice, 0, 0, "1|2|4|8",
     "ranks the heads and MLP rows are split over; the cpu backend runs them in one process, the cuda backend "
     "refuses > 1 for now (default 1)"},
    {"devices", Kind::kList, 0, 0, nullptr, "GPU ordinals of the ranks, e.g. 0,1 (default: the first ones)"},
    {"sharded_reduction", Kind::kInt, 0, 1, nullptr,
     "cpu backend: run the sharded plan at --tensor-parallel 1 too, summing as every degree does (default 0)"},
    {"cuda_graphs", Kind::kInt, 0, 1, nullptr, "CUDA: decode steps as CUDA graphs (default 1)"},
    {"cuda_fast_attention", Kind::kInt, 0, 1, nullptr,
     "CUDA: decode/prefill attention kernels where the shape fits, else the generic one (default 1)"},
    {"cuda_pdl", Kind::kInt, 0, 1, nullptr, "CUDA: programmatic dependent launch (default 1)"},
    {"cuda_skinny_gemm", Kind::kInt, 0, 3, nullptr,
     "CUDA: decode-batch projections on the stream-K wgmma kernel: 0 off, 1 on, 2 on with the overlapped pipeline "
     "for bf16 too, 3 on every projection with the TMA pipeline (default 1)"},
    {"cuda_fp8_activations", Kind::kInt, 0, 1, nullptr,
     "CUDA, fp8 weights: steps of 3+ rows quantize activations per token and run fp8 x fp8 projections; 0 keeps "
     "them 16-bit (default 1)"},
    {"cuda_prefill_wgmma", Kind::kInt, 0, 1, nullptr,
     "CUDA: prefill attention on the Hopper wgmma kernel where it runs (bf16, head_dim 128); 0 keeps the mma.sync "
     "kernel (default 1)"},
    {"cuda_prefill_cudnn", Kind::kInt, 0, 2, nullptr,
     "CUDA: prefill attention on cuDNN's fused attention, loaded at run time, where it applies (bf16, head_dim 64 "
     "or 128, plain scores): 1 for steps whose chunks fill the step's token budget (a long prompt's), 2 for every "
     "step, 0 never; the kernels above run the rest (default 1)"},
    {"cuda_prefill_fp8_attention", Kind::kInt, 0, 1, nullptr,
     "CUDA, fp8 KV: 1 runs the prefill steps on cuDNN on its fp8 attention (queries, keys and values as E4M3 at "
     "one scale per tensor, the output in E4M3 then bf16); 0 gathers the KV into bf16 for its bf16 attention "
     "(default 0)"},
    {"cuda_overlap_attention", Kind::kInt, 0, 1, nullptr,
     "CUDA: a step with decode rows and a prompt chunk runs its decode attention on a second stream beside its "
     "prefill attention (default 0)"},
    {"cuda_prefill_wgmma_variant", Kind::kInt, 0, 7, nullptr,
     "CUDA: the wgmma prefill attention's variant, for timing runs: 0 its usual tiles, 1-3 other KV tiles and "
     "depths, 4-6 softmax overlapped with the next tile's MMAs, 7 two CTAs per SM (default 0)"},
    {"cuda_decode_fp8_pair_tiles", Kind::kInt, -1, 2, nullptr,
     "CUDA, fp8 KV: decode attention in rounds of 32 positions with 16-byte code loads: 1 on, 2 on with its "
     "products in f16, 0 off, -1 the library's choice (1; default -1)"},
    {"cuda_moe_decode_fused", Kind::kInt, -1, 1, nullptr,
     "CUDA, mixture-of-experts models: one-row decode steps on the three-kernel fused path: 1 on, 0 the "
     "grouped kernels, -1 the library's choice (on; default -1)"},
    {"cuda_gemv_bulk", Kind::kInt, -1, 1, nullptr,
     "CUDA: the decode GEMV reads its weights through the copy engine where the whole matrix fits in shared "
     "memory: 1 on, 0 through registers, -1 the library's choice (16-bit weights, and one row's fp8 codes "
     "in matrices of up to 12 MiB; default -1)"},
    {"cuda_moe_down_bulk", Kind::kInt, -1, 1, nullptr,
     "CUDA, mixture-of-experts models: the fused decode path's down+combine reads its weights through the "
     "copy engine where a CTA's rows fit: 1 on, 0 through registers, -1 the library's choice (16-bit experts; "
     "default -1)"},
    {"cuda_moe_skinny", Kind::kInt, -1, 1, nullptr,
     "CUDA, mixture-of-experts models on compute capability 9.0: prefill-sized steps run their experts on "
     "the grouped skinny tensor-core kernel, one launch per projection: 1 on, 0 the grouped tiles or the "
     "library GEMMs, -1 the library's choice (on; steps big enough for the library GEMMs run on those either "
     "way; default -1)"},
    {"cuda_l2_prefetch", Kind::kInt, -1, 3, nullptr,
     "CUDA: one- and two-row decode steps ask L2 for a projection's weights while the short kernels before it "
     "run, a sum of 1 (the o projection's, during QkvPost) and 2 (the next layer's qkv, during a "
     "mixture-of-experts router); 0 none, -1 the library's choice (both; default -1)"},
    {"cuda_pdl_early", Kind::kInt, 0, 1, nullptr,
     "CUDA: short kernels start the next kernel before their own wait (default 1)"},
    {"cuda_host_kv_stream_tokens", Kind::kInt, 0, 1 << 24, nullptr,
     "CUDA: positions of host-resident KV a step may stream, for sequences longer than the device tier (default 0)"},
    {"cuda_gemv_prefetch", Kind::kInt, 2, 8, nullptr,
     "CUDA: 16-byte weight pieces per lane the decode GEMV loads before its wait, 2, 4 or 8 (default 4)"},
};

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.' || c == '/';
}

// True when a name ending before `end` ends there: at the end, before a character that
// cannot continue a name, or before a full stop that ends a sentence.
bool IsRightBoundary(const std::string& text, size_t end) {
  if (end == text.size() || !IsNameChar(text[end])) return true;
  return text[end] == '.' && (end + 1 == text.size() || text[end + 1] == ' ');
}

}  // namespace

std::string ContextFlags::FlagOf(const std::string& key) {
  return "--" + absl::StrReplaceAll(key, {{"_", "-"}});
}

void ContextFlags::AddTo(CommandLine* command_line) {
  for (const ContextOption& option : kOptions) {
    const std::string key = option.key;
    auto store = [this, key](const std::string& value) { values_[key] = value; };
    switch (option.kind) {
      case Kind::kInt:
        command_line->AddCustom(FlagOf(key), option.max == 1 ? "0|1" : "N", option.help,
                                CommandLine::IntNormalizer(option.min, option.max), store);
        break;
      case Kind::kBytes:
        command_line->AddCustom(FlagOf(key), "SIZE", option.help,
                                CommandLine::BytesNormalizer(option.min, option.max), store);
        break;
      case Kind::kChoice: {
        const std::vector<std::string> choices = absl::StrSplit(option.choices, '|');
        const std::string list = option.choices;
        Normalizer one_of = [choices, list](absl::string_view text) -> absl::StatusOr<std::string> {
          for (const std::string& choice : choices) {
            if (text == choice) return choice;
          }
          return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not one of ", list));
        };
        command_line->AddCustom(FlagOf(key), list, option.help, std::move(one_of), store);
        break;
      }
      case Kind::kPath:
        command_line->AddCustom(
            FlagOf(key), "FILE", option.help, [](absl::string_view text) -> absl::StatusOr<std::string> {
              if (text.empty()) return absl::InvalidArgumentError("empty path");
              return std::string(text);
            },
            store);
        break;
      case Kind::kList:
        command_line->AddCustom(
            FlagOf(key), "LIST", option.help, [](absl::string_view text) -> absl::StatusOr<std::string> {
              if (text.empty()) return absl::InvalidArgumentError("empty list");
              return std::string(text);
            },
            store);
        break;
      case Kind::kUrl:
        command_line->AddCustom(
            FlagOf(key), "URL", option.help, [](absl::string_view text) -> absl::StatusOr<std::string> {
              if (text.empty()) return absl::InvalidArgumentError("empty URL");
              return std::string(text);
            },
            store);
        break;
    }
  }
}

std::string ContextFlags::Apply(kvt_options* options) const {
  for (const auto& [key, value] : values_) {
    if (kvt_options_set_string(options, key.c_str(), value.c_str()) != KVT_OK) {
      return absl::StrCat(FlagOf(key), ": ", InFlagTerms(kvt_options_errmsg(options)));
    }
  }
  return "";
}

std::string ContextFlags::Get(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? "" : it->second;
}

std::string ContextFlags::InFlagTerms(const std::string& message) {
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    bool replaced = false;
    if (i == 0 || !IsNameChar(message[i - 1])) {
      for (const ContextOption& option : kOptions) {
        const std::string_view key = option.key;
        const size_t end = i + key.size();
        // Keys that are plain words ("backend", "threads") count only when quoted as a key
        // ('backend'), so "the CUDA backend module" stays prose.
        const bool is_key = key.find('_') != std::string_view::npos ||
                            (i > 0 && message[i - 1] == '\'' && end < message.size() && message[end] == '\'');
        if (is_key && message.compare(i, key.size(), key) == 0 && IsRightBoundary(message, end)) {
          out += FlagOf(option.key);
          i = end;
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out += message[i++];
  }
  return out;
}

}  // namespace kvtier::cli
