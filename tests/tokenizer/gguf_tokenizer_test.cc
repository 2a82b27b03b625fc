// Tests of tokenizers in GGUF: a tokenizer.json converted to tokenizer.* metadata and read
// back encodes the corpus as the tokenizer.json does (byte-level and sentencepiece; lines
// without U+0085/U+FEFF, where JavaScript's \s and llama.cpp's differ); scored
// sentencepiece merges pick the higher score, then the leftmost pair; llama.cpp's rules
// (end-of-generation tokens as control tokens, its \s); the chat template and the
// add-BOS/EOS flags taken from the file; and bad metadata named.
// (tests/gguf compares with llama.cpp itself.)
#include "tokenizer/gguf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "model/gguf_file.h"
#include "model/gguf_writer.h"
#include "tokenizer/byte_tokenizer_writer.h"
#include "tokenizer/split_regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace kvtier::tokenizer {
namespace {

using ::testing::HasSubstr;

// Writes `metadata` as a tensor-less GGUF file and reads its tokenizer.
absl::StatusOr<std::unique_ptr<Tokenizer>> FromMetadata(const GgufMetadata& metadata) {
  static const std::string dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "kvtier_gguf_tok_XXXXXX").string();
    return std::string(::mkdtemp(pattern.data()));
  }();
  static int counter = 0;
  const std::string path = dir + "/t" + std::to_string(++counter) + ".gguf";
  absl::Status written = WriteGgufFile(path, metadata, {});
  if (!written.ok()) return written;
  auto tokenizer = Tokenizer::FromGgufFile(path);
  std::filesystem::remove(path);
  return tokenizer;
}

bool JsAndUnicodeSpacesAgree(const std::string& line) {
  return line.find("\xC2\x85") == std::string::npos && line.find("\xEF\xBB\xBF") == std::string::npos;
}

void ExpectSameEncoding(const nlohmann::json& tokenizer_json, const std::string& config, int64_t vocab) {
  auto reference = Tokenizer::FromJson(tokenizer_json.dump(), config);
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto metadata = GgufTokenizerMetadata(tokenizer_json.dump(), config, vocab);
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  auto gguf = FromMetadata(*metadata);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  int compared = 0;
  for (const std::string& line : testing::ReadCorpus()) {
    if (!JsAndUnicodeSpacesAgree(line)) continue;
    for (bool special : {false, true}) {
      const EncodeOptions options{.add_special_tokens = special, .parse_special = special};
      auto want = (*reference)->Encode(line, options);
      auto got = (*gguf)->Encode(line, options);
      ASSERT_TRUE(want.ok() && got.ok());
      ASSERT_EQ(*got, *want) << line;
    }
    ++compared;
  }
  EXPECT_GT(compared, 2000);
}

TEST(GgufTokenizerTest, ByteLevelRoundTrip) {
  ExpectSameEncoding(testing::ByteLevelTokenizerJson(), "", 1100);
}

TEST(GgufTokenizerTest, SentencePieceRoundTripScoresFromMergeRanks) {
  ExpectSameEncoding(testing::SentencePieceTokenizerJson(), R"({"bos_token": "<s>", "eos_token": "</s>"})", 300);
}

TEST(GgufTokenizerTest, ByteTokenizerMetadataLikeLlamaCppsConverter) {
  auto metadata = GgufTokenizerMetadata(ByteTokenizerJson(), ByteTokenizerConfigJson(), 300);
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  std::map<std::string, GgufValue> keys(metadata->begin(), metadata->end());
  EXPECT_EQ(*keys["tokenizer.ggml.model"].AsString(), "gpt2");
  EXPECT_EQ(*keys["tokenizer.ggml.pre"].AsString(), "gpt-2");
  ASSERT_EQ(keys["tokenizer.ggml.tokens"].size(), 300u);
  EXPECT_EQ(keys["tokenizer.ggml.tokens"].strings()[299], "[PAD299]");
  EXPECT_EQ(keys["tokenizer.ggml.token_type"].ints()[299], static_cast<int64_t>(GgufTokenType::kUnused));
  EXPECT_EQ(keys["tokenizer.ggml.token_type"].ints()[256], static_cast<int64_t>(GgufTokenType::kControl));
  EXPECT_EQ(keys["tokenizer.ggml.token_type"].ints()[65], static_cast<int64_t>(GgufTokenType::kNormal));
  EXPECT_EQ(keys["tokenizer.ggml.bos_token_id"].AsInt(), kByteTokenizerBosId);
  EXPECT_EQ(keys["tokenizer.ggml.add_bos_token"].AsBool(), true);
  EXPECT_EQ(GgufTokenizerMetadata(ByteTokenizerJson(), "", 200).status().code(), absl::StatusCode::kInvalidArgument);
}

// A scored sentencepiece vocabulary by hand.
GgufMetadata Spm(const std::vector<std::pair<std::string, float>>& pieces) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<double> scores = {0, 0, 0};
  std::vector<int64_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.push_back(name);
    scores.push_back(0);
    types.push_back(6);
  }
  for (const auto& [piece, score] : pieces) {
    tokens.push_back(piece);
    scores.push_back(score);
    types.push_back(1);
  }
  return {{"tokenizer.ggml.model", GgufValue::String("llama")},
          {"tokenizer.ggml.tokens", GgufValue::StringArray(tokens)},
          {"tokenizer.ggml.scores", GgufValue::RealArray(GgufValueType::kFloat32, scores)},
          {"tokenizer.ggml.token_type", GgufValue::IntArray(GgufValueType::kInt32, types)}};
}

std::vector<std::string> Pieces(const Tokenizer& t, const std::string& text) {
  std::vector<std::string> out;
  const absl::StatusOr<std::vector<int32_t>> ids = t.Encode(text, {.add_special_tokens = false});
  EXPECT_TRUE(ids.ok()) << ids.status();
  for (int32_t id : ids.value_or(std::vector<int32_t>{})) out.push_back(*t.IdToToken(id));
  return out;
}

TEST(GgufTokenizerTest, ScoredSentencePieceMergesHigherScoreThenLeftmost) {
  const std::string u = "\xE2\x96\x81";  // ▁
  auto a = FromMetadata(Spm({{u, -1}, {"a", -1}, {"b", -1}, {"c", -1}, {"ab", -2}, {"bc", -3}, {u + "a", -4},
                             {u + "ab", -5}}));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Pieces(**a, "abc"), (std::vector<std::string>{u + "ab", "c"}));
  auto b = FromMetadata(Spm({{u, -1}, {"a", -1}, {"b", -1}, {"c", -1}, {"ab", -3}, {"bc", -2}, {u + "a", -4},
                             {u + "ab", -5}}));
  EXPECT_EQ(Pieces(**b, "abc"), (std::vector<std::string>{u + "a", "bc"}));
  // Equal scores: the leftmost pair first.
  auto c = FromMetadata(Spm({{u, -1}, {"a", -1}, {"b", -1}, {"c", -1}, {"ab", -2}, {"bc", -2}}));
  EXPECT_EQ(Pieces(**c, "abc"), (std::vector<std::string>{u, "ab", "c"}));
  // A character no piece covers falls back to its bytes; BOS is added by default.
  EXPECT_EQ(Pieces(**c, "\xC3\xA9"), (std::vector<std::string>{u, "<0xC3>", "<0xA9>"}));
  EXPECT_EQ((*c->get()).Encode("a")->front(), 1);
  EXPECT_EQ((*c)->bos_id(), 1);
  EXPECT_EQ((*c)->eos_id(), 2);
  // No space prefix when the file says so.
  GgufMetadata no_prefix = Spm({{u, -1}, {"a", -1}});
  no_prefix.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false));
  auto d = FromMetadata(no_prefix);
  EXPECT_EQ(Pieces(**d, "a a"), (std::vector<std::string>{"a", u, "a"}));
}

GgufMetadata Gpt2(std::vector<std::string> tokens, std::vector<int64_t> types, const std::string& pre = "gpt-2") {
  return {{"tokenizer.ggml.model", GgufValue::String("gpt2")},
          {"tokenizer.ggml.pre", GgufValue::String(pre)},
          {"tokenizer.ggml.tokens", GgufValue::StringArray(std::move(tokens))},
          {"tokenizer.ggml.token_type", GgufValue::IntArray(GgufValueType::kInt32, std::move(types))},
          {"tokenizer.ggml.merges", GgufValue::StringArray({"a b"})}};
}

TEST(GgufTokenizerTest, LlamaCppsRules) {
  // "<|im_end|>" typed normal is a control token, as llama.cpp makes it, and a stop.
  auto t = FromMetadata(Gpt2({"a", "b", "ab", "<|im_end|>", "\xC4\xA0"}, {1, 1, 1, 1, 1}));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Encode("ab<|im_end|>", {.add_special_tokens = false}), (std::vector<int32_t>{2, 3}));
  EXPECT_TRUE((*t)->IsSpecial(3));
  EXPECT_THAT((*t)->stop_ids(), ::testing::Contains(3));
  // A user-defined token is found even when special tokens are not parsed.
  auto u = FromMetadata(Gpt2({"a", "b", "ab", "<tool>"}, {1, 1, 1, 4}));
  EXPECT_EQ(*(*u)->Encode("a<tool>", {.add_special_tokens = false, .parse_special = false}),
            (std::vector<int32_t>{0, 3}));
}

TEST(GgufTokenizerTest, UnicodeWhiteSpaceSplitsAsLlamaCpp) {
  // U+0085 is White_Space (llama.cpp) but not JavaScript's \s; U+FEFF the other way round.
  auto split = SplitRegex::Create(kGpt2Pattern, RegexSpaces::kUnicode);
  auto js = SplitRegex::Create(kGpt2Pattern, RegexSpaces::kJavaScript);
  ASSERT_TRUE(split.ok() && js.ok());
  std::vector<SplitRegex::Match> a, b;
  (*split)->FindAll("x\xC2\x85\xC2\x85y", &a);
  (*js)->FindAll("x\xC2\x85\xC2\x85y", &b);
  // Spaces: "x", the run less its last (\s+(?!\S)), the last (\s+), "y". Not: "x", the two
  // as punctuation, "y".
  EXPECT_EQ(a, (std::vector<SplitRegex::Match>{{0, 1}, {1, 3}, {3, 5}, {5, 6}}));
  EXPECT_EQ(b, (std::vector<SplitRegex::Match>{{0, 1}, {1, 5}, {5, 6}}));
}

// Replaces (or adds) `key` in metadata.
void Set(GgufMetadata* metadata, const std::string& key, GgufValue value) {
  for (auto& [k, v] : *metadata) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata->emplace_back(key, std::move(value));
}

TEST(GgufTokenizerTest, ChatTemplateAndSpecialTokenFlagsComeFromTheFile) {
  auto metadata = GgufTokenizerMetadata(ByteTokenizerJson(), ByteTokenizerConfigJson(), 300);
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  auto plain = FromMetadata(*metadata);
  ASSERT_TRUE(plain.ok()) << plain.status();
  // No template and no marker tokens: a base model, chatted with in ChatML (its markers
  // then plain text), as a checkpoint directory without them (chat_template.h).
  EXPECT_EQ((*plain)->chat_format(), ChatFormat::kChatMl);
  EXPECT_EQ(*(*plain)->Encode("a"), (std::vector<int32_t>{kByteTokenizerBosId, 'a'}));

  // tokenizer.chat_template picks the format; add_bos_token / add_eos_token say what
  // Encode adds.
  Set(&*metadata, "tokenizer.chat_template",
      GgufValue::String("{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + "
                        "m['content'] + '<|eot_id|>' }}{% endfor %}"));
  Set(&*metadata, "tokenizer.ggml.add_bos_token", GgufValue::Bool(false));
  Set(&*metadata, "tokenizer.ggml.add_eos_token", GgufValue::Bool(true));
  auto chat = FromMetadata(*metadata);
  ASSERT_TRUE(chat.ok()) << chat.status();
  const Tokenizer& t = **chat;
  EXPECT_EQ(t.chat_format(), ChatFormat::kLlama3);
  const std::vector<ChatMessage> messages = {{"user", "hi"}};
  auto text = t.ApplyChatTemplate(messages);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(*t.Encode("a"), (std::vector<int32_t>{'a', kByteTokenizerEosId}));
  // The BOS text of the chat prompt is the BOS token, found as a special token.
  EXPECT_EQ(t.Encode(*text, {.add_special_tokens = false})->front(), kByteTokenizerBosId);
  EXPECT_EQ(t.bos_id(), kByteTokenizerBosId);
  EXPECT_EQ(t.eos_id(), kByteTokenizerEosId);
  EXPECT_THAT(t.stop_ids(), ::testing::Contains(kByteTokenizerEosId));
}

TEST(GgufTokenizerTest, BadMetadataIsNamed) {
  auto missing = FromMetadata({{"general.architecture", GgufValue::String("llama")}});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("no tokenizer"));
  auto bert = FromMetadata({{"tokenizer.ggml.model", GgufValue::String("bert")}});
  EXPECT_EQ(bert.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(bert.status().message(), HasSubstr("'bert'"));
  auto falcon = FromMetadata(Gpt2({"a", "b", "ab"}, {1, 1, 1}, "falcon"));
  EXPECT_EQ(falcon.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(falcon.status().message(), HasSubstr("'falcon'"));
  auto no_tokens = FromMetadata({{"tokenizer.ggml.model", GgufValue::String("gpt2")},
                                 {"tokenizer.ggml.pre", GgufValue::String("gpt-2")}});
  EXPECT_EQ(no_tokens.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_tokens.status().message(), HasSubstr("tokenizer.ggml.tokens"));
  GgufMetadata short_types = Gpt2({"a", "b", "ab"}, {1, 1});
  auto types = FromMetadata(short_types);
  EXPECT_EQ(types.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(types.status().message(), HasSubstr("tokenizer.ggml.token_type"));
  auto wordpiece = GgufTokenizerMetadata(R"({"model": {"type": "WordPiece", "vocab": {}}})", "", 10);
  EXPECT_EQ(wordpiece.status().code(), absl::StatusCode::kUnimplemented);
  auto whitespace = GgufTokenizerMetadata(
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Whitespace"}})", "", 10);
  EXPECT_EQ(whitespace.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(whitespace.status().message(), HasSubstr("pre-tokenizer"));
}

}  // namespace
}  // namespace kvtier::tokenizer
