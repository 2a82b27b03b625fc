// BpeModel: merge order, merge formats, byte fallback, unk fusing, ignore_merges, and
// errors naming the field.
#include "tokenizer/bpe_model.h"

#include "gtest/gtest.h"

namespace kvtier::tokenizer {
namespace {

using nlohmann::json;

std::vector<int32_t> EncodeWord(const BpeModel& model, std::string_view word) {
  std::vector<int32_t> ids;
  absl::Status s = model.EncodeWord(word, &ids);
  EXPECT_TRUE(s.ok()) << s;
  return ids;
}

json Model(json vocab, json merges) {
  return json{{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
}

TEST(BpeModelTest, LowestRankMergesFirst) {
  // "abc": a+b has rank 1, b+c rank 0 -> "a" "bc".
  auto model = BpeModel::FromJson(Model({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}},
                                        {"b c", "a b"}));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(EncodeWord(**model, "abc"), (std::vector<int32_t>{0, 4}));
}

TEST(BpeModelTest, EqualRanksMergeLeftmostFirst) {
  // "aaa" with only "a a": the left pair merges -> "aa" "a".
  auto model = BpeModel::FromJson(Model({{"a", 0}, {"aa", 1}}, {"a a"}));
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(EncodeWord(**model, "aaa"), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(EncodeWord(**model, "aaaa"), (std::vector<int32_t>{1, 1}));
}

TEST(BpeModelTest, PairAndStringMergesAreTheSame) {
  json vocab = {{"x", 0}, {"y", 1}, {"xy", 2}, {"xyx", 3}};
  auto a = BpeModel::FromJson(Model(vocab, {"x y", "xy x"}));
  auto b = BpeModel::FromJson(Model(vocab, json::array({json::array({"x", "y"}), json::array({"xy", "x"})})));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(EncodeWord(**a, "xyxy"), EncodeWord(**b, "xyxy"));
  EXPECT_EQ(EncodeWord(**a, "xyxy"), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(EncodeWord(**a, "xyx"), (std::vector<int32_t>{3}));
}

TEST(BpeModelTest, ByteFallbackAndUnk) {
  json vocab = {{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  json config = Model(vocab, json::array());
  config["byte_fallback"] = true;
  config["unk_token"] = "<unk>";
  config["fuse_unk"] = true;
  auto model = BpeModel::FromJson(config);
  ASSERT_TRUE(model.ok());
  // é = C3 A9 falls back to bytes; ü (C3 BC) lacks <0xBC> and becomes unk.
  EXPECT_EQ(EncodeWord(**model, "aé"), (std::vector<int32_t>{1, 2, 3}));
  std::vector<int32_t> ids = EncodeWord(**model, "üüa");
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 0, 1}));
  (*model)->FuseUnk(&ids, 0);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1}));
}

TEST(BpeModelTest, NoUnkIsAnError) {
  auto model = BpeModel::FromJson(Model({{"a", 0}}, json::array()));
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> ids;
  EXPECT_EQ((*model)->EncodeWord("b", &ids).code(), absl::StatusCode::kInvalidArgument);
}

TEST(BpeModelTest, IgnoreMergesTakesWholeWords) {
  // Merges alone would give "ab" "c"; with ignore_merges "abc" is taken as it is.
  json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}};
  json config = Model(vocab, {"a b"});
  auto plain = BpeModel::FromJson(config);
  config["ignore_merges"] = true;
  auto ignoring = BpeModel::FromJson(config);
  ASSERT_TRUE(plain.ok() && ignoring.ok());
  EXPECT_EQ(EncodeWord(**plain, "abc"), (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(EncodeWord(**ignoring, "abc"), (std::vector<int32_t>{4}));
}

TEST(BpeModelTest, CacheGivesTheSameAnswer) {
  auto model = BpeModel::FromJson(Model({{"a", 0}, {"aa", 1}}, {"a a"}));
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(EncodeWord(**model, "aaaaa"), EncodeWord(**model, "aaaaa"));
}

TEST(BpeModelTest, ErrorsNameTheField) {
  auto wrong_type = BpeModel::FromJson(json{{"type", "Unigram"}, {"vocab", json::array()}});
  EXPECT_EQ(wrong_type.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(wrong_type.status().message().find("Unigram"), std::string::npos);

  auto bad_merge = BpeModel::FromJson(Model({{"a", 0}}, {"nospace"}));
  EXPECT_EQ(bad_merge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_merge.status().message().find("model.merges"), std::string::npos);

  auto bad_vocab = BpeModel::FromJson(Model({{"a", "zero"}}, json::array()));
  EXPECT_EQ(bad_vocab.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_vocab.status().message().find("model.vocab"), std::string::npos);

  auto no_merges = BpeModel::FromJson(json{{"type", "BPE"}, {"vocab", json::object()}});
  EXPECT_EQ(no_merges.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_merges.status().message().find("model.merges"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::tokenizer
