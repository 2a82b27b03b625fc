// Implementation of W7 (bench_w7.h).
#include "bench_w7.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "interrupt.h"

namespace kvtier::cli::bench {
namespace {

namespace fs = std::filesystem;

constexpr int kPrefillThreads = 2;
constexpr int kDecodePrompt = 16;  // each decoding sequence's own prompt, as llama_speed.mjs
constexpr int kThreadCounts[] = {1, 2};
constexpr int kSequenceCounts[] = {1, 8};

int64_t ReadProcStatusKib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + std::strlen(key));
  }
  return -1;
}

json Num(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

std::string ThreadsKey(int threads) { return threads == 1 ? "1_thread" : absl::StrCat(threads, "_threads"); }
std::string SequencesKey(int seqs) { return seqs == 1 ? "1_seq" : absl::StrCat(seqs, "_seqs"); }

// The figures of one engine on one file: prefill tok/s at kPrefillThreads, decode tok/s
// (every sequence's tokens) by sequences and threads.
struct Speeds {
  double prefill = NAN;
  int prefill_tokens = 0;  // the prompt: W7's, or one less than a shorter model context
  std::map<int, std::map<int, double>> decode;  // sequences -> threads -> tok/s
  std::string error;

  double BestDecode(int seqs) const {
    double best = NAN;
    auto it = decode.find(seqs);
    if (it == decode.end()) return best;
    for (const auto& [threads, tps] : it->second) {
      if (!std::isnan(tps) && (std::isnan(best) || tps > best)) best = tps;
    }
    return best;
  }
  int BestThreads(int seqs) const {
    const double best = BestDecode(seqs);
    auto it = decode.find(seqs);
    if (it == decode.end()) return 0;
    for (const auto& [threads, tps] : it->second) {
      if (tps == best) return threads;
    }
    return 0;
  }
  json ToJson() const {
    json j = {{"prefill_tok_s", Num(prefill)}, {"prefill_tokens", prefill_tokens}, {"prefill_threads", kPrefillThreads}};
    for (const auto& [seqs, by_threads] : decode) {
      json d;
      for (const auto& [threads, tps] : by_threads) d[ThreadsKey(threads)] = Num(tps);
      j["decode_tok_s_by_threads"][SequencesKey(seqs)] = d;
      j["decode_tok_s"][SequencesKey(seqs)] = Num(BestDecode(seqs));
      j["decode_best_threads"][SequencesKey(seqs)] = BestThreads(seqs);
    }
    if (!error.empty()) j["error"] = error;
    return j;
  }
};

WorkloadSpec Spec(int seqs, int prompt, int gen, int threads) {
  WorkloadSpec w;
  w.id = "W7";
  w.num_seqs = seqs;
  w.prompt = prompt;
  w.gen = gen;
  w.options = {{"backend", "cpu"},
               {"threads", std::to_string(threads)},
               {"gpu_kv_bytes", "256MiB"},
               {"max_running", std::to_string(seqs)},
               {"max_tokens_per_step", std::to_string(std::max(prompt, 512))}};
  return w;
}

// kvtier on one GGUF file, through the C API: a fresh context per figure.
Speeds MeasureKvtier(const std::string& gguf, const W7Options& o, double time_limit, json* record) {
  Speeds s;
  kvt_model* model = nullptr;
  char err[1024];
  if (kvt_model_load(gguf.c_str(), &model, err, sizeof err) != KVT_OK) {
    s.error = std::string("model load failed: ") + err;
    return s;
  }
  s.prefill_tokens = o.prefill;
  char info[1 << 16];
  int32_t info_len = 0;
  if (kvt_model_info_json(model, info, sizeof info, &info_len) == KVT_OK) {
    const json j = json::parse(info, nullptr, false);
    const int64_t positions = j.is_object() ? j.value("max_position_embeddings", int64_t{0}) : 0;
    if (positions > 1) s.prefill_tokens = static_cast<int>(std::min<int64_t>(o.prefill, positions - 1));
  }
  {
    const WorkloadSpec w = Spec(1, s.prefill_tokens, 1, kPrefillThreads);
    const RunResult r = RunWorkload(model, w, time_limit, nullptr);
    if (r.ok) s.prefill = s.prefill_tokens / r.ttft_s;
    if (!r.ok) s.error = r.error;
    if (!r.stats.is_null()) (*record)["compute_path"] = r.stats.value("compute_path", "");
  }
  for (int seqs : kSequenceCounts) {
    for (int threads : kThreadCounts) {
      if (InterruptSignal() != 0) break;
      const WorkloadSpec w = Spec(seqs, kDecodePrompt, o.decode + 1, threads);
      const RunResult r = RunWorkload(model, w, time_limit, nullptr);
      s.decode[seqs][threads] = r.ok && r.decode_s > 0 ? r.decode_tokens / r.decode_s : NAN;
      if (!r.ok && s.error.empty()) s.error = r.error;
    }
  }
  kvt_model_free(model);
  return s;
}

// "" when node and the oracle are there, else why llama.cpp is not measured.
std::string OracleMissing(const std::string& dir) {
  if (RunCommandOutput("command -v node 2>/dev/null").empty()) return "node not found";
  std::error_code ec;
  if (dir.empty() || !fs::is_regular_file(fs::path(dir) / "llama_speed.mjs", ec)) {
    return absl::StrCat("llama_speed.mjs not found in --llama-oracle '", dir, "'");
  }
  if (!fs::is_directory(fs::path(dir) / "node_modules" / "node-llama-cpp", ec)) {
    return absl::StrCat(dir, "/node_modules/node-llama-cpp is missing (scripts/setup-oracles.sh installs it)");
  }
  return "";
}

// llama.cpp on one GGUF file: one llama_speed.mjs run (the model loaded once) measures
// every figure.
Speeds MeasureLlama(const std::string& gguf, const W7Options& o, int prefill) {
  Speeds s;
  s.prefill_tokens = prefill;
  const std::string command = absl::StrCat(
      "node \"", (fs::path(o.llama_oracle_dir) / "llama_speed.mjs").string(), "\" \"", gguf, "\" ", prefill, " ",
      kPrefillThreads, " ", o.decode, " ", absl::StrJoin(kThreadCounts, ","), " 1 ", absl::StrJoin(kSequenceCounts, ","),
      " 2>&1");
  const std::string out = RunCommandOutput(command);
  // Its result is the last line; node-llama-cpp may log before it.
  const size_t start = out.rfind('\n');
  const json j = json::parse(out.substr(start == std::string::npos ? 0 : start + 1), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("decode") || !j["decode"].is_array()) {
    s.error = absl::StrCat("llama_speed.mjs failed: ", out.substr(0, 2000));
    return s;
  }
  s.prefill = j.value("prefill_tok_s", NAN);
  for (const json& d : j["decode"]) {
    s.decode[d.value("sequences", 0)][d.value("threads", 0)] = d.value("decode_tok_s", NAN);
  }
  return s;
}

}  // namespace

void RunW7(const W7Options& o, BenchSession* session) {
  BenchSession& s = *session;
  const std::string id = "W7";
  const std::string missing = OracleMissing(o.llama_oracle_dir);
  json w7 = {{"prefill_tokens", o.prefill}, {"prefill_threads", kPrefillThreads}, {"decode_tokens", o.decode},
             {"decode_prompt", kDecodePrompt}, {"sequences", {1, 8}}, {"threads", {1, 2}},
             {"cache_dir", o.cache_dir}, {"llama_cpp_measured", missing.empty()}, {"cases", json::object()}};
  if (!missing.empty()) w7["llama_cpp_not_measured"] = missing;
  bool ok = true;
  for (const W7Source& source : o.sources) {
    for (const std::string& type : kW7Types) {
      if (InterruptSignal() != 0) break;
      const std::string gguf = W7GgufPath(o.cache_dir, source, type);
      const std::string name = absl::StrCat(source.name, "-", type);
      std::fprintf(stderr, "bench: W7 %s: kvtier\n", name.c_str());
      json record = {{"gguf", gguf}, {"type", type}};
      const Speeds kv = MeasureKvtier(gguf, o, s.time_limit, &record);
      record["kvtier"] = kv.ToJson();
      ok = ok && kv.error.empty();
      // Not measured: why (no oracle, or a signal stopped the run during kvtier's part).
      const std::string not_measured = InterruptSignal() != 0 ? "interrupted" : missing;
      Speeds ll;
      if (not_measured.empty()) {
        std::fprintf(stderr, "bench: W7 %s: llama.cpp\n", name.c_str());
        ll = MeasureLlama(gguf, o, kv.prefill_tokens > 0 ? kv.prefill_tokens : o.prefill);
        record["llama_cpp"] = ll.ToJson();
      } else {
        record["llama_cpp"] = {{"measured", false}, {"reason", not_measured}};
      }
      const std::string why_not = not_measured.empty() ? ll.error : "llama.cpp not measured: " + not_measured;
      // Each figure's baseline and target is llama.cpp's on the same file: target met at >= 1.0x.
      struct Figure {
        std::string key, label;
        double kvtier, llama;
        std::string threads;
      };
      const std::vector<Figure> figures = {
          {"prefill", absl::StrCat("prefill ", kv.prefill_tokens, " (", kPrefillThreads, " thr)"), kv.prefill, ll.prefill,
           absl::StrCat(kPrefillThreads, " threads each")},
          {"decode_1_seq", "decode 1 seq", kv.BestDecode(1), ll.BestDecode(1),
           absl::StrCat("best threads: kvtier ", kv.BestThreads(1), ", llama.cpp ", ll.BestThreads(1))},
          {"decode_8_seqs", "decode 8 seqs", kv.BestDecode(8), ll.BestDecode(8),
           absl::StrCat("best threads: kvtier ", kv.BestThreads(8), ", llama.cpp ", ll.BestThreads(8))}};
      for (const Figure& f : figures) {
        record["ratio_to_llama_cpp"][f.key] = Num(f.kvtier / f.llama);
        std::string note = std::isnan(f.llama) ? why_not : "base: llama.cpp, same GGUF; " + f.threads;
        if (!kv.error.empty()) note = kv.error;
        s.rows.push_back({id, absl::StrCat(name, " ", f.label), "tok/s", f.kvtier, NAN, f.llama, f.llama, true, note});
      }
      w7["cases"][name] = record;
      s.out["workloads"][id] = w7;  // partial results if a later case is interrupted
    }
  }
  w7["ok"] = ok && InterruptSignal() == 0;
  w7["rss_mib"] = ReadProcStatusKib("VmRSS:") / 1024.0;
  w7["peak_rss_mib"] = ReadProcStatusKib("VmHWM:") / 1024.0;
  s.out["workloads"][id] = w7;
  s.rows.push_back({id, "peak RSS", "MiB", w7["peak_rss_mib"].get<double>(), NAN, NAN, NAN, false, ""});
}

}  // namespace kvtier::cli::bench
