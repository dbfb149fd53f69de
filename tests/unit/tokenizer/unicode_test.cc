// UTF-8 helpers against Python's rules, and the regex property bridge: for every code point,
// \p{L}, \p{M}, \p{N}, \p{P}, \p{S} and \s as we compile them must match exactly the code points
// the oracle's regex engine (Oniguruma, Unicode 16.0) matches, probed by tokenizer_oracle.py.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode_delta.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace mla::tok {
namespace {

TEST(Utf8, ValidPrefix) {
  EXPECT_EQ(utf8_valid_prefix("abc"), 3u);
  EXPECT_EQ(utf8_valid_prefix("a\xC0\x80"), 1u);          // overlong
  EXPECT_EQ(utf8_valid_prefix("a\xED\xA0\x80"), 1u);      // surrogate
  EXPECT_EQ(utf8_valid_prefix("\xF4\x90\x80\x80"), 0u);   // above U+10FFFF
  EXPECT_EQ(utf8_valid_prefix("\xE4\xB8\xAD\xE4"), 3u);   // truncated
  EXPECT_EQ(utf8_valid_prefix("\xF0\x9F\x98\x80!"), 5u);  // emoji
}

TEST(Utf8, LossyMatchesMaximalSubparts) {
  // Expected strings are Python's bytes.decode("utf-8", "replace").
  const std::pair<std::string, std::string> cases[] = {
      {"\xE4\xB8", "\uFFFD"},
      {"\xE4\xB8"
       "a",
       "\uFFFD"
       "a"},
      {"\xF0\x9F\x98", "\uFFFD"},
      {"\xC0\xAF", "\uFFFD\uFFFD"},
      {"\xED\xA0\x80", "\uFFFD\uFFFD\uFFFD"},
      {"\xF4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
      {"a\x80\x80"
       "b",
       "a\uFFFD\uFFFD"
       "b"},
      {"\xE1\x80\xE2\xF0\x91\x92\xF1\xBF\x41",
       "\uFFFD\uFFFD\uFFFD\uFFFD"
       "A"},
  };
  for (const auto& [in, want] : cases) {
    std::string out;
    append_utf8_lossy(in, &out);
    EXPECT_EQ(out, want);
  }
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8_incomplete_tail("a\xE4\xB8"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE4\xB8\xAD"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\x80"), 0u);     // a stray continuation cannot complete
  EXPECT_EQ(utf8_incomplete_tail("a\xC0"), 0u);     // never a lead byte
  EXPECT_EQ(utf8_incomplete_tail("\xE0\x80"), 0u);  // E0 80 is already ill-formed
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
}

TEST(PatternTranslate, RewritesAndRefuses) {
  Result<std::string> r = translate_pattern(R"([^\r\n\p{L}]?\s+(?!\S)\u00e9)", "t");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(r->find("\\p{L}\\x{"), std::string::npos);  // Unicode 15-16 letters added
  EXPECT_EQ(r->find("\\s"), std::string::npos);
  EXPECT_NE(r->find("\\x{00e9}"), std::string::npos);
  // tiktoken's syntax in Kimi's pattern: Script=Han (Unicode 16.0) and [A&&[B]] as a lookahead.
  r = translate_pattern(R"([\p{Lu}&&[^\p{Han}]]+)", "t");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->rfind("(?:(?=[^\\p{sc:Han}\\x{2B739}", 0), 0u) << *r;
  EXPECT_NE(r->find("])[\\p{Lu}"), std::string::npos) << *r;
  EXPECT_EQ(r->back(), '+');
  for (const char* bad : {R"(\w+)", R"(\p{Greek})", R"([^a-z&&[aeiou]])", R"([a-z&&b])",
                          R"([a-z&&[b]x])", R"(\b)", R"(\h)"}) {
    Result<std::string> b = translate_pattern(bad, "f.json: pattern");
    EXPECT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("f.json: pattern"), std::string::npos);
  }
}

// The code points a compiled pattern matches, as [first, last] ranges, found by matching one
// string holding every code point (except U+0001, the separator, and surrogates).
std::vector<std::pair<uint32_t, uint32_t>> members(const std::string& pattern) {
  Result<Regex> re = Regex::compile(pattern, false, "test");
  EXPECT_TRUE(re.ok()) << re.status().to_string();
  std::string all;
  std::vector<uint32_t> at;  // byte offset → code point, for starts of characters
  std::vector<uint32_t> cp_at_offset;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp == 1 || (cp >= 0xD800 && cp < 0xE000)) continue;
    cp_at_offset.resize(all.size() + 1, 0);
    cp_at_offset[all.size()] = cp;
    append_utf8(cp, &all);
    all.push_back('\x01');
  }
  std::vector<Span> spans;
  EXPECT_TRUE(re->find_all(all, &spans).ok());
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const Span& s : spans) {
    const uint32_t cp = cp_at_offset[s.begin];
    if (!out.empty() && out.back().second + 1 == cp)
      out.back().second = cp;
    else
      out.emplace_back(cp, cp);
  }
  return out;
}

TEST(PatternTranslate, PropertiesEqualTheOracles) {
  const Json golden = testing_util::load_golden("unicode_properties_golden.json");
  for (const auto& [name, want] : golden.items()) {
    const std::string pattern = name == "s" ? "\\s" : "\\p{" + name + "}";
    const auto got = members(pattern);
    std::vector<std::pair<uint32_t, uint32_t>> expected;
    for (const Json& r : want) expected.emplace_back(r[0].get<uint32_t>(), r[1].get<uint32_t>());
    EXPECT_EQ(got, expected) << pattern;
  }
}

}  // namespace
}  // namespace mla::tok
