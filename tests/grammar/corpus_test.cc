// The structured-output proof: every JSON schema of tests/grammar/schemas (tool-definition
// shapes) and the GBNF grammars of tests/grammar/grammars drive sampled generation
// (temperature 1) from a random-weight model whose tokenizer has multi-byte tokens; each
// output that finished complete is then checked by an independent validator
// (validate_outputs.py: python3-jsonschema for the schemas, Python's json/ast/re for the
// grammars). 0 failures over >= 5,000 generations, and most of them finish within the
// token limit. Skips when python3-jsonschema is not installed.
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/engine.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/test_model.h"
#include "tokenizer/tokenizer.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

// Sanitizer builds run the same check on every fourth schema, once each (the proof's
// numbers come from the normal build); KVTIER_GRAMMAR_CORPUS_SEEDS overrides the seeds per
// schema.
constexpr int kDefaultSeedsPerSchema = grammar::testing::kSanitized ? 1 : 22;
constexpr int kSchemaStride = grammar::testing::kSanitized ? 4 : 1;
constexpr int kMaxNewTokens = 384;
constexpr int kInFlight = 256;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* FinishName(FinishReason r) {
  switch (r) {
    case FinishReason::kGrammar: return "grammar";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

TEST(GrammarCorpusTest, EveryFinishedOutputValidates) {
  if (std::system("python3 -c 'import jsonschema' > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3-jsonschema is not installed (scripts/install-deps.sh installs it)";
  }
  const fs::path root = fs::path(KVTIER_SOURCE_DIR) / "tests/grammar";
  struct Job {
    std::string source, kind;
    std::shared_ptr<const grammar::Grammar> grammar;
    int seed;
  };
  int seeds_per_schema = kDefaultSeedsPerSchema;
  if (const char* env = std::getenv("KVTIER_GRAMMAR_CORPUS_SEEDS")) seeds_per_schema = std::max(1, std::atoi(env));
  const int seeds_per_grammar = std::max(1, seeds_per_schema * 100 / 22);
  std::deque<Job> jobs;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(root / "schemas")) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  for (const auto& e : fs::directory_iterator(root / "grammars")) {
    if (e.path().extension() == ".gbnf") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  int num_schemas = 0, index = 0;
  for (const fs::path& p : files) {
    const bool gbnf = p.extension() == ".gbnf";
    if (!gbnf && index++ % kSchemaStride != 0) {
      ++num_schemas;  // compiled and counted, not sampled
      auto g = grammar::JsonSchemaToGrammar(ReadFile(p));
      ASSERT_TRUE(g.ok()) << p << ": " << g.status();
      continue;
    }
    auto g = gbnf ? grammar::ParseGbnf(ReadFile(p)) : grammar::JsonSchemaToGrammar(ReadFile(p));
    ASSERT_TRUE(g.ok()) << p << ": " << g.status();
    auto shared = std::make_shared<const grammar::Grammar>(*std::move(g));
    num_schemas += gbnf ? 0 : 1;
    for (int s = 0; s < (gbnf ? seeds_per_grammar : seeds_per_schema); ++s) {
      jobs.push_back({p.filename().string(), gbnf ? "gbnf" : "schema", shared, s});
    }
  }
  ASSERT_GE(num_schemas, 200);
  const size_t num_generations = jobs.size();

  const std::string dir = grammar::testing::FragmentModelDir();
  auto tok = tokenizer::Tokenizer::FromDirectory(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EngineOptions options;
  options.backend = "cpu";
  options.num_threads = 2;
  options.block_tokens = 16;
  options.max_running = kInFlight;
  options.max_tokens_per_step = 2048;
  options.gpu_kv_bytes = 256 << 20;
  auto engine = Engine::Create(testing::OpenCheckpoint(dir), options, std::shared_ptr<const tokenizer::Tokenizer>(std::move(*tok)));
  ASSERT_TRUE(engine.ok()) << engine.status();

  const fs::path out_dir = fs::path(KVTIER_BINARY_DIR) / "grammar_corpus";
  fs::create_directories(out_dir);
  const fs::path out_path = out_dir / "outputs.jsonl";
  std::ofstream out(out_path, std::ios::trunc);
  std::map<SequenceId, Job> running;
  std::vector<StepEvent> events;
  int64_t steps = 0;
  while (!jobs.empty() || !running.empty()) {
    while (!jobs.empty() && static_cast<int>(running.size()) < kInFlight) {
      Job job = std::move(jobs.front());
      jobs.pop_front();
      std::mt19937 rng(static_cast<uint32_t>(job.seed * 7919 + job.source.size()));
      std::vector<int32_t> prompt = {256};
      for (int i = 0; i < 8; ++i) prompt.push_back(static_cast<int32_t>(rng() % 256));
      SamplingParams params;
      params.temperature = 1.0f;
      params.seed = static_cast<uint64_t>(job.seed) * 1000003u + std::hash<std::string>()(job.source) % 1000;
      params.max_new_tokens = kMaxNewTokens;
      params.grammar = job.grammar;
      absl::StatusOr<SequenceId> id = (*engine)->Add(std::move(prompt), params);
      ASSERT_TRUE(id.ok()) << job.source << ": " << id.status();
      running.emplace(*id, std::move(job));
    }
    events.clear();
    ASSERT_TRUE((*engine)->Step(&events).ok());
    ++steps;
    for (const StepEvent& e : events) {
      if (e.finish == FinishReason::kNone) continue;
      auto it = running.find(e.sequence);
      ASSERT_NE(it, running.end());
      nlohmann::json rec = {{"source", it->second.source}, {"kind", it->second.kind}, {"seed", it->second.seed}};
      ASSERT_TRUE((*engine)
                      ->ReadSequence(e.sequence,
                                     [&](const Sequence& seq) {
                                       rec["finish"] = FinishName(seq.finish);
                                       rec["tokens"] = seq.num_generated();
                                       rec["text"] = seq.text;
                                       if (!seq.error.empty()) rec["error"] = seq.error;
                                     })
                      .ok());
      std::string line;
      try {
        line = rec.dump();
      } catch (const nlohmann::json::exception&) {
        rec["text"] = nullptr;
        rec["invalid_utf8"] = true;
        line = rec.dump();
      }
      out << line << "\n";
      ASSERT_TRUE((*engine)->Release(e.sequence).ok());
      running.erase(it);
    }
  }
  out.close();
  const nlohmann::json stats = (*engine)->Stats();
  std::printf("corpus: %lld steps, %s generated tokens, grammar stats %s\n", static_cast<long long>(steps),
              stats["generated_tokens"].dump().c_str(), stats["grammar"].dump().c_str());
  const std::string command = "python3 " + (root / "validate_outputs.py").string() + " " + out_path.string() +
                              " --schemas " + (root / "schemas").string() +
                              " --min-generations " + std::to_string(std::min<size_t>(num_generations, 5000)) +
                              " --min-finished-share 0.8";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

}  // namespace
}  // namespace kvtier
