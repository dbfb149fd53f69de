// JSON under a schema (model/json_grammar.h) and its token masks (model/json_constraint.h): texts
// the matcher takes or refuses, random walks through it that must end in JSON holding the
// schema's required keys and types, schema refusals that name the keyword, and the trie walk's
// mask equal to trying every token's bytes one by one (the plain-string shortcut and the tail
// included). The schemas' validity is checked by the `jsonschema` package end to end
// (tests/e2e/server/structured_output_test.py).
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "model/json_constraint.h"
#include "model/json_grammar.h"

namespace mla::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const Grammar> compile(const char* schema) {
  auto g = Grammar::from_schema(ojson::parse(schema));
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? *g : Grammar::any_object();
}

// Whether the matcher takes all of `text` and ends whole.
bool takes(const Grammar& g, std::string_view text) {
  Matcher m(&g);
  for (char c : text)
    if (!m.advance(uint8_t(c))) return false;
  return m.complete();
}

const char* kPerson = R"({"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b\"c", 3, null]}, "maxItems": 3},
    "address": {"type": ["object", "null"], "properties": {"city": {"type": "string"}},
                "required": ["city"], "additionalProperties": false},
    "score": {"type": "number"}, "ok": {"type": "boolean"}},
  "required": ["name", "age"], "additionalProperties": false})";

TEST(JsonGrammar, TakesAndRefuses) {
  const auto g = compile(kPerson);
  for (const char* ok : {R"({"name":"Ann","age":30})", R"({"name": "A\"\\\u00e9\n", "age": -0})",
                         R"({"name":"é漢😀","age":1,"tags":["a", "b\"c",3],"address":null})",
                         R"({"name":"","age":2,"address":{"city":"X"},"score":-1.5e+10,"ok":true})",
                         R"({"name":"x","age":7,"score":0.25})"})
    EXPECT_TRUE(takes(*g, ok)) << ok;
  for (const char* bad : {
           R"({"age":30,"name":"Ann"})",           // properties in the schema's order
           R"({"name":"Ann"})",                    // age is required
           R"({"name":"Ann","age":3.5})",          // integer
           R"({"name":"Ann","age":01})",           // leading zero
           R"({"name":"Ann","age":1,"extra":1})",  // additionalProperties false
           R"({"name":"Ann","age":1,"tags":["a","a","a","a"]})",  // maxItems 3
           R"({"name":"Ann","age":1,"tags":["c"]})",              // enum
           R"({"name":"Ann","age":1,"address":{}})",              // city required
           R"({"name":"A	b","age":1})",                    // a raw tab in a string
           R"({"name":"\x","age":1})",                            // a bad escape
           R"({ "name":"Ann","age":1})",                          // no space after '{'
           R"({"name":"Ann",  "age":1})",                         // one space at most
           "{\"name\":\"\xff\",\"age\":1}",                       // not UTF-8
           R"({"name":"Ann","age":12345678901234567})",           // 17 digits
       })
    EXPECT_FALSE(takes(*g, bad)) << bad;
}

// \u escapes of UTF-16 surrogates (RFC 8259 §7): a high one only with a low one right after it,
// no low one alone (JSON parsers refuse lone surrogates: a fuzzed walk once ended in one). A lone
// low surrogate is refused at its second digit and a high one's '\\' / 'u' / low half are the
// only ways on, so no prefix the matcher takes is a dead end.
TEST(JsonGrammar, SurrogateEscapesComeInPairs) {
  const auto g = compile(R"({"type": "object", "properties": {"s": {"type": "string"}},
                             "required": ["s"], "additionalProperties": false})");
  const auto in_s = [](const char* str) { return std::string(R"({"s":)") + str + "}"; };
  for (const char* ok : {R"("\ud83d\ude00")", R"("\uD83D\uDE00x")", R"("\uDBFF\uDFFF")",
                         R"("\uD7FF\uE000")", R"("\u00e9")"})
    EXPECT_TRUE(takes(*g, in_s(ok))) << ok;
  for (const char* bad : {R"("\ude00")", R"("\uD83D")", R"("\uD83Dx")", R"("\uD83D\n")",
                          R"("\uD83D\u0041")", R"("\uD83D\uD83D")"})
    EXPECT_FALSE(takes(*g, in_s(bad))) << bad;
  // Refused as early as the grammar can tell, and never stuck: after each prefix a byte is taken.
  const auto after = [&](std::string_view prefix) {
    Matcher m(g.get());
    for (char c : prefix) EXPECT_TRUE(m.advance(uint8_t(c))) << prefix;
    return m;
  };
  const Matcher lone = after(R"({"s":"\uD)");
  for (const char d : {'c', 'C', 'f'}) EXPECT_FALSE(Matcher(lone).advance(uint8_t(d))) << d;
  EXPECT_TRUE(Matcher(lone).advance('8'));
  const Matcher high = after(R"({"s":"\uD83D\uD)");
  for (const char d : {'0', '8', 'b'}) EXPECT_FALSE(Matcher(high).advance(uint8_t(d))) << d;
  EXPECT_TRUE(Matcher(high).advance('E'));
}

TEST(JsonGrammar, AnyObjectAndRecursion) {
  const auto any = Grammar::any_object();
  EXPECT_TRUE(takes(*any, R"({"a":[1,{"b":null},"x",true,-2.5E3],"c":{}})"));
  EXPECT_FALSE(takes(*any, R"([1])"));  // json_object: the root is an object
  EXPECT_FALSE(takes(*any, R"({"a":tru})"));
  const auto tree = compile(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v", "kids"]}}, "$ref": "#/$defs/node"})");
  EXPECT_TRUE(takes(*tree, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(takes(*tree, R"({"v":1,"kids":[{"v":2}]})"));
}

TEST(JsonGrammar, RefusalsNameTheKeyword) {
  struct Case {
    const char* schema;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"type":"object","properties":{"a":{"type":"string","pattern":"x+"}}})",
            "#/properties/a: the keyword pattern is not supported"},
           {R"({"type":"array","items":{"type":"string"}})", "root must be an object"},
           {R"({"type":"object","properties":{"a":{"anyOf":[{"type":"object"},
               {"type":"object","properties":{"b":{"type":"string"}}}]}}})",
            "#/properties/a/anyOf: alternatives 0 and 1 can both start with"},
           {R"({"type":"object","properties":{"a":{"$ref":"#/$defs/nope"}}})",
            "#/$defs/nope is not in the schema's $defs"},
           {R"({"type":"object","required":["b"],"properties":{"a":{}}})",
            "\"b\" is not one of the properties"},
       }) {
    auto g = Grammar::from_schema(ojson::parse(c.schema));
    ASSERT_FALSE(g.ok()) << c.schema;
    EXPECT_NE(g.status().message().find(c.says), std::string::npos) << g.status().message();
  }
}

// Random walks: each step takes a random byte the matcher allows; past 40 bytes, closing bytes
// first. Every walk must end, as JSON with the required keys.
TEST(JsonGrammar, RandomWalksEndInValidJson) {
  const auto g = compile(kPerson);
  std::mt19937 rng(7);
  const std::string closers = "\"}]0nft";
  for (int walk = 0; walk < 300; ++walk) {
    Matcher m(g.get());
    std::string text;
    while (!m.complete()) {
      ASSERT_LT(text.size(), 20000u) << text;
      std::vector<uint8_t> allowed;
      for (int b = 1; b < 256; ++b) {
        Matcher next = m;
        if (next.advance(uint8_t(b))) allowed.push_back(uint8_t(b));
      }
      ASSERT_FALSE(allowed.empty()) << "dead end after " << text;
      uint8_t pick = allowed[rng() % allowed.size()];
      if (text.size() > 40)
        for (char c : closers)
          if (std::find(allowed.begin(), allowed.end(), uint8_t(c)) != allowed.end()) {
            pick = uint8_t(c);
            break;
          }
      ASSERT_TRUE(m.advance(pick));
      text += char(pick);
    }
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(j.is_object()) << text;
    EXPECT_TRUE(j["name"].is_string() && j["age"].is_number_integer()) << text;
  }
}

// The trie walk allows exactly the tokens whose bytes the state takes one by one.
TEST(JsonConstraint, MaskEqualsTryingEveryToken) {
  std::vector<std::string> bytes = {"",     "{",   "}",     "\"",  "\"name", "\":",  "\":\"",
                                    "a",    "ab",  "\\",    "\\n", "\"}",    "é",    "\xc3",
                                    "\xa9", "1",   "12",    "-",   ",\"",    "age",  "\":1}",
                                    " ",    "}\n", "\n```", "\n",  "``",     "null", "tru"};
  const auto vocab = std::make_shared<const VocabTrie>(bytes);
  const auto g = compile(R"({"type":"object","properties":{"name":{"type":"string"},
      "age":{"type":"integer"}},"required":["name","age"]})");
  const int32_t kCallEnd = 1000, kEos = 1001;
  const int64_t width = 1002;
  JsonConstraintSpec spec(g, vocab, {{"\n```", -1}, {"", kCallEnd}});
  const std::vector<int32_t> ends = {kEos};
  // Drive a state through a reply, comparing masks at every step.
  // {"name":"aé\\n","age":1} then "\n```", the call's end and EOS; é in one token, then in
  // two halves.
  const std::vector<int32_t> reply = {1,  4, 6,  7,  12, 13, 14,       9,
                                      10, 3, 18, 19, 20, 23, kCallEnd, kEos};
  auto state = spec.start(ends);
  std::string text;
  for (size_t step = 0; step <= reply.size(); ++step) {
    std::vector<float> logits(size_t(width), 0.0f);
    state->mask(logits);
    for (int32_t id = 0; id < width; ++id) {
      auto probe = spec.start(ends);
      bool ok = true;
      for (size_t k = 0; k < step && ok; ++k) ok = probe->accept(reply[k]);
      ASSERT_TRUE(ok);
      const bool takes_it = probe->accept(id);
      EXPECT_EQ(logits[size_t(id)] == 0.0f, takes_it)
          << "token " << id << " after " << step << " tokens";
    }
    if (step < reply.size()) {
      ASSERT_TRUE(state->accept(reply[step])) << step;
    }
  }
}

// Branches (tool_choice required): heads told apart by their texts, a control token in a head,
// each branch's own grammar after it; masks equal to trying every token.
TEST(JsonConstraint, BranchesByHead) {
  const std::vector<std::string> bytes = {"g",  "get", "got", "_x",   ":0", "\n",       "{",  "}",
                                          "{}", "\"",  "a",   "\":1", "1",  "\"a\":1}", "\"a"};
  const auto vocab = std::make_shared<const VocabTrie>(bytes);
  const int32_t kSep = 100, kEnd = 101, kEos = 102;
  const int64_t width = 103;
  std::vector<ConstraintBranch> branches;
  branches.push_back({{{"get:0", -1}, {"", kSep}}, Grammar::any_object(), {{"", kEnd}}});
  branches.push_back({{{"got_x:0", -1}, {"", kSep}},
                      compile(R"({"type":"object","properties":{"a":{"type":"integer"}},
                                  "required":["a"]})"),
                      {{"", kEnd}}});
  JsonConstraintSpec spec(std::move(branches), vocab);
  const std::vector<int32_t> ends = {kEos};
  for (const std::vector<int32_t>& reply :
       {std::vector<int32_t>{1, 4, kSep, 8, kEnd, kEos},         // get:0 {}
        std::vector<int32_t>{2, 3, 4, kSep, 6, 13, kEnd, kEos},  // got_x:0 {"a":1}
        std::vector<int32_t>{2, 3, 4, kSep, 6, 14, 11, 7, kEnd}}) {
    auto state = spec.start(ends);
    for (size_t step = 0; step <= reply.size(); ++step) {
      std::vector<float> logits(size_t(width), 0.0f);
      state->mask(logits);
      for (int32_t id = 0; id < width; ++id) {
        auto probe = spec.start(ends);
        for (size_t k = 0; k < step; ++k) ASSERT_TRUE(probe->accept(reply[k]));
        EXPECT_EQ(logits[size_t(id)] == 0.0f, probe->accept(id))
            << "token " << id << " after " << step << " tokens";
      }
      if (step < reply.size()) {
        ASSERT_TRUE(state->accept(reply[step])) << step;
      }
    }
  }
}

}  // namespace
}  // namespace mla::grammar
