// Ceilings (bench_ceilings.h): the anchors' RESULT lines read into the bench's limits.
#include "bench_ceilings.h"

#include <cstdlib>
#include <fstream>
#include <string>

namespace kvtier::cli::bench {
namespace {

// Parameters of Llama-3-8B's projections in one layer, as lib_kernels.py's `shapes` lists
// them (K x N): qkv 4096 x 6144, o 4096 x 4096, gate_up 4096 x 28672, down 14336 x 4096.
constexpr double kProjectionParamsPerLayer = 4096.0 * 6144 + 4096.0 * 4096 + 4096.0 * 28672 + 14336.0 * 4096;
constexpr double kLayers = 32;
constexpr const char kLayerGemmsPrefix[] = "layer_gemms_M";

// Python's json.dumps writes a float that is not finite as NaN, Infinity or -Infinity, which
// JSON has no word for (lib_kernels.py records a failed measurement as NaN): as null, so that
// the rest of the line still reads. Only outside strings, where a value stands.
std::string NonFiniteAsNull(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false, escaped = false;
  char last = '\0';  // the last character outside strings that is not a space
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (in_string) {
      in_string = escaped || c != '"';
      escaped = !escaped && c == '\\';
      if (!in_string) last = c;
      out += text[i++];
      continue;
    }
    if (last == ':' || last == ',' || last == '[') {
      const char* word = nullptr;
      for (const char* candidate : {"NaN", "Infinity", "-Infinity"}) {
        if (text.compare(i, std::char_traits<char>::length(candidate), candidate) == 0) word = candidate;
      }
      if (word != nullptr) {
        out += "null";
        i += std::char_traits<char>::length(word);
        last = 'l';
        continue;
      }
    }
    if (c == '"') in_string = true;
    if (c != ' ') last = c;
    out += text[i++];
  }
  return out;
}

}  // namespace

std::vector<nlohmann::json> ReadResultLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find("RESULT ");
    const std::string text = at == std::string::npos ? line : line.substr(at + 7);
    if (text.empty() || text[0] != '{') continue;
    nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) parsed = nlohmann::json::parse(NonFiniteAsNull(text), nullptr, false);
    if (!parsed.is_discarded()) out.push_back(std::move(parsed));
  }
  return out;
}

void ApplyCeilingsResult(const nlohmann::json& result, const std::string& source, Ceilings* ceilings) {
  const auto number = [&](const char* key, double scale, double* into) {
    if (result.contains(key) && result[key].is_number()) *into = result[key].get<double>() * scale;
  };
  number("hbm_copy_TBps(read+write)", 1e12, &ceilings->hbm_Bps);
  number("bf16_gemm_TFLOPs", 1e12, &ceilings->gemm_flops);
  ceilings->source = "measured in this run (" + source + ")";
}

bool ApplyLibKernelsResult(const nlohmann::json& result, const std::string& source, Ceilings* ceilings) {
  if (!result.is_object()) return false;
  if (const auto it = result.find("attn_32768_CUDNN_ATTENTION_ms_32_layers"); it != result.end() && it->is_number()) {
    ceilings->cudnn_attention_32k_s = it->get<double>() * 1e-3;
  }
  double best = 0;
  int best_rows = 0;
  for (const auto& [key, value] : result.items()) {
    if (key.rfind(kLayerGemmsPrefix, 0) != 0 || !value.is_object() || !value.contains("fp8_ms_32_layers")) continue;
    const char* digits = key.c_str() + sizeof(kLayerGemmsPrefix) - 1;
    char* end = nullptr;
    const long rows = std::strtol(digits, &end, 10);
    if (end == digits || *end != '\0' || rows < kFp8CeilingMinRows) continue;
    const nlohmann::json& ms = value["fp8_ms_32_layers"];
    if (!ms.is_number() || !(ms.get<double>() > 0)) continue;
    const double flops = 2.0 * static_cast<double>(rows) * kProjectionParamsPerLayer * kLayers;
    const double rate = flops / (ms.get<double>() * 1e-3);
    if (rate > best) {
      best = rate;
      best_rows = static_cast<int>(rows);
    }
  }
  if (best_rows == 0) return false;
  ceilings->fp8_gemm_flops = best;
  ceilings->fp8_source = "cuBLASLt fp8 on Llama-3-8B's projections at M = " + std::to_string(best_rows) +
                         ", measured in this run (" + source + ")";
  return true;
}

}  // namespace kvtier::cli::bench
