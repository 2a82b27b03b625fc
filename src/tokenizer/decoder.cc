// Decoder types used by the supported tokenizer.json files.
#include "tokenizer/decoder.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace kvtier::tokenizer {
namespace {

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& part : parts_) part->DecodeChain(tokens);
  }
  void TokenToBytes(std::string* token) const override {
    for (const auto& part : parts_) part->TokenToBytes(token);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// Maps characters back to bytes and decodes them as UTF-8 (U+FFFD for invalid bytes);
// added tokens pass through as they are and split the byte runs.
class ByteLevelDecoder final : public Decoder {
 public:
  explicit ByteLevelDecoder(const StringSet* added) : added_(added) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    const ByteLevelTable& table = ByteLevelTable::Get();
    std::vector<std::string> out;
    std::string bytes;
    bool pending = false;
    auto flush = [&] {
      if (pending) out.push_back(DecodeUtf8Lossy(bytes, /*strip_bom=*/false));
      bytes.clear();
      pending = false;
    };
    for (const std::string& token : *tokens) {
      if (added_->contains(token)) {
        flush();
        out.push_back(token);
        continue;
      }
      pending = true;
      for (size_t pos = 0; pos < token.size();) {
        std::optional<unsigned char> b = table.ByteOf(NextChar(token, &pos));
        bytes.push_back(static_cast<char>(b.value_or(0)));  // the reference maps unknowns to 0
      }
    }
    flush();
    tokens->swap(out);
  }
  void TokenToBytes(std::string* token) const override {
    if (added_->contains(*token)) return;
    const ByteLevelTable& table = ByteLevelTable::Get();
    std::string bytes;
    for (size_t pos = 0; pos < token->size();) {
      bytes.push_back(static_cast<char>(table.ByteOf(NextChar(*token, &pos)).value_or(0)));
    }
    token->swap(bytes);
  }

 private:
  const StringSet* added_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) token = pattern_.ReplaceAll(token, content_);
  }
  void TokenToBytes(std::string* token) const override { *token = pattern_.ReplaceAll(*token, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

// Turns runs of <0xNN> tokens into text (TextDecoder: U+FFFD for invalid bytes, and a
// leading byte-order mark of each run dropped, as the reference's default TextDecoder does).
class ByteFallbackDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
      if (!bytes.empty()) out.push_back(DecodeUtf8Lossy(bytes, /*strip_bom=*/true));
      bytes.clear();
    };
    for (std::string& token : *tokens) {
      int byte = ParseByteToken(token);
      if (byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens->swap(out);
  }
  void TokenToBytes(std::string* token) const override {
    const int byte = ParseByteToken(*token);
    if (byte >= 0) token->assign(1, static_cast<char>(byte));
  }

 private:
  static int Hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // <0xNN> -> NN, else -1. Like parseInt, a valid first digit is enough.
  static int ParseByteToken(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    int hi = Hex(t[3]), lo = Hex(t[4]);
    if (hi < 0) return -1;
    return lo < 0 ? hi : hi * 16 + lo;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string joined = absl::StrJoin(*tokens, "");
    tokens->assign(1, std::move(joined));
  }
  void TokenToBytes(std::string*) const override {}
};

// Removes up to `start` leading and `stop` trailing copies of a one-character content from
// every string.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    if (content_.empty()) return;
    for (std::string& token : *tokens) {
      std::string_view view = token;
      for (int i = 0; i < start_ && view.substr(0, content_.size()) == content_; ++i) {
        view.remove_prefix(content_.size());
      }
      for (int i = 0; i < stop_ && view.size() >= content_.size() &&
                      view.substr(view.size() - content_.size()) == content_;
           ++i) {
        view.remove_suffix(content_.size());
      }
      token = std::string(view);
    }
  }
  // Strip acts on the start and end of the whole text (after Fuse), not on a token inside it.
  void TokenToBytes(std::string*) const override {}

 private:
  std::string content_;
  int start_, stop_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool add_prefix_space)
      : replacement_(std::move(replacement)), add_prefix_space_(add_prefix_space) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      token = absl::StrReplaceAll(token, {{replacement_, " "}});
      if (add_prefix_space_ && i == 0 && !token.empty() && token[0] == ' ') token.erase(0, 1);
    }
  }
  void TokenToBytes(std::string* token) const override { *token = absl::StrReplaceAll(*token, {{replacement_, " "}}); }

 private:
  std::string replacement_;
  bool add_prefix_space_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> Decoder::FromJson(
    const Json& config, const StringSet* added_contents) {
  if (config.is_null()) return nullptr;
  constexpr std::string_view kWhere = "decoder";
  ASSIGN_OR_RETURN(std::string type, StringField(config, "type", kWhere));
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, ArrayField(config, "decoders", kWhere));
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const Json& item : *list) {
      ASSIGN_OR_RETURN(std::unique_ptr<Decoder> part, FromJson(item, added_contents));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>(added_contents);
  if (type == "Replace") {
    ASSIGN_OR_RETURN(const Json* pattern_json, Field(config, "pattern", kWhere));
    if (pattern_json == nullptr) {
      return absl::InvalidArgumentError("tokenizer file: missing field 'decoder.pattern'");
    }
    ASSIGN_OR_RETURN(Pattern pattern, Pattern::FromJson(*pattern_json, kWhere));
    ASSIGN_OR_RETURN(std::string content, StringField(config, "content", kWhere));
    return std::make_unique<ReplaceDecoder>(std::move(pattern), std::move(content));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    ASSIGN_OR_RETURN(std::string content, StringField(config, "content", kWhere));
    ASSIGN_OR_RETURN(int64_t start, IntField(config, "start", kWhere, 0));
    ASSIGN_OR_RETURN(int64_t stop, IntField(config, "stop", kWhere, 0));
    return std::make_unique<StripDecoder>(std::move(content), static_cast<int>(start),
                                          static_cast<int>(stop));
  }
  if (type == "Metaspace") {
    ASSIGN_OR_RETURN(std::string replacement, StringField(config, "replacement", kWhere));
    ASSIGN_OR_RETURN(std::optional<std::string> scheme, OptStringField(config, "prepend_scheme", kWhere));
    ASSIGN_OR_RETURN(bool add_prefix_space,
                     BoolField(config, "add_prefix_space", kWhere, scheme.value_or("always") != "never"));
    return std::make_unique<MetaspaceDecoder>(std::move(replacement), add_prefix_space);
  }
  return absl::UnimplementedError(absl::StrCat("tokenizer: unsupported decoder type '", type, "'"));
}

}  // namespace kvtier::tokenizer
