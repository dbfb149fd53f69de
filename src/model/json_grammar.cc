// Grammar (schema → nodes) and Matcher (bytes against the nodes); see json_grammar.h.
#include "model/json_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace mla::grammar {
namespace {

using ojson = nlohmann::ordered_json;
using Kind = Node::Kind;

bool digit(uint8_t b) {
  return b >= '0' && b <= '9';
}

std::string compact(const ojson& v) {
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

// Keywords that only annotate: ignored. Every other keyword not handled below is refused.
const std::set<std::string, std::less<>> kAnnotations = {
    "title",    "description", "default",  "examples",  "format", "$schema",     "$id",
    "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",  "definitions", "strict"};
const std::set<std::string, std::less<>> kHandled = {
    "type",  "properties", "required", "additionalProperties",
    "items", "minItems",   "maxItems", "enum",
    "const", "anyOf",      "oneOf",    "$ref"};

Node kind_node(Kind k) {
  Node n;
  n.kind = k;
  return n;
}

class Compiler {
 public:
  explicit Compiler(const ojson& root) : root_(root) {
    auto add = [&](Node n) {
      g_.nodes_.push_back(std::move(n));
      return int(g_.nodes_.size()) - 1;
    };
    g_.any_ = add(Node{});
    Node obj;
    obj.kind = Kind::kObject;
    obj.free_keys = true;
    g_.any_object_ = add(obj);
    Node arr;
    arr.kind = Kind::kArray;
    arr.items = g_.any_;
    g_.any_array_ = add(arr);
    g_.string_ = add(kind_node(Kind::kString));
    g_.number_ = add(kind_node(Kind::kNumber));
    Node words;
    words.kind = Kind::kLiterals;
    words.literals = {"true", "false", "null"};
    g_.words_ = add(words);
  }

  Grammar take(int root) {
    g_.root_ = root;
    return std::move(g_);
  }

  Result<int> compile(const ojson& s, const std::string& at) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return g_.any_;
      return invalid_argument(at + ": the schema false accepts nothing");
    }
    if (!s.is_object()) return invalid_argument(at + ": a schema must be an object");
    if (++depth_ > 64) return invalid_argument(at + ": the schema nests too deep");
    Result<int> r = compile_object(s, at);
    --depth_;
    return r;
  }

 private:
  int add(Node n) {
    g_.nodes_.push_back(std::move(n));
    return int(g_.nodes_.size()) - 1;
  }

  Result<int> compile_object(const ojson& s, const std::string& at) {
    for (const auto& [k, v] : s.items())
      if (!kAnnotations.contains(k) && !kHandled.contains(k))
        return invalid_argument(fmt::format("{}: the keyword {} is not supported", at, k));
    if (s.contains("$ref")) return ref(s["$ref"], at);
    if (s.contains("enum") || s.contains("const")) {
      Node n;
      n.kind = Kind::kLiterals;
      if (s.contains("const")) {
        n.literals.push_back(compact(s["const"]));
      } else {
        if (!s["enum"].is_array() || s["enum"].empty())
          return invalid_argument(at + "/enum: expected a non-empty list");
        for (const ojson& v : s["enum"]) n.literals.push_back(compact(v));
      }
      if (n.literals.size() > 64)
        return invalid_argument(at + "/enum: at most 64 values are supported");
      return add(std::move(n));
    }
    for (const char* k : {"anyOf", "oneOf"})
      if (s.contains(k)) return any_of(s[k], at + "/" + k);
    if (s.contains("type") && s["type"].is_array()) {
      ojson alts = ojson::array();
      for (const ojson& t : s["type"]) {
        ojson one = s;
        one["type"] = t;
        alts.push_back(std::move(one));
      }
      return any_of(alts, at + "/type");
    }
    std::string type;
    if (s.contains("type")) {
      if (!s["type"].is_string()) return invalid_argument(at + "/type: expected a string or list");
      type = s["type"].get<std::string>();
    } else if (s.contains("properties")) {
      type = "object";
    } else if (s.contains("items")) {
      type = "array";
    } else {
      return g_.any_;
    }
    if (type == "object") return object(s, at);
    if (type == "array") return array(s, at);
    if (type == "string") return g_.string_;
    if (type == "number") return g_.number_;
    if (type == "integer") return add(kind_node(Kind::kInteger));
    if (type == "boolean" || type == "null") {
      Node n;
      n.kind = Kind::kLiterals;
      n.literals = type == "null" ? std::vector<std::string>{"null"}
                                  : std::vector<std::string>{"true", "false"};
      return add(std::move(n));
    }
    return invalid_argument(fmt::format("{}/type: unknown type {}", at, type));
  }

  Result<int> ref(const ojson& r, const std::string& at) {
    if (!r.is_string()) return invalid_argument(at + "/$ref: expected a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const ojson* s = nullptr;
    if (target == "#") {
      s = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        const std::string defs = p.substr(2, p.size() - 3);
        if (target.starts_with(p) && root_.contains(defs) && root_[defs].is_object() &&
            root_[defs].contains(target.substr(p.size())))
          s = &root_[defs][target.substr(p.size())];
      }
    }
    if (!s)
      return invalid_argument(fmt::format("{}/$ref: {} is not in the schema's $defs", at, target));
    const int slot = add(Node{});  // reserved first, so that recursion points here
    refs_[target] = slot;
    MLA_ASSIGN_OR_RETURN(const int n, compile(*s, target));
    g_.nodes_[size_t(slot)] = g_.nodes_[size_t(n)];
    return slot;
  }

  Result<int> any_of(const ojson& list, const std::string& at) {
    if (!list.is_array() || list.empty())
      return invalid_argument(at + ": expected a non-empty list");
    Node n;
    n.kind = Kind::kAnyOf;
    for (size_t i = 0; i < list.size(); ++i) {
      MLA_ASSIGN_OR_RETURN(const int a, compile(list[i], fmt::format("{}/{}", at, i)));
      n.alternatives.push_back(a);
    }
    // The matcher picks an alternative by the first byte of the value.
    const Grammar& g = g_;
    for (int b = 0; b < 256; ++b) {
      int first = -1;
      for (size_t i = 0; i < n.alternatives.size(); ++i) {
        if (!g.can_start(n.alternatives[i], uint8_t(b))) continue;
        if (first >= 0)
          return invalid_argument(
              fmt::format("{}: alternatives {} and {} can both start with {:?}; alternatives must "
                          "differ in their first character (type)",
                          at, first, i, std::string(1, char(b))));
        first = int(i);
      }
    }
    return add(std::move(n));
  }

  Result<int> object(const ojson& s, const std::string& at) {
    Node n;
    n.kind = Kind::kObject;
    const ojson* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props && !props->is_object())
      return invalid_argument(at + "/properties: expected an object");
    const ojson* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (extra && !extra->is_boolean() && !(extra->is_object() && extra->empty()))
      return invalid_argument(at + "/additionalProperties: only true, false or {} are supported");
    if (!props || props->empty()) {
      // No properties: any object unless additionalProperties is false (then only {}).
      n.free_keys = !(extra && extra->is_boolean() && !extra->get<bool>());
      if (n.free_keys) return g_.any_object_;
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return invalid_argument(at + "/required: expected a list");
      for (const ojson& r : s["required"]) {
        if (!r.is_string() || !props || !props->contains(r.get<std::string>()))
          return invalid_argument(
              fmt::format("{}/required: {} is not one of the properties", at, compact(r)));
        required.insert(r.get<std::string>());
      }
    }
    if (props && props->size() > 64)
      return invalid_argument(at + "/properties: at most 64 properties are supported");
    if (props)
      for (const auto& [k, v] : props->items()) {
        n.keys.push_back(compact(ojson(k)));
        n.required.push_back(required.contains(k));
        MLA_ASSIGN_OR_RETURN(const int c, compile(v, at + "/properties/" + k));
        n.values.push_back(c);
      }
    return add(std::move(n));
  }

  Result<int> array(const ojson& s, const std::string& at) {
    Node n;
    n.kind = Kind::kArray;
    n.items = g_.any_;
    if (s.contains("items")) {
      MLA_ASSIGN_OR_RETURN(n.items, compile(s["items"], at + "/items"));
    }
    for (const char* k : {"minItems", "maxItems"}) {
      if (!s.contains(k)) continue;
      if (!s[k].is_number_unsigned() || s[k].get<uint64_t>() > UINT32_MAX)
        return invalid_argument(fmt::format("{}/{}: expected a count", at, k));
      (std::string_view(k) == "minItems" ? n.min_items : n.max_items) =
          uint32_t(s[k].get<uint64_t>());
    }
    if (n.min_items > n.max_items) return invalid_argument(at + ": minItems is above maxItems");
    return add(std::move(n));
  }

  const ojson& root_;
  Grammar g_;
  std::map<std::string, int> refs_;
  int depth_ = 0;
};

}  // namespace

Result<std::shared_ptr<const Grammar>> Grammar::from_schema(const ojson& schema) {
  Compiler c(schema);
  MLA_ASSIGN_OR_RETURN(const int root, c.compile(schema, "#"));
  auto g = std::make_shared<Grammar>(c.take(root));
  if (g->node(root).kind != Kind::kObject)
    return invalid_argument("#: the schema's root must be an object (\"type\": \"object\")");
  return std::shared_ptr<const Grammar>(std::move(g));
}

std::shared_ptr<const Grammar> Grammar::any_object() {
  static const ojson kEmpty = ojson::object();
  Compiler c(kEmpty);
  Grammar g = c.take(0);
  g.root_ = g.any_object_;
  return std::make_shared<const Grammar>(std::move(g));
}

bool Grammar::can_start(int i, uint8_t b) const {
  const Node& n = node(i);
  switch (n.kind) {
    case Kind::kAny:
      return b == '{' || b == '[' || b == '"' || b == '-' || digit(b) || b == 't' || b == 'f' ||
             b == 'n';
    case Kind::kObject:
      return b == '{';
    case Kind::kArray:
      return b == '[';
    case Kind::kString:
      return b == '"';
    case Kind::kNumber:
    case Kind::kInteger:
      return b == '-' || digit(b);
    case Kind::kLiterals:
      return std::any_of(n.literals.begin(), n.literals.end(),
                         [&](const std::string& l) { return uint8_t(l[0]) == b; });
    case Kind::kAnyOf:
      return std::any_of(n.alternatives.begin(), n.alternatives.end(),
                         [&](int a) { return can_start(a, b); });
  }
  return false;
}

}  // namespace mla::grammar
