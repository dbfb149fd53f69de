// Tests of the JSON nesting scan every file reader applies before parsing (io/json_limits.h):
// brackets inside strings and escaped quotes do not count; the offset names the opening bracket.
#include "io/json_limits.h"

#include <gtest/gtest.h>

#include <string>

namespace mla {
namespace {

TEST(JsonLimits, DepthWithinTheLimit) {
  EXPECT_FALSE(json_depth_exceeded(""));
  EXPECT_FALSE(json_depth_exceeded("{}"));
  EXPECT_FALSE(json_depth_exceeded(std::string(64, '[') + std::string(64, ']')));
  EXPECT_FALSE(json_depth_exceeded(R"({"a": [1, {"b": [2]}], "c": {}})", 4));
  EXPECT_TRUE(json_depth_exceeded(R"({"a": [1, {"b": [2]}], "c": {}})", 3));
  // Siblings do not add up.
  EXPECT_FALSE(json_depth_exceeded("[[1],[2],[3],[4]]", 2));
}

TEST(JsonLimits, DepthOverTheLimitGivesTheOffset) {
  EXPECT_EQ(json_depth_exceeded(std::string(65, '[') + std::string(65, ']')), 64u);
  EXPECT_EQ(json_depth_exceeded(R"({"a": [{}]})", 2), 7u);
  // Unbalanced input is scanned too (the parser reports the syntax error afterwards).
  EXPECT_EQ(json_depth_exceeded(std::string(100000, '{')), 64u);
}

TEST(JsonLimits, BracketsInStringsDoNotCount) {
  const std::string deep_text = "\"" + std::string(100, '[') + "\"";
  EXPECT_FALSE(json_depth_exceeded("[" + deep_text + "]", 1));
  // An escaped quote does not end the string; an escaped backslash does not escape the quote.
  EXPECT_FALSE(json_depth_exceeded(R"(["\"[[[[", "\\"])", 1));
  EXPECT_EQ(json_depth_exceeded(R"(["\\", [[]]])", 2), 8u);
}

}  // namespace
}  // namespace mla
