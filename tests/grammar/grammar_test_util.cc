// Test vocabulary and the Earley oracle (grammar_test_util.h).
#include "grammar_test_util.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "grammar/utf8.h"
#include "model/random_checkpoint.h"
#include "nlohmann/json.hpp"
#include "testing/test_model.h"
#include "tokenizer/byte_level.h"

namespace kvtier::grammar::testing {

namespace {

const char* const kFragments[] = {
    "{", "}", "[", "]", "\"", ":", ",", " ", "\n", "  ", "\t", "{\"", "\":", "\",", "\"}", "},", "],", "\": \"",
    "\"]", "\\", "\\\"", "\\n", "\\u00", "true", "false", "null", "0", "1", "12", "-", ".", "5", "e", "E", "+",
    "name", "id", "type", "value", "x", "abc", "Hello", " world", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
    "\xC3", "\xA9", "\xE2\x82", "\xF0\x9F", "a", "z", "(", ")", "*", "/", "=", "- ", "item", "\n- ", "\r", "_",
    "9", "00", "T", "Z", "@", "celsius", "2024-", ":00"};
constexpr size_t kNumFragments = sizeof(kFragments) / sizeof(kFragments[0]);

std::string RandomFragmentToken(std::mt19937_64& rng) {
  std::string t;
  const int parts = 1 + static_cast<int>(rng() % 3);
  for (int p = 0; p < parts; ++p) t += kFragments[rng() % kNumFragments];
  return t;
}

}  // namespace

std::string FragmentTokenizerJson(int32_t vocab_size, uint64_t seed) {
  nlohmann::json vocab = nlohmann::json::object();
  std::set<std::string> seen;
  auto add = [&](const std::string& bytes, int32_t id) {
    std::string symbol;
    kvtier::tokenizer::ByteLevelTable::Get().Encode(bytes, &symbol);
    vocab[symbol] = id;
    seen.insert(bytes);
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)), b);
  std::mt19937_64 rng(seed);
  for (int32_t id = 258; id < vocab_size;) {
    const std::string t = RandomFragmentToken(rng);
    if (seen.count(t)) continue;
    add(t, id++);
  }
  auto special = [](int32_t id, const char* content) {
    return nlohmann::json{{"id", id},        {"content", content}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", {special(256, "<|begin_of_text|>"), special(257, "<|end_of_text|>")}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
        {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
  };
  return j.dump();
}

std::string FragmentModelDir(uint64_t seed) {
  static std::map<uint64_t, std::string> written;
  auto it = written.find(seed);
  if (it != written.end()) return it->second;
  auto spec = RandomCheckpointPreset("tiny-llama");
  EXPECT_TRUE(spec.ok());
  spec->seed = seed;
  spec->vocab = 512;
  spec->layers = 1;
  spec->bos_token_id = 256;
  spec->eos_token_ids = {257};
  const std::string dir = kvtier::testing::WriteTestModel("fragment-llama1-" + std::to_string(seed), *spec);
  std::ofstream(std::filesystem::path(dir) / "tokenizer.json") << FragmentTokenizerJson(512, seed);
  std::ofstream(std::filesystem::path(dir) / "tokenizer_config.json")
      << R"({"bos_token":"<|begin_of_text|>","eos_token":"<|end_of_text|>","clean_up_tokenization_spaces":false})";
  written[seed] = dir;
  return dir;
}

std::shared_ptr<const Vocabulary> TestVocabulary(int extra, uint64_t seed) {
  std::vector<std::optional<std::string>> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  bytes.push_back(std::nullopt);  // kTestEos
  std::mt19937_64 rng(seed);
  for (int i = 0; i < extra; ++i) bytes.push_back(RandomFragmentToken(rng));
  for (int i = 0; i < 3; ++i) bytes.push_back(std::nullopt);  // ids past the tokenizer
  return Vocabulary::Create(std::move(bytes));
}

EarleyOracle::EarleyOracle(const Grammar& grammar) {
  const int32_t num_rules = static_cast<int32_t>(grammar.rules().size());
  by_lhs_.resize(static_cast<size_t>(num_rules));
  start_ = NewNonterminal();
  productions_.push_back({start_, {Symbol{false, 0, 0, grammar.root()}}});
  by_lhs_[static_cast<size_t>(start_)].push_back(0);
  for (int32_t r = 0; r < num_rules; ++r) {
    std::vector<Symbol> rhs = Lower(grammar.rules()[static_cast<size_t>(r)].body);
    by_lhs_[static_cast<size_t>(r)].push_back(static_cast<int32_t>(productions_.size()));
    productions_.push_back({r, std::move(rhs)});
  }
  Reset();
}

int32_t EarleyOracle::NewNonterminal() {
  by_lhs_.emplace_back();
  return static_cast<int32_t>(by_lhs_.size() - 1);
}

std::vector<EarleyOracle::Symbol> EarleyOracle::Lower(const Expr& e) {
  auto add = [&](int32_t lhs, std::vector<Symbol> rhs) {
    by_lhs_[static_cast<size_t>(lhs)].push_back(static_cast<int32_t>(productions_.size()));
    productions_.push_back({lhs, std::move(rhs)});
  };
  auto nt = [](int32_t n) { return Symbol{false, 0, 0, n}; };
  switch (e.kind) {
    case Expr::Kind::kEmpty:
      return {};
    case Expr::Kind::kLiteral: {
      std::vector<Symbol> out;
      for (char c : e.literal) out.push_back({true, static_cast<uint8_t>(c), static_cast<uint8_t>(c), 0});
      return out;
    }
    case Expr::Kind::kCharClass: {
      const int32_t c = NewNonterminal();
      std::vector<Utf8Sequence> seqs;
      for (const CodepointRange& r : e.ranges) Utf8Sequences(r.lo, r.hi, &seqs);
      for (const Utf8Sequence& seq : seqs) {
        std::vector<Symbol> rhs;
        for (const ByteRange& b : seq) rhs.push_back({true, b.lo, b.hi, 0});
        add(c, std::move(rhs));
      }
      return {nt(c)};
    }
    case Expr::Kind::kRuleRef:
      return {nt(e.rule)};
    case Expr::Kind::kSequence: {
      std::vector<Symbol> out;
      for (const Expr& item : e.items) {
        std::vector<Symbol> part = Lower(item);
        out.insert(out.end(), part.begin(), part.end());
      }
      return out;
    }
    case Expr::Kind::kChoice: {
      const int32_t x = NewNonterminal();
      for (const Expr& item : e.items) add(x, Lower(item));
      return {nt(x)};
    }
    case Expr::Kind::kRepeat: {
      const int32_t r = NewNonterminal();
      add(r, Lower(e.items[0]));
      std::vector<Symbol> out(static_cast<size_t>(e.min), nt(r));
      if (!e.max.has_value()) {
        const int32_t star = NewNonterminal();
        add(star, {nt(r), nt(star)});
        add(star, {});
        out.push_back(nt(star));
      } else if (*e.max > e.min) {
        int32_t next = -1;
        for (int32_t i = *e.max - e.min; i > 0; --i) {
          const int32_t o = NewNonterminal();
          add(o, next < 0 ? std::vector<Symbol>{nt(r)} : std::vector<Symbol>{nt(r), nt(next)});
          add(o, {});
          next = o;
        }
        out.push_back(nt(next));
      }
      return out;
    }
  }
  return {};
}

void EarleyOracle::Reset() {
  sets_.clear();
  sets_.emplace_back();
  for (int32_t p : by_lhs_[static_cast<size_t>(start_)]) Add(0, {p, 0, 0});
  Close(0);
}

void EarleyOracle::Add(size_t set, Item item) {
  if (sets_[set].seen.insert(item).second) sets_[set].items.push_back(item);
}

void EarleyOracle::Close(size_t k) {
  for (size_t i = 0; i < sets_[k].items.size(); ++i) {
    const Item it = sets_[k].items[i];
    const Production& p = productions_[static_cast<size_t>(it.production)];
    if (it.dot == static_cast<int32_t>(p.rhs.size())) {
      if (it.origin == static_cast<int32_t>(k)) sets_[k].nullable_done.insert(p.lhs);
      const auto origin = static_cast<size_t>(it.origin);
      for (size_t j = 0; j < sets_[origin].items.size(); ++j) {
        const Item w = sets_[origin].items[j];
        const Production& q = productions_[static_cast<size_t>(w.production)];
        if (w.dot < static_cast<int32_t>(q.rhs.size()) && !q.rhs[static_cast<size_t>(w.dot)].terminal &&
            q.rhs[static_cast<size_t>(w.dot)].nonterminal == p.lhs) {
          Add(k, {w.production, w.dot + 1, w.origin});
        }
      }
      continue;
    }
    const Symbol& next = p.rhs[static_cast<size_t>(it.dot)];
    if (next.terminal) continue;
    for (int32_t q : by_lhs_[static_cast<size_t>(next.nonterminal)]) Add(k, {q, 0, static_cast<int32_t>(k)});
    if (sets_[k].nullable_done.contains(next.nonterminal)) Add(k, {it.production, it.dot + 1, it.origin});
  }
}

bool EarleyOracle::Scan(uint8_t byte) {
  const size_t k = sets_.size() - 1;
  sets_.emplace_back();
  for (size_t i = 0; i < sets_[k].items.size(); ++i) {
    const Item it = sets_[k].items[i];
    const Production& p = productions_[static_cast<size_t>(it.production)];
    if (it.dot == static_cast<int32_t>(p.rhs.size())) continue;
    const Symbol& s = p.rhs[static_cast<size_t>(it.dot)];
    if (s.terminal && s.lo <= byte && byte <= s.hi) Add(k + 1, {it.production, it.dot + 1, it.origin});
  }
  Close(k + 1);
  return !sets_[k + 1].items.empty();
}

bool EarleyOracle::Append(std::string_view bytes) {
  const size_t saved = sets_.size();
  for (char c : bytes) {
    if (!Scan(static_cast<uint8_t>(c))) {
      sets_.resize(saved);
      return false;
    }
  }
  return true;
}

bool EarleyOracle::Viable(std::string_view bytes) {
  const size_t saved = sets_.size();
  bool ok = true;
  for (char c : bytes) {
    if (!Scan(static_cast<uint8_t>(c))) {
      ok = false;
      break;
    }
  }
  sets_.resize(saved);
  return ok;
}

bool EarleyOracle::Complete() const {
  for (const Item& it : sets_.back().items) {
    const Production& p = productions_[static_cast<size_t>(it.production)];
    if (p.lhs == start_ && it.origin == 0 && it.dot == static_cast<int32_t>(p.rhs.size())) return true;
  }
  return false;
}

}  // namespace kvtier::grammar::testing
