// The structured-output benchmarks of `kvtier bench` (bench_grammar.h).
#include "bench_grammar.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <cmath>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "grammar/compiled_grammar.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/tokenizer_vocabulary.h"
#include "load_tokenizer.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace kvtier::cli::bench {
namespace {

namespace fs = std::filesystem;

double Micros(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<fs::path> FilesIn(const std::string& dir, const std::string& extension) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == extension) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

json Percentiles(std::vector<double> v) {
  if (v.empty()) return json{{"count", 0}};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
  double sum = 0;
  for (double x : v) sum += x;
  return json{{"count", v.size()}, {"p50", at(0.5)}, {"p90", at(0.9)}, {"p99", at(0.99)}, {"max", v.back()},
              {"mean", sum / static_cast<double>(v.size())}};
}

}  // namespace

int RunGrammarMaskBench(const GrammarMaskOptions& options) {
  const std::vector<std::string>& tokenizers = options.tokenizers;
  if (tokenizers.empty()) {
    std::fprintf(stderr, "kvtier bench --grammar-mask: give --tokenizer PATH (tokenizer.json, its directory or a .gguf file)\n");
    return 2;
  }
  const int64_t* steps = &options.steps;
  const std::string& schema_dir = options.schemas;
  const std::string& grammar_dir = options.grammars;
  struct Source {
    std::string name;
    std::string text;
    bool gbnf;
  };
  std::vector<Source> sources;
  for (const fs::path& p : FilesIn(schema_dir, ".json")) sources.push_back({p.filename().string(), ReadFile(p), false});
  for (const fs::path& p : FilesIn(grammar_dir, ".gbnf")) sources.push_back({p.filename().string(), ReadFile(p), true});
  if (sources.empty()) {
    std::fprintf(stderr, "kvtier bench: no *.json in %s nor *.gbnf in %s\n", schema_dir.c_str(), grammar_dir.c_str());
    return 2;
  }
  json out;
  out["grammar_mask"] = json::array();
  std::printf("\n%-10s %7s %7s %10s %10s %10s %10s %10s %10s %10s\n", "tokenizer", "vocab", "sources", "compile p50",
              "p99 ms", "mask p50", "p99 us", "max us", "accept p50", "p99 us");
  for (const std::string& path : tokenizers) {
    auto tok = LoadTokenizerFlag(path);
    if (!tok.ok()) {
      std::fprintf(stderr, "kvtier bench: tokenizer %s: %s\n", path.c_str(), std::string(tok.status().message()).c_str());
      return 1;
    }
    const auto v0 = Clock::now();
    auto vocab = grammar::VocabularyFromTokenizer(**tok, (*tok)->vocab_size());
    const double vocab_ms = Micros(v0, Clock::now()) / 1000;
    std::vector<int32_t> ends = (*tok)->stop_ids();
    std::vector<double> compile_ms, mask_us, accept_us, positions;
    json refused = json::array(), per_source = json::array();
    int64_t index_bytes = 0, terminated = 0;
    std::vector<uint32_t> words(static_cast<size_t>(vocab->num_words()));
    for (size_t s = 0; s < sources.size(); ++s) {
      const Source& src = sources[s];
      auto g = src.gbnf ? grammar::ParseGbnf(src.text) : grammar::JsonSchemaToGrammar(src.text);
      if (!g.ok()) {
        refused.push_back({{"source", src.name}, {"error", std::string(g.status().message())}});
        continue;
      }
      const auto c0 = Clock::now();
      auto compiled = grammar::CompiledGrammar::Compile(*g, vocab);
      const double ms = Micros(c0, Clock::now()) / 1000;
      if (!compiled.ok()) {
        refused.push_back({{"source", src.name}, {"error", std::string(compiled.status().message())}});
        continue;
      }
      compile_ms.push_back(ms);
      index_bytes += static_cast<int64_t>((*compiled)->index().memory_bytes());
      std::mt19937_64 rng(s + 1);
      auto matcher = std::make_unique<grammar::Matcher>(*compiled, ends);
      std::vector<int32_t> allowed;
      double source_mask_max = 0;
      for (int64_t step = 0; step < *steps; ++step) {
        const auto m0 = Clock::now();
        matcher->FillMask(words);
        const double us = Micros(m0, Clock::now());
        mask_us.push_back(us);
        source_mask_max = std::max(source_mask_max, us);
        positions.push_back(static_cast<double>(matcher->num_positions()));
        allowed.clear();
        for (int32_t id = 0; id < vocab->size(); ++id) {
          if ((words[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        const int32_t pick = allowed[rng() % allowed.size()];
        const auto a0 = Clock::now();
        const bool ok = matcher->AcceptToken(pick);
        accept_us.push_back(Micros(a0, Clock::now()));
        if (!ok) {
          std::fprintf(stderr, "kvtier bench: %s: the matcher refused token %d it allowed\n", src.name.c_str(), pick);
          return 1;
        }
        if (matcher->terminated()) {
          ++terminated;
          matcher = std::make_unique<grammar::Matcher>(*compiled, ends);
        }
      }
      per_source.push_back({{"source", src.name}, {"compile_ms", ms}, {"mask_us_max", source_mask_max},
                            {"index_bytes", (*compiled)->index().memory_bytes()}});
    }
    json m = Percentiles(mask_us), c = Percentiles(compile_ms), a = Percentiles(accept_us);
    json r = {{"tokenizer", path},
              {"vocab_size", vocab->size()},
              {"text_tokens", vocab->num_text_tokens()},
              {"vocabulary_build_ms", vocab_ms},
              {"sources", sources.size()},
              {"compiled", compile_ms.size()},
              {"refused", refused},
              {"steps_per_source", *steps},
              {"walks_completed", terminated},
              {"compile_ms", c},
              {"mask_us", m},
              {"accept_us", a},
              {"parse_positions", Percentiles(positions)},
              {"index_bytes_total", index_bytes},
              {"per_source", per_source}};
    out["grammar_mask"].push_back(r);
    const std::string name = fs::path(path).parent_path().filename().string().empty()
                                 ? path
                                 : (fs::is_directory(path) ? fs::path(path).filename().string()
                                                           : fs::path(path).parent_path().filename().string());
    std::printf("%-10.10s %7d %7zu %10.2f %10.2f %10.1f %10.1f %10.1f %10.2f %10.2f\n", name.c_str(), vocab->size(),
                compile_ms.size(), c.value("p50", 0.0), c.value("p99", 0.0), m.value("p50", 0.0), m.value("p99", 0.0),
                m.value("max", 0.0), a.value("p50", 0.0), a.value("p99", 0.0));
    if (!refused.empty()) std::printf("  refused %zu: first: %s\n", refused.size(), refused[0].dump().c_str());
  }
  if (!options.json.empty()) {
    std::ofstream f(options.json);
    f << out.dump(2) << "\n";
    std::fprintf(stderr, "bench: wrote %s\n", options.json.c_str());
  }
  return 0;
}

void RunW2WithSchema(kvt_model* model, WorkloadSpec w2, double unconstrained_decode, double decode_limit,
                     const std::string& schema_path, BenchSession* session) {
  BenchSession& s = *session;
  std::ifstream in(schema_path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  w2.id = "W2j";
  w2.json_schema = text.str();
  RunResult r = RunWorkload(model, w2, s.time_limit, s.sampler);
  json j = s.Record("W2j", w2, r);
  const double decode = r.ok ? r.decode_tokens / r.decode_s : NAN;
  j["json_schema_file"] = schema_path;
  j["decode_tok_s"] = decode;
  j["grammar_finished_sequences"] = r.grammar_finished;
  j["ratio_to_unconstrained_decode"] = decode / unconstrained_decode;
  if (!r.stats.is_null() && r.stats.contains("grammar")) j["grammar"] = r.stats["grammar"];
  s.out["workloads"]["W2j"] = j;
  const double mask_s = JsonNum(r.stats, {"grammar", "mask_compute_seconds"});
  const double wait_s = JsonNum(r.stats, {"grammar", "mask_wait_seconds"});
  const double masks = JsonNum(r.stats, {"grammar", "masks"});
  s.rows.push_back({"W2j", "decode tok/s, JSON schema on all 64", "tok/s", decode, decode_limit, NAN, NAN, true,
                    r.error.empty() ? "completed " + Fmt(static_cast<double>(r.grammar_finished), 0) + " of 64"
                                    : r.error});
  s.rows.push_back({"W2j", "constrained / unconstrained decode", "", decode / unconstrained_decode, 1.0, NAN, 0.85, true,
                    "mask " + Fmt(1e6 * mask_s / masks, 1) + " us/row on the CPU, " + Fmt(1e3 * wait_s, 1) +
                        " ms waited for in all"});
}

absl::Status EnsureModelTokenizer(const std::string& model_dir, const std::string& tokenizer) {
  std::error_code regular_ec;
  if (fs::is_regular_file(model_dir, regular_ec)) {  // a GGUF file: its own tokenizer or none
    absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> own = tokenizer::Tokenizer::FromGgufFile(model_dir);
    if (own.ok()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("--json-schema needs the model's tokenizer, and a tokenizer "
                                                      "cannot be copied into a GGUF file: ", own.status().message()));
  }
  if (fs::exists(fs::path(model_dir) / "tokenizer.json")) return absl::OkStatus();
  const fs::path from = fs::is_directory(tokenizer) ? fs::path(tokenizer) / "tokenizer.json" : fs::path(tokenizer);
  std::error_code ec;
  fs::copy_file(from, fs::path(model_dir) / "tokenizer.json", ec);
  if (!ec && fs::exists(from.parent_path() / "tokenizer_config.json")) {
    fs::copy_file(from.parent_path() / "tokenizer_config.json", fs::path(model_dir) / "tokenizer_config.json", ec);
  }
  if (ec) return absl::InternalError("copying " + from.string() + " into " + model_dir + ": " + ec.message());
  return absl::OkStatus();
}

}  // namespace kvtier::cli::bench
