// StreamDecoder: pieces are whole UTF-8 characters and concatenate to the full decode, on
// byte-level (one byte per token for emoji/CJK) and sentencepiece (byte fallback, stripped
// leading space) fixtures.
#include "tokenizer/stream_decoder.h"

#include "gtest/gtest.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace kvtier::tokenizer {
namespace {

std::vector<std::string> Stream(const Tokenizer& t, const std::vector<int32_t>& ids, DecodeOptions options,
                                std::vector<int32_t> context = {}) {
  StreamDecoder decoder(&t, options, context);
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    auto piece = decoder.Add(id);
    EXPECT_TRUE(piece.ok()) << piece.status();
    pieces.push_back(*piece);
  }
  pieces.push_back(*decoder.Flush());
  return pieces;
}

std::string Join(const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += p;
  return out;
}

class StreamDecoderTest : public ::testing::TestWithParam<bool> {};

TEST_P(StreamDecoderTest, ByteLevelPiecesAreWholeCharacters) {
  auto t = Tokenizer::FromJson(testing::ByteLevelTokenizerJson().dump());
  ASSERT_TRUE(t.ok());
  // Clean-up (on by default) rewrites " ' s", " ." and " n't" across token boundaries.
  std::string text = "<|bos|>hello 👨‍👩‍👧 你好 the 日本語 <|eot|>🤖! it ' s ok . yes , isn 't  ' m  ?";
  auto ids = (*t)->Encode(text, EncodeOptions{false, true});
  ASSERT_TRUE(ids.ok());
  DecodeOptions options{GetParam(), std::nullopt};
  std::vector<std::string> pieces = Stream(**t, *ids, options);
  int non_empty = 0;
  for (const std::string& piece : pieces) {
    EXPECT_TRUE(IsValidUtf8(piece)) << "split character in piece";
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos);
    non_empty += !piece.empty();
  }
  EXPECT_GT(non_empty, 10);
  EXPECT_EQ(Join(pieces), *(*t)->Decode(*ids, options));
}

TEST_P(StreamDecoderTest, SentencePieceKeepsSpacesAndBytes) {
  auto t = Tokenizer::FromJson(testing::SentencePieceTokenizerJson().dump());
  ASSERT_TRUE(t.ok());
  std::string text = "hello world 🤖 hello é</s> world";
  auto ids = (*t)->Encode(text);
  ASSERT_TRUE(ids.ok());
  DecodeOptions options{GetParam(), std::nullopt};
  std::vector<std::string> pieces = Stream(**t, *ids, options);
  for (const std::string& piece : pieces) EXPECT_TRUE(IsValidUtf8(piece));
  EXPECT_EQ(Join(pieces), *(*t)->Decode(*ids, options));
}

INSTANTIATE_TEST_SUITE_P(SkipSpecial, StreamDecoderTest, ::testing::Bool());

TEST(StreamDecoderContextTest, ContextKeepsTheLeadingSpace) {
  auto t = Tokenizer::FromJson(testing::SentencePieceTokenizerJson().dump());
  ASSERT_TRUE(t.ok());
  auto prompt = (*t)->Encode("hello");
  auto reply = (*t)->Encode(" world hello", EncodeOptions{false, true});
  ASSERT_TRUE(prompt.ok() && reply.ok());
  // Alone the first piece loses its space (as Decode does); after a prompt it keeps it.
  EXPECT_EQ(Join(Stream(**t, *reply, {})), *(*t)->Decode(*reply));
  EXPECT_EQ(Join(Stream(**t, *reply, {}, *prompt)), "  world hello");
}

TEST(StreamDecoderContextTest, IncompleteTailIsFlushedAsReplacement) {
  auto t = Tokenizer::FromJson(testing::SentencePieceTokenizerJson().dump());
  ASSERT_TRUE(t.ok());
  StreamDecoder decoder(t->get(), {});
  EXPECT_EQ(*decoder.Add(*(*t)->TokenToId("\xE2\x96\x81h")), "h");
  EXPECT_EQ(*decoder.Add(3 + 0xE4), "");  // first byte of a 3-byte character: held
  EXPECT_EQ(*decoder.Add(3 + 0xBD), "");
  EXPECT_EQ(*decoder.Flush(), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace kvtier::tokenizer
