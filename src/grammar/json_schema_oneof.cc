// SchemaCompiler::CheckOneOfDisjoint: oneOf requires exactly one branch to match, and a
// grammar cannot count matches; a oneOf compiles like anyOf only when no value can match
// two branches. Provably apart: branches of different JSON types, of different enum/const
// values, or objects that require a property with different enum/const values (the
// tagged-union shape of tool schemas). Anything else is refused.
#include <map>

#include "absl/strings/str_cat.h"
#include "grammar/json_schema_compiler.h"

namespace kvtier::grammar {
namespace {

struct Shape {
  uint8_t types = kTypeAny;
  std::optional<std::vector<SchemaJson>> values;         // when the branch is a finite set
  std::map<std::string, std::vector<SchemaJson>> tags;   // required property -> its finite values
};

int KindOf(const SchemaJson& v) {
  if (v.is_null()) return kTypeNull;
  if (v.is_boolean()) return kTypeBoolean;
  if (v.is_number_integer() || v.is_number_unsigned()) return kTypeInteger;
  if (v.is_number()) return v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())) ? kTypeInteger : kTypeFraction;
  if (v.is_string()) return kTypeString;
  if (v.is_array()) return kTypeArray;
  return kTypeObject;
}

int TypeBits(const SchemaJson& t) {
  auto one = [](const SchemaJson& name) -> int {
    if (!name.is_string()) return kTypeAny;
    const std::string n = name.get<std::string>();
    return n == "null"      ? kTypeNull
           : n == "boolean" ? kTypeBoolean
           : n == "integer" ? kTypeInteger
           : n == "number"  ? kTypeNumber
           : n == "string"  ? kTypeString
           : n == "array"   ? kTypeArray
           : n == "object"  ? kTypeObject
                            : kTypeAny;
  };
  if (!t.is_array()) return one(t);
  int bits = 0;
  for (const SchemaJson& name : t) bits |= one(name);
  return bits;
}

bool Intersect(const std::vector<SchemaJson>& a, const std::vector<SchemaJson>& b) {
  for (const SchemaJson& x : a) {
    for (const SchemaJson& y : b) {
      if (x == y) return true;
    }
  }
  return false;
}

class ShapeOf {
 public:
  explicit ShapeOf(const SchemaJson& root) : root_(root) {}

  Shape operator()(const SchemaJson& s, int depth) const {
    Shape shape;
    if (depth > 16) return shape;
    if (s.is_boolean()) {
      if (!s.get<bool>()) shape.types = 0;
      return shape;
    }
    if (!s.is_object()) return shape;
    if (s.contains("$ref") && s["$ref"].is_string()) {
      const std::string ref = s["$ref"].get<std::string>();
      if (ref.empty() || ref[0] != '#') return shape;
      try {
        const SchemaJson::json_pointer p(ref.substr(1));
        if (!root_.contains(p)) return shape;
        return (*this)(root_.at(p), depth + 1);
      } catch (const nlohmann::json::exception&) {
        return shape;
      }
    }
    if (s.contains("allOf") && s["allOf"].is_array() && s["allOf"].size() == 1) return (*this)(s["allOf"][0], depth + 1);
    for (const char* keyword : {"anyOf", "oneOf"}) {
      if (!s.contains(keyword) || !s[keyword].is_array()) continue;
      shape.types = 0;
      shape.values.emplace();
      for (const SchemaJson& branch : s[keyword]) {
        Shape b = (*this)(branch, depth + 1);
        shape.types |= b.types;
        if (shape.values.has_value() && b.values.has_value()) {
          shape.values->insert(shape.values->end(), b.values->begin(), b.values->end());
        } else {
          shape.values.reset();
        }
      }
      return shape;
    }
    const int declared = s.contains("type") ? TypeBits(s["type"]) : kTypeAny;
    if (s.contains("const") || (s.contains("enum") && s["enum"].is_array())) {
      shape.types = 0;
      shape.values.emplace();
      const SchemaJson all = s.contains("const") ? SchemaJson::array({s["const"]}) : s["enum"];
      for (const SchemaJson& v : all) {
        if ((KindOf(v) & declared) == 0) continue;
        shape.values->push_back(v);
        shape.types |= KindOf(v);
      }
      return shape;
    }
    shape.types = declared;
    if (!s.contains("type") && (s.contains("properties") || s.contains("required"))) shape.types = kTypeObject;
    if (s.contains("properties") && s["properties"].is_object() && s.contains("required") && s["required"].is_array()) {
      for (const SchemaJson& r : s["required"]) {
        if (!r.is_string() || !s["properties"].contains(r.get<std::string>())) continue;
        Shape prop = (*this)(s["properties"][r.get<std::string>()], depth + 1);
        if (prop.values.has_value()) shape.tags[r.get<std::string>()] = *prop.values;
      }
    }
    return shape;
  }

 private:
  const SchemaJson& root_;
};

bool Disjoint(const Shape& a, const Shape& b) {
  if ((a.types & b.types) == 0) return true;
  if (a.values.has_value() && b.values.has_value() && !Intersect(*a.values, *b.values)) return true;
  if (((a.types | b.types) & ~kTypeObject) == 0) {
    for (const auto& [key, values] : a.tags) {
      auto it = b.tags.find(key);
      if (it != b.tags.end() && !Intersect(values, it->second)) return true;
    }
  }
  return false;
}

}  // namespace

absl::Status SchemaCompiler::CheckOneOfDisjoint(const SchemaJson& branches, const std::string& pointer) const {
  const ShapeOf shape_of(root_);
  std::vector<Shape> shapes;
  for (const SchemaJson& b : branches) shapes.push_back(shape_of(b, 0));
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (size_t j = i + 1; j < shapes.size(); ++j) {
      if (!Disjoint(shapes[i], shapes[j])) {
        return Error(pointer, absl::StrCat("'oneOf' branches ", i, " and ", j,
                                           " may both match one value, which a grammar cannot exclude (use 'anyOf', or "
                                           "make them differ by type, by enum/const values, or by a required property "
                                           "with different const values)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier::grammar
