// Tokenizer: loading errors name the part; encode/decode on the hand-made fixtures (added
// tokens, templates, byte fallback, skip_special_tokens, parse_special).
#include "tokenizer/tokenizer.h"

#include "gtest/gtest.h"
#include "tokenizer_test_util.h"

namespace kvtier::tokenizer {
namespace {

using nlohmann::json;

std::unique_ptr<Tokenizer> Load(const json& j, std::string_view config = {}) {
  auto t = Tokenizer::FromJson(j.dump(), config);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

void ExpectError(const json& j, absl::StatusCode code, const std::string& needle) {
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), code) << t.status();
  EXPECT_NE(std::string(t.status().message()).find(needle), std::string::npos) << t.status();
}

TEST(TokenizerLoadTest, MalformedFilesAreInvalidArgument) {
  auto not_json = Tokenizer::FromJson("{ not json");
  EXPECT_EQ(not_json.status().code(), absl::StatusCode::kInvalidArgument);
  ExpectError(json::object(), absl::StatusCode::kInvalidArgument, "model");

  json j = testing::ByteLevelTokenizerJson();
  j["added_tokens"][0].erase("id");
  ExpectError(j, absl::StatusCode::kInvalidArgument, "added_tokens[].id");

  j = testing::ByteLevelTokenizerJson();
  j["pre_tokenizer"]["pretokenizers"][0].erase("pattern");
  ExpectError(j, absl::StatusCode::kInvalidArgument, "pre_tokenizer.pattern");

  j = testing::SentencePieceTokenizerJson();
  j["decoder"]["decoders"][3]["start"] = "one";
  ExpectError(j, absl::StatusCode::kInvalidArgument, "decoder.start");

  j = testing::ByteLevelTokenizerJson();
  j["post_processor"]["single"][0]["SpecialToken"]["id"] = "<|nope|>";
  ExpectError(j, absl::StatusCode::kInvalidArgument, "<|nope|>");

  auto bad_config = Tokenizer::FromJson(testing::ByteLevelTokenizerJson().dump(), R"({"eos_token": 7})");
  EXPECT_EQ(bad_config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_config.status().message().find("eos_token"), std::string::npos);
}

TEST(TokenizerLoadTest, UnknownTypesAreUnimplementedNamingTheType) {
  json j = testing::ByteLevelTokenizerJson();
  j["model"]["type"] = "WordPiece";
  ExpectError(j, absl::StatusCode::kUnimplemented, "WordPiece");

  j = testing::ByteLevelTokenizerJson();
  j["normalizer"] = {{"type", "Precompiled"}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "Precompiled");

  j = testing::ByteLevelTokenizerJson();
  j["pre_tokenizer"]["pretokenizers"][1]["type"] = "BertPreTokenizer";
  ExpectError(j, absl::StatusCode::kUnimplemented, "BertPreTokenizer");

  j = testing::ByteLevelTokenizerJson();
  j["decoder"] = {{"type", "WordPiece"}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "decoder type 'WordPiece'");

  j = testing::ByteLevelTokenizerJson();
  j["post_processor"] = {{"type", "BertProcessing"}};
  ExpectError(j, absl::StatusCode::kUnimplemented, "BertProcessing");

  j = testing::ByteLevelTokenizerJson();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext";
  ExpectError(j, absl::StatusCode::kUnimplemented, "MergedWithNext");
}

TEST(TokenizerTest, ByteLevelEncodeDecode) {
  auto t = Load(testing::ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  // " the" and "hello" are merged tokens; the template adds <|bos|>.
  auto ids = t->Encode("hello the");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ((*ids)[0], 1000);
  EXPECT_EQ(*t->IdToToken((*ids)[1]), "hello");
  EXPECT_EQ(*t->IdToToken((*ids)[2]), "\xC4\xA0the");  // Ġthe
  EXPECT_EQ(*t->Decode(*ids), "<|bos|>hello the");
  EXPECT_EQ(*t->Decode(*ids, DecodeOptions{true, std::nullopt}), "hello the");
  EXPECT_EQ(t->Encode("hello", EncodeOptions{false, true})->size(), 1u);

  std::string text = "héllo 🤖 你好\n\t 123456 <|eot|>x";
  auto all = t->Encode(text, EncodeOptions{false, true});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*t->Decode(*all), text);
  EXPECT_EQ(all->back() , 'x');  // byte symbol 'x' has id 0x78
}

TEST(TokenizerTest, SpecialTokensParsedOrNot) {
  auto t = Load(testing::ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  auto parsed = t->Encode("a<|eot|>b", EncodeOptions{false, true});
  EXPECT_EQ(*parsed, (std::vector<int32_t>{'a', 1001, 'b'}));
  auto literal = t->Encode("a<|eot|>b", EncodeOptions{false, false});
  EXPECT_GT(literal->size(), 3u);
  EXPECT_EQ(*t->Decode(*literal), "a<|eot|>b");
  EXPECT_TRUE(t->IsSpecial(1001));
  EXPECT_FALSE(t->IsSpecial(1002));
}

TEST(TokenizerTest, AddedTokenStripsNeighbouringSpaces) {
  auto t = Load(testing::ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  // <tool> has lstrip and rstrip: the spaces around it vanish; it is matched even with
  // parse_special = false because it is not special.
  auto ids = t->Encode("a  <tool>  b", EncodeOptions{false, false});
  EXPECT_EQ(*ids, (std::vector<int32_t>{'a', 1002, 'b'}));
}

TEST(TokenizerTest, SentencePieceEncodeDecode) {
  auto t = Load(testing::SentencePieceTokenizerJson());
  ASSERT_NE(t, nullptr);
  auto ids = t->Encode("hello world");
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ((*ids)[0], 1);
  EXPECT_EQ(*t->IdToToken((*ids)[1]), "\xE2\x96\x81hello");
  EXPECT_EQ(*t->IdToToken((*ids)[2]), "\xE2\x96\x81world");
  EXPECT_EQ(*t->Decode(*ids), "<s> hello world");
  EXPECT_EQ(*t->Decode(*ids, DecodeOptions{true, std::nullopt}), "hello world");

  // é is not in the vocabulary: byte fallback, and decode puts the bytes back together.
  auto fallback = t->Encode("hé", EncodeOptions{false, true});
  EXPECT_EQ(*fallback, (std::vector<int32_t>{*t->TokenToId("\xE2\x96\x81h"), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(*t->Decode(*fallback), "hé");
}

TEST(TokenizerTest, DecodeErrorsAndLossyBytes) {
  auto t = Load(testing::SentencePieceTokenizerJson());
  ASSERT_NE(t, nullptr);
  std::vector<int32_t> bad = {5, 100000};
  EXPECT_EQ(t->Decode(bad).status().code(), absl::StatusCode::kInvalidArgument);
  // A lone continuation byte decodes to U+FFFD.
  std::vector<int32_t> lone = {3 + 0xA9};
  EXPECT_EQ(*t->Decode(lone), "\xEF\xBF\xBD");
  EXPECT_EQ(t->Encode("\xFF").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TokenizerTest, ConfigGivesBosEosAndCleanup) {
  auto t = Load(testing::SentencePieceTokenizerJson(),
                R"({"bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>"},
                    "clean_up_tokenization_spaces": false})");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->stop_ids(), (std::vector<int32_t>{2}));
  EXPECT_FALSE(t->config().clean_up_tokenization_spaces);
}

}  // namespace
}  // namespace kvtier::tokenizer
