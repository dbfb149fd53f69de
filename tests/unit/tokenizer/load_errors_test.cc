// Bad tokenizer files give a clear error naming file, field and value, never a crash: truncated
// JSON, duplicate keys, merges naming unknown tokens, missing byte tokens, duplicate ids,
// unsupported components. Starts from a small valid byte-level tokenizer built here.
#include <gtest/gtest.h>

#include <string>

#include "bpe_tokenizer_json.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_read.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace mla::tok {
namespace {

using testing_tok::minimal;

Status load(const Json& j) {
  return Tokenizer::from_json(j.dump(), "bad.json").status();
}

void expect_error(const Status& s, std::initializer_list<const char*> words) {
  ASSERT_FALSE(s.ok());
  for (const char* w : words) EXPECT_NE(s.message().find(w), std::string::npos) << s.message();
}

TEST(TokenizerLoad, MinimalLoadsAndMerges) {
  Result<Tokenizer> t = Tokenizer::from_json(minimal().dump(), "ok.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  Result<std::vector<int32_t>> ids = t->encode("abc ab");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{257, 32, 256}));  // "abc", " " (byte 0x20), "ab"
}

TEST(TokenizerLoad, TruncatedJson) {
  const std::string text = minimal().dump();
  expect_error(Tokenizer::from_json(text.substr(0, text.size() / 2), "cut.json").status(),
               {"cut.json", "not valid JSON"});
  expect_error(Tokenizer::from_json("", "empty.json").status(), {"empty.json"});
}

TEST(TokenizerLoad, DuplicateKey) {
  std::string text = minimal().dump();
  text.insert(1, R"("model": 1, )");
  expect_error(Tokenizer::from_json(text, "dup.json").status(), {"dup.json", "\"model\"", "twice"});
}

TEST(TokenizerLoad, MergeNamingUnknownToken) {
  Json j = minimal();
  j["model"]["merges"].push_back("ab zz");
  expect_error(load(j), {"bad.json", "model.merges[2]", "\"zz\"", "not in the vocab"});
  j = minimal();
  j["model"]["merges"] = Json::array({"b c"});  // "bc" is not in the vocab
  expect_error(load(j), {"model.merges[0]", "\"bc\""});
  j = minimal();
  j["model"]["merges"] = Json::array({"abc"});
  expect_error(load(j), {"model.merges[0]", "\"left right\""});
}

TEST(TokenizerLoad, MissingByteToken) {
  Json j = minimal();
  j["model"]["vocab"].erase(bytes_to_token_text("\n"));
  expect_error(load(j), {"model.vocab", "0x0A", "all 256"});
}

TEST(TokenizerLoad, DuplicateIds) {
  Json j = minimal();
  j["model"]["vocab"]["zz"] = 256;
  expect_error(load(j), {"model.vocab", "id 256"});
  j = minimal();
  j["added_tokens"].push_back({{"id", 258}, {"content", "</s>"}, {"special", true}});
  expect_error(load(j), {"added_tokens[1]", "id 258"});
  j = minimal();
  j["model"]["vocab"]["neg"] = -4;
  expect_error(load(j), {"model.vocab", "\"neg\"", "-4"});
}

// An id sizes the per-id tables: one far beyond the entries must be refused before any table is
// allocated (id 2^31-1 once meant 2^31 strings and a signed overflow in max_id + 1).
TEST(TokenizerLoad, IdsFarBeyondTheEntries) {
  Json j = minimal();
  j["model"]["vocab"]["zz"] = 2147483647;
  expect_error(load(j), {"model.vocab", "\"zz\"", "2147483647", "holes"});
  j = minimal();
  j["added_tokens"].push_back({{"id", 2147483647}, {"content", "</s>"}, {"special", true}});
  expect_error(load(j), {"added_tokens[1]", "2147483647", "holes"});
  // Holes up to kMaxVocabIdGap are fine (reserved ids).
  j = minimal();
  j["added_tokens"].push_back({{"id", 258 + 1000}, {"content", "</s>"}, {"special", true}});
  Result<Tokenizer> t = Tokenizer::from_json(j.dump(), "holes.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->id_limit(), 1259);
}

// Deep nesting is refused before parsing (error paths dump values, and dump() recurses).
TEST(TokenizerLoad, NestingTooDeep) {
  std::string text = minimal().dump();
  text.insert(1, "\"padding\": " + std::string(65, '[') + std::string(65, ']') + ", ");
  expect_error(Tokenizer::from_json(text, "deep.json").status(), {"deep.json", "deeper than 64"});
}

TEST(TokenizerLoad, UnsupportedComponents) {
  Json j = minimal();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_error(load(j), {"normalizer", "unsupported", "NFKC"});
  j = minimal();
  j["model"]["type"] = "WordPiece";
  expect_error(load(j), {"model", "WordPiece"});
  j = minimal();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(load(j), {"pre_tokenizer", "Whitespace"});
  j = minimal();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", Json::array({{{"type", "ByteLevel"}}, {{"type", "Digits"}}})}};
  expect_error(load(j), {"pre_tokenizer", "last step must be ByteLevel"});
  j = minimal();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error(load(j), {"decoder", "WordPiece"});
  j = minimal();
  j["model"]["byte_fallback"] = true;
  EXPECT_TRUE(load(j).ok()) << "byte_fallback never fires: every byte has a token";
  j = minimal();
  j["model"]["continuing_subword_prefix"] = "##";
  expect_error(load(j), {"model.continuing_subword_prefix"});
  j = minimal();
  j["model"]["dropout"] = 0.1;
  expect_error(load(j), {"model.dropout"});
  j = minimal();
  j["truncation"] = {{"max_length", 8}};
  expect_error(load(j), {"truncation"});
  j = minimal();
  j["added_tokens"][0]["single_word"] = true;
  expect_error(load(j), {"added_tokens[0].single_word"});
  j = minimal();
  j["extra"] = 1;
  expect_error(load(j), {"extra"});
}

TEST(TokenizerLoad, BadRegexes) {
  Json j = minimal();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       Json::array(
           {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
            {{"type", "ByteLevel"}}})}};
  expect_error(load(j), {"pretokenizers[0].pattern", "(unclosed", "does not compile"});
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{Greek}+";
  expect_error(load(j), {"pretokenizers[0].pattern", "\\\\p{Greek}", "not supported"});
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  expect_error(load(j), {"\\\\w"});
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "a";
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  expect_error(load(j), {"behavior", "Sideways"});
}

TEST(TokenizerLoad, MissingFile) {
  Result<Tokenizer> t = Tokenizer::from_file("/nonexistent/tokenizer.json");
  expect_error(t.status(), {"/nonexistent/tokenizer.json", "cannot open"});
}

TEST(TokenizerEncode, RejectsInvalidUtf8AndUnknownIds) {
  Result<Tokenizer> t = Tokenizer::from_json(minimal().dump(), "ok.json");
  ASSERT_TRUE(t.ok());
  expect_error(t->encode("ab\xC3(").status(), {"not valid UTF-8", "byte 2", "0xC3"});
  expect_error(t->encode("\xED\xA0\x80").status(), {"byte 0"});  // a surrogate
  const int32_t bad[] = {1, 259};
  expect_error(t->decode(bad).status(), {"ids[1] = 259", "0 to 258"});
  const int32_t neg[] = {-1};
  expect_error(t->decode(neg).status(), {"ids[0] = -1"});
  EncodeOptions bos;
  bos.add_bos = true;
  expect_error(t->encode("a", bos).status(), {"no BOS token"});
}

}  // namespace
}  // namespace mla::tok
